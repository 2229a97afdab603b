"""ONI and Motif reproduction, side by side with their controls, on any NetHack/MiniHack task.

Arms (every one: PPO with the reference-style policy = glyph-crop CNN + blstats MLP + message-byte MLP -> GRU,
the same env, budget and PPO config; the env reward clipped at ±10 and multiplied by the reference's
extrinsic coefficient for the task: 0.1 on ``*Score*``, 10 on the sparse tasks, ``--extrinsic-coef`` to
override; on NetHack the reference's 28-action ``extended`` set; ``--step-penalty auto``: NLE's −0.01 per
"frozen" step on ``*Score*``, 0 on the sparse tasks, which reward success only):

- ``none``: extrinsic reward only (the control);
- ``oni_retrieval-oracle`` / ``oni_classification-oracle`` / ``oni_ranking-oracle``: ONI with the ground-truth
  labeller (``llm=oracle``: a message is helpful when it reports progress towards the task's goal), online and
  asynchronous as with an LM; every labeller is prompted with the task's goal (``nethack.task_goal``);
- ``oni_retrieval-embedded``: ONI-Retrieval labelled by the embedded LM (Gemma 3 270M, score mode); its labels
  are compared with the oracle's in the report (and by ``benchmarks/analyses/oni_agreement.py``);
- ``motif-oracle``: Motif, offline: the preparation collects the messages of an RND + extrinsic PPO agent
  (``--collect-steps``) and labels ``--num-pairs`` pairs with the oracle (``<prep>/motif-data``), then PPO
  on the Bradley-Terry reward;
- ``ellm_bow``: the ONI paper's LM-free baseline (bag-of-words cosine to the goal sentence);
- opt-in knowledge controls (``--arms``): ``oni_retrieval-shuffled`` (the oracle's labels permuted across
  messages), ``oni_retrieval-random`` (yes at ``llm.positive_rate``).

Value per seed: success rate (``--metric auto``; the episodic return on ``*Score*`` tasks, which have no
success) of the training episodes that end in the last 10% of the budget. The runs share one LM cache.

    nice -n 10 .venv/bin/python benchmarks/studies/oni.py --env-id NetHackScore-v0 --seeds 3 --steps 300000
    nice -n 10 .venv/bin/python benchmarks/studies/oni.py --env-id MiniHack-KeyRoom-Fixed-S5-v0 --seeds 3 --steps 300000

Results in ``benchmarks/results/oni/<env id>-<budget>/``. Not kept from the old script: per-arm budgets
(``--arm-steps``), ``--deadline-min``, ``--phase nethack`` (now: ``--env-id NetHackScore-v0 --arms
none,oni_retrieval-oracle --steps 20000 --seeds 1``), the random-policy reference and the per-rollout reward
diagnostics (the report's learning curves and LM table remain).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import Study, main

ARMS = {
    "none": ["method=none"],
    "oni_retrieval-oracle": ["method=oni_retrieval", "llm=oracle"],
    "oni_retrieval-embedded": ["method=oni_retrieval", "llm=embedded"],
    "oni_classification-oracle": ["method=oni_classification", "llm=oracle"],
    "oni_ranking-oracle": ["method=oni_ranking", "llm=oracle"],
    "motif-oracle": ["method=motif", "llm=oracle", "method.data_dir={prep}/motif-data"],
    "ellm_bow": ["method=ellm_bow"],
    "oni_retrieval-shuffled": ["method=oni_retrieval", "llm=shuffled"],
    "oni_retrieval-random": ["method=oni_retrieval", "llm=random"],
}
COMMON = ["env.message_obs=true", "env.reward_clip=10.0", "method.extrinsic_coef={extrinsic_coef}", "num_envs=16",
          "agent.recurrent=gru", "agent.hidden={hidden}", "agent.num_steps={num_steps}",
          "agent.update_epochs={update_epochs}", "agent.torch_threads=1", "eval.episodes=0", "log_every={log_every}"]
METRICS = {"success": ("charts/success", "training success rate (episodes ending in the last 10% of the budget)"),
           "return": ("charts/episodic_return", "training episodic return (env reward after clip ±10, before the "
                                                "extrinsic coefficient; episodes ending in the last 10%)")}


def flags(p) -> None:
    p.add_argument("--num-steps", type=int, default=64, help="PPO rollout length per env")
    p.add_argument("--update-epochs", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--extrinsic-coef", type=float, default=None,
                   help="every arm's extrinsic coefficient (default: the reference's 0.1 on *Score*, else 10)")
    p.add_argument("--step-penalty", default="auto",
                   help="every arm's reward for a 'frozen' step: auto (NLE's -0.01 on *Score*, 0 on the sparse "
                        "tasks), task (the env's own), or a number")
    p.add_argument("--actions", default="extended", choices=("task", "extended"),
                   help="NetHack action set (extended: the reference's 28 actions); MiniHack keeps its own")
    p.add_argument("--collect-steps", type=int, default=20_000, help="Motif: env steps of the RND collection agent")
    p.add_argument("--num-pairs", type=int, default=2000, help="Motif: pairs labelled")


def step_penalty(args, env_id: str) -> float | None:
    """The reward of a "frozen" step for every arm.  ``auto``: the reference's rule.  Its Score task keeps
    NLE's −0.01 (tasks_nle.py ``NetHackScore``); its sparse tasks reward success only (``NetHackStaircase``
    and ``NetHackOracle`` override ``_reward_fn`` with 50 on success, else 0: no step penalty), so a sparse
    task here gets penalty 0 too.  None: the task's own."""
    if args.step_penalty == "auto":
        return None if "Score" in env_id else 0.0
    return None if args.step_penalty == "task" else float(args.step_penalty)


def configure(args) -> None:
    score = "Score" in args.task
    args.env = "nethack" if args.task.startswith("NetHack") else "minihack"
    if args.extrinsic_coef is None:
        args.extrinsic_coef = 0.1 if score else 10.0
    args.log_every = (args.num_envs or 16) * args.num_steps
    penalty = step_penalty(args, args.task)
    args.extra = [*([f"env.penalty_step={penalty}"] if penalty is not None else []), *args.extra]
    kind = ("return" if score else "success") if args.metric == "auto" else args.metric
    if kind in METRICS:
        args.metric, args.metric_name = METRICS[kind]
    if args.study is None:
        args.study = "oni"


def prepare(plan) -> None:
    """Motif: collect (an RND + extrinsic PPO agent's messages, pairs) -> oracle labels, into <prep>/motif-data."""
    if "motif-oracle" not in plan.arms:
        return
    a = plan.args
    base = ["method=motif", "llm=oracle", "method.data_dir={prep}/motif-data", "seed=0"]
    reason = plan.step("collect", "motif-collect", [*base, f"method.collect_steps={a.collect_steps}",
                                                    f"method.num_pairs={a.num_pairs}"],
                       done="{prep}/motif-data/collect_stats.json")
    reason = reason or plan.step("label", "motif-label", base, done="{prep}/motif-data/label_stats.json")
    if reason:
        plan.fail("motif-oracle", reason)


def labelled_messages(run: Path) -> dict[str, float | None]:
    """The annotator's labels in the run's final checkpoint (message -> label)."""
    from llmguide.core.rundir import safe_torch_load

    ckpt = run / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        return {}
    out: dict[str, float | None] = {}
    for entry in safe_torch_load(ckpt)["agent"].get("reward_modules", []):
        labels = entry.get("state", {}).get("annotator", {}).get("labels", {})
        out.update({m: y for m, y in labels.items() if isinstance(m, str)})
    return out


def agreement(labels: dict[str, float | None], goal: str | None = None) -> dict:
    """LM labels vs the oracle's ground truth (towards the same ``goal``) on the same messages."""
    import numpy as np

    from llmguide.envs.nethack.oracle import NetHackOracle
    from llmguide.methods.oni.oracle import helpful

    oracle = NetHackOracle()
    pairs = [(y > 0.5, helpful(oracle, m, goal)) for m, y in labels.items() if y is not None]
    if not pairs:
        return {"messages": 0}
    lm, gt = np.array(pairs).T
    return {"messages": len(pairs), "agreement": round(float((lm == gt).mean()), 4),
            "lm_yes_oracle_yes": int((lm & gt).sum()), "lm_yes_oracle_no": int((lm & ~gt).sum()),
            "lm_no_oracle_yes": int((~lm & gt).sum()), "lm_no_oracle_no": int((~lm & ~gt).sum()),
            "oracle_helpful": sorted(m for m in labels if helpful(oracle, m, goal))}


def details(plan) -> tuple[list[str], dict]:
    """The Motif dataset, and the embedded LM's labels against the oracle's on the messages it labelled."""
    from harness import seed_runs
    from llmguide.envs.nethack.oracle import task_goal

    out: dict = {"labelling_goal": task_goal(plan.task)}
    lines = ["## Labelling", "", f"Labelling goal of every LM/oracle arm (`nethack.task_goal`): "
             f"\"{out['labelling_goal'] or 'none (any progress)'}\".", ""]
    data = plan.prep / "motif-data"
    motif = {k: v for name in ("collect_stats.json", "label_stats.json") if (data / name).exists()
             for k, v in json.loads((data / name).read_text()).items() if not isinstance(v, dict | list)}
    if motif:
        out["motif_dataset"] = motif
        lines += [f"Motif dataset: {json.dumps(motif)}", ""]
    for arm in plan.arms:
        if arm.startswith("oni_") and not arm.endswith("-oracle"):
            labels: dict[str, float | None] = {}
            for run in seed_runs(plan, arm).values():
                labels.update(labelled_messages(run))
            if labels:
                agree = agreement(labels, out["labelling_goal"])
                out[f"{arm}_labels_vs_oracle"] = agree
                lines += [f"`{arm}` labels vs the oracle on the {agree['messages']} messages it labelled: agreement "
                          f"{agree.get('agreement', float('nan')):.2f} (LM yes/oracle yes {agree.get('lm_yes_oracle_yes')}, "
                          f"LM yes/oracle no {agree.get('lm_yes_oracle_no')}, LM no/oracle yes "
                          f"{agree.get('lm_no_oracle_yes')}, LM no/oracle no {agree.get('lm_no_oracle_no')}).", ""]
    return lines, out


STUDY = Study(
    name="oni",
    title="ONI and Motif vs extrinsic-only PPO",
    about="Reference-style policy (crop CNN + blstats MLP + message MLP -> GRU) and the same env, budget and PPO "
          "settings in every arm; env reward clipped at ±10 times the reference's extrinsic coefficient.",
    arms=ARMS,
    control="none",
    default_arms=("none", "oni_retrieval-oracle", "oni_retrieval-embedded", "oni_classification-oracle",
                  "oni_ranking-oracle", "motif-oracle", "ellm_bow"),
    metric="auto",
    metric_name="",
    common=COMMON,
    per_env={"nethack": ["env.action_set={actions}"]},   # MiniHack tasks keep their own actions
    env="minihack",
    task="MiniHack-KeyRoom-Fixed-S5-v0",
    env_id="task",
    steps=300_000,
    seeds=3,
    flags=flags,
    configure=configure,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
