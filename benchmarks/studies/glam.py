"""GLAM on BabyAI-Text at a reduced budget: the LM policy against GLAM's baselines, several seeds (a harness study).

Arms (``benchmarks/harness/``: one ``llmguide train -m`` sweep per arm, same task, seeds and budget):
  glam             Gemma 3 270M + LoRA scoring the six action strings, value head, PPO (``method=glam``)
  npae             same architecture, random weights + pretrained embeddings, action heads (``method=npae``)
  bc-bot           LoRA behavioural cloning on BabyAI-bot episodes, no RL (``method.ppo=false``)
  symbolic-ppo     our PPO on the symbolic grid observation, rollouts as the LM arms' (the control)
  symbolic-ppo-64  the same with 64-step rollouts: the longer-budget baseline
  drrn             DRRN on the same prompt text

The LM arms' rollouts follow the budget (``--steps``): ``min(16, steps / (2 num_envs))`` steps per env, minibatches of
4 prompts.  Value of a run: the success rate of its training episodes (``charts/success``), averaged over the budget
(``--value auc``).  The details section adds, per arm, the evaluation success on held-out seeds (sampled actions, as
GLAM's tests; ``--greedy`` for argmax), GLAM's generalisation tests (``--post-tests``; glam, bc-bot, drrn) and wall
time per run; the random policy's and the BabyAI bot's evaluation success on the same seeds; and the scoring
throughput, HFLM.score (context encoded once) over HFLM.naive_score (a forward per candidate), on real GLAM prompts
(``benchmarks/costs/glam_costs.py``; ``--scoring-contexts 0`` skips it).  The LM arms run at a budget this 2-core CPU
allows, far below GLAM's 1.5M steps: the report says which.

    nice python benchmarks/studies/glam.py --steps 384 --seeds 3 --task GoToLocal
    nice python benchmarks/studies/glam.py --steps 20000 --arms symbolic-ppo-64,drrn        # the baselines at a longer budget
    python benchmarks/studies/glam.py --device cuda --score-batch 32 --steps 100000         # on a GPU (exits 2 without CUDA)

Batched scoring vs one prompt at a time: ``benchmarks/costs/glam_costs.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import Study, finished_runs, main

LM = ["llm=hf", "agent.num_steps={rollout}", "agent.num_minibatches={minibatches}", "method.k_history={k_history}",
      "agent.update_epochs={epochs}", "agent.torch_threads={threads}", "llm.device={device}", "llm.dtype={dtype}",
      "method.score_batch={score_batch}"]
TESTS = ["method.post_tests=[{post_tests}]", "method.post_test_episodes={post_test_episodes}"]
LORA = ["method.lora_last_layers={lora_last_layers}"]
PPO = ["method=none", "agent=ppo", "agent.num_minibatches=2"]
ARMS = {
    "glam": ["method=glam", *LM, *LORA, *TESTS],
    "npae": ["method=npae", *LM],
    "bc-bot": ["method=glam", *LM, *LORA, "method.ppo=false", "method.bc_episodes={bc_episodes}", *TESTS],
    "symbolic-ppo": [*PPO, "agent.num_steps={rollout}"],
    "symbolic-ppo-64": [*PPO, "agent.num_steps=64"],
    "drrn": ["method=drrn", "method.k_history={k_history}", *TESTS],
}


def flags(p) -> None:
    p.add_argument("--k-history", type=int, default=2, help="observations in the prompt (GLAM: 3)")
    p.add_argument("--epochs", type=int, default=1, help="PPO epochs per update for the LM arms (GLAM: 4)")
    p.add_argument("--lora-last-layers", type=int, default=6, help="LoRA in the top N blocks only (0: all)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per LM run")
    p.add_argument("--bc-episodes", type=int, default=20)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--greedy", action="store_true", help="greedy evaluation (default: sampled actions, as GLAM)")
    p.add_argument("--post-tests", default="oov_nouns,invented_words,synonym_actions")
    p.add_argument("--post-test-episodes", type=int, default=5)
    p.add_argument("--scoring-contexts", type=int, default=8, help="GLAM prompts the scoring throughput is timed on "
                   "(0: not measured)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N for the LM arms (cuda refuses without CUDA)")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on a CUDA card that supports it, float32 on CPU")
    p.add_argument("--score-batch", type=int, default=1,
                   help="prompts per batched scoring forward (methods/glam/batched.py); 1: one at a time")


def configure(args) -> None:
    """The LM arms' rollout from the budget, their dtype (``auto``: :func:`default_dtype`, as ``llm.dtype`` takes no
    ``auto``), the evaluation settings; refuse a CUDA device without CUDA (exit 2)."""
    from llmguide.methods.glam.device import default_dtype, require_device

    if (reason := require_device(args.device)) is not None:
        print(reason)
        raise SystemExit(2)
    if args.dtype == "auto":
        args.dtype = default_dtype(args.device)
    args.num_envs = args.num_envs or 2
    args.rollout = max(1, min(16, args.steps // (2 * args.num_envs)))
    args.minibatches = max(1, args.rollout * args.num_envs // 4)   # minibatches of 4 prompts
    args.extra = [f"eval.episodes={args.eval_episodes}", f"eval.greedy={str(args.greedy).lower()}", *args.extra]


def mean_std(values: list[Any]) -> str:
    import numpy as np

    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return "n/a" if not len(v) else f"{v.mean():.2f} ± {v.std():.2f}"


def evaluations(plan) -> dict[str, dict[int, dict[str, Any]]]:
    """``{arm: {seed: {eval_success, generalisation, wall}}}`` of the finished runs (wall: from the run's config.yaml,
    written at its start, to its eval.json, written last)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm in plan.arms:
        for seed, run in finished_runs(plan, arm).items():
            result = json.loads((run / "eval.json").read_text())
            out.setdefault(arm, {})[seed] = {
                "eval_success": result.get("success_rate", float("nan")),
                "generalisation": {k: v.get("success_rate") for k, v in result.get("generalisation", {}).items()},
                "wall": (run / "eval.json").stat().st_mtime - (run / "config.yaml").stat().st_mtime}
    return out


def references(task: str, episodes: int, seeds: list[int]) -> dict[str, float]:
    """The evaluation success of a uniform random policy and of the BabyAI bot on the evaluation seeds."""
    import numpy as np

    from llmguide.envs import make_env
    from llmguide.envs.babyai.env import bot_demonstrations
    from llmguide.methods.glam.text_policy import EVAL_SEED_OFFSET

    env_cfg = {"name": "babyai", "task": task}
    rates = []
    for s in range(len(seeds)):
        seed = EVAL_SEED_OFFSET + s
        env, rng, wins = make_env(env_cfg, seed), np.random.default_rng(seed), 0
        for ep in range(episodes):
            env.reset(seed=seed + ep)
            done, info = False, {}
            while not done:
                _, _, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
                done = term or trunc
            wins += bool(info.get("success"))
        env.close()
        rates.append(wins / max(episodes, 1))
    bot = [d["success"] for d in bot_demonstrations(env_cfg, episodes, EVAL_SEED_OFFSET)]
    return {"random": float(np.mean(rates)), "bot": float(np.mean(bot))}


def details(plan) -> tuple[list[str], dict[str, Any]]:
    """Evaluation success, generalisation tests and wall time per arm; the random policy and the bot; the scoring
    throughput."""
    a = plan.args
    mode = "greedy" if a.greedy else "sampled"
    runs = evaluations(plan)
    refs = references(plan.task or "GoToLocal", a.eval_episodes, plan.seeds)
    lines = ["## Held-out success, references and generalisation", "",
             f"LM arms: Gemma 3 270M (hf, {a.dtype}, {a.threads} torch threads), {plan.steps:,} env steps, "
             f"{a.k_history} observations in the prompt, {a.epochs} PPO epoch(s), rollouts of {a.rollout} steps x "
             f"{a.num_envs} envs, LoRA in the top {a.lora_last_layers or 'all'} blocks; BC on {a.bc_episodes} bot "
             f"episodes. GLAM's paper budget is 1.5M steps. Evaluation: {a.eval_episodes} {mode} episodes on "
             "held-out seeds per run; the random policy and the BabyAI bot on the same seeds.", "",
             f"| arm | eval success ({mode}) | runs | wall s/run |", "|---|---|---|---|"]
    for arm, by_seed in runs.items():
        rows = list(by_seed.values())
        wall = sum(r["wall"] for r in rows) / len(rows)
        lines.append(f"| {arm} | {mean_std([r['eval_success'] for r in rows])} | {len(rows)} | {wall:.0f} |")
    lines += [f"| {name} | {value:.2f} | - | 0 |" for name, value in refs.items()]
    tests = [t for t in a.post_tests.split(",") if t]
    tested = {arm: list(s.values()) for arm, s in runs.items() if any(r["generalisation"] for r in s.values())}
    if tested:
        lines += ["", f"Generalisation tests ({mode}, {a.post_test_episodes} episodes per test and seed; GLAM's "
                  "post-training tests, `llmguide.methods.glam.generalisation`):", "",
                  "| arm | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
        lines += [f"| {arm} | " + " | ".join(mean_std([r["generalisation"].get(t) for r in rows]) for t in tests) + " |"
                  for arm, rows in tested.items()]
    data: dict[str, Any] = {"evaluation": runs, "references": refs, "rollout": a.rollout}
    if a.scoring_contexts > 0:
        from glam_costs import scoring_ratio  # benchmarks/costs/glam_costs.py

        s = data["scoring"] = scoring_ratio(plan.task or "GoToLocal", a.scoring_contexts, a.k_history)
        lines += ["", f"Scoring ({s['contexts']} GLAM prompts of {s['prompt_tokens']:.0f} tokens x 6 actions, 1 thread): "
                  f"shared prefix {s['shared_s_per_ctx']:.3f} s/context, naive {s['naive_s_per_ctx']:.3f} s/context, "
                  f"**ratio {s['speedup']:.2f}x**, max |diff| {s['max_abs_diff']:.2e}."]
    return [*lines, ""], data


STUDY = Study(
    name="glam",
    title="GLAM on BabyAI-Text at a reduced budget, against its baselines",
    about="The LM as the policy (GLAM, Carta et al. 2023) and GLAM's baselines on one BabyAI-Text task at a budget "
          "a CPU allows; GLAM trained for 1.5M steps.",
    arms=ARMS,
    control="symbolic-ppo",
    metric="charts/success",
    metric_name="success rate of the training episodes",
    env="babyai",
    task="GoToLocal",
    steps=384,
    seeds=3,
    value="auc",
    bins=6,
    default_arms=("glam", "npae", "bc-bot", "symbolic-ppo", "drrn"),
    order="seed",
    flags=flags,
    configure=configure,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
