"""GLAM on BabyAI-Text at a reduced budget: the LM policy against GLAM's baselines, several seeds.

Methods (each training run is one ``llmguide train`` subprocess on the same task):
  glam          Gemma 3 270M + LoRA scoring the six action strings, value head, PPO (``method=glam``)
  npae          same architecture, random weights + pretrained embeddings, action heads (``method=npae``)
  bc-bot        LoRA behavioural cloning on BabyAI-bot episodes, no RL (``method.ppo=false``)
  symbolic-ppo  our PPO on the symbolic grid observation, at the LM budget and at ``--long-steps``
  drrn          DRRN on the same prompt text, at the LM budget and at ``--long-steps``
  random, bot   evaluated on the same evaluation seeds

Per method (mean ± std over seeds): success rate of the training episodes, evaluation success on
held-out seeds (sampled actions, as GLAM's tests; ``--greedy`` for argmax), wall time; GLAM's generalisation tests (``--post-tests``) on the trained
GLAM, BC and DRRN agents; a plot of training success vs environment steps.  The LM methods run at
a budget this 2-core CPU allows (``--steps``), which is far below GLAM's 1.5M: the table says which.

Throughput: HFLM.score (context encoded once, key/value cache shared by the 6 candidates) over
HFLM.naive_score (one full forward per candidate) on real GLAM prompts, measured in this run.

    nice python benchmarks/glam.py --steps 384 --long-steps 20000 --seeds 3 --task GoToLocal --out runs/bench_glam
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from llmguide.core.rundir import read_metrics
from llmguide.methods.glam.text_policy import EVAL_SEED_OFFSET as EVAL_SEED

RUNNER = "import sys; from llmguide.cli import main; sys.exit(main(sys.argv[1:]))"


def collect(path: Path, wall: float) -> dict:
    """Training-episode successes, evaluation and generalisation results of one finished run."""
    records = read_metrics(path)
    result = json.loads((path / "eval.json").read_text())
    return {"episodes": [(r["step"], r["charts/success"]) for r in records if "charts/success" in r],
            "eval_success": result.get("success_rate", float("nan")), "steps": result.get("step", 0),
            "generalisation": {k: v.get("success_rate") for k, v in result.get("generalisation", {}).items()},
            "wall": wall}


def train_run(label: str, overrides: list[str], out: Path, seed: int) -> dict:
    """One ``llmguide train`` subprocess; returns :func:`collect` of its run dir."""
    run_dir = out / "runs"
    args = ["train", *overrides, f"seed={seed}", f"run.dir={run_dir}", f"run.name={label}-s{seed}",
            "run.overwrite=true", "progress=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, *args], check=True, env=env)
    return collect(run_dir / f"{label}-s{seed}", time.perf_counter() - start)


def finished_runs(out: Path, label: str) -> list[dict]:
    """Earlier runs of ``label`` in ``out/runs`` that reached their evaluation (for --skip-train); wall time
    from the run dir's ``config.yaml`` (written at the start) to its ``eval.json`` (written last)."""
    return [collect(p, (p / "eval.json").stat().st_mtime - (p / "config.yaml").stat().st_mtime)
            for p in sorted((out / "runs").glob(f"{label}-s*")) if (p / "eval.json").exists()]


def random_success(env_cfg: dict, episodes: int, seed: int) -> float:
    """Success rate of a uniform random policy on the evaluation seeds."""
    from llmguide.envs import make_env

    env = make_env(env_cfg, seed)
    rng = np.random.default_rng(seed)
    wins = 0
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        done, info = False, {}
        while not done:
            _, _, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
            done = term or trunc
        wins += bool(info.get("success"))
    env.close()
    return wins / max(episodes, 1)


def bot_success(env_cfg: dict, episodes: int, seed: int) -> float:
    from llmguide.envs.babyai.env import bot_demonstrations

    return float(np.mean([d["success"] for d in bot_demonstrations(env_cfg, episodes, seed)]))


def scoring_ratio(task: str, contexts: int, k_history: int) -> dict:
    """Seconds per context of HFLM.score vs naive_score on real GLAM prompts (1 torch thread)."""
    import torch

    from llmguide.envs import make_env
    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.policy import History

    torch.set_num_threads(1)
    env = make_env({"name": "babyai", "task": task}, 0)
    rng = np.random.default_rng(0)
    history = History(1, k_history)
    _, info = env.reset(seed=0)
    history.reset(0, info["mission"], info["caption"])
    prompts = []
    while len(prompts) < contexts:
        prompts += history.prompts(ACTION_STRINGS)
        a = int(rng.integers(6))
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            _, info = env.reset()
            history.reset(0, info["mission"], info["caption"])
        else:
            history.step(0, ACTION_STRINGS[a], info["caption"])
    env.close()
    lm = HFLM()
    cands = [[" " + a for a in ACTION_STRINGS]] * len(prompts)
    lm.score(prompts[:1], cands[:1])   # warm-up
    t0 = time.perf_counter()
    shared = lm.score(prompts, cands)
    t1 = time.perf_counter()
    naive = lm.naive_score(prompts, cands)
    t2 = time.perf_counter()
    return {"contexts": len(prompts), "prompt_tokens": float(np.mean([len(lm._context_ids(p)) for p in prompts])),
            "shared_s_per_ctx": (t1 - t0) / len(prompts), "naive_s_per_ctx": (t2 - t1) / len(prompts),
            "speedup": (t2 - t1) / max(t1 - t0, 1e-9),
            "max_abs_diff": float(np.max(np.abs(np.array(shared) - np.array(naive))))}


def lockstep_prompts(task: str, num_envs: int, steps: int, k_history: int, seed: int = 0) -> list[list[str]]:
    """GLAM prompts of ``num_envs`` envs stepped together by uniform random actions: one list per step."""
    from llmguide.envs import make_env
    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.methods.glam.policy import History

    rng = np.random.default_rng(seed)
    envs = [make_env({"name": "babyai", "task": task}, seed + i) for i in range(num_envs)]
    history = History(num_envs, k_history)
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seed + i)
        history.reset(i, info["mission"], info["caption"])
    out = []
    for _ in range(steps):
        out.append(history.prompts(ACTION_STRINGS))
        for i, env in enumerate(envs):
            a = int(rng.integers(len(ACTION_STRINGS)))
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                _, info = env.reset()
                history.reset(i, info["mission"], info["caption"])
            else:
                history.step(i, ACTION_STRINGS[a], info["caption"])
    for env in envs:
        env.close()
    return out


def batching_ratio(task: str, num_envs: int, k_history: int, steps: int = 4, threads: int = 2,
                   lora_last_layers: int = 6, device: str = "cpu", dtype: str = "float32") -> dict:
    """GLAM's acting and update cost with one prompt per forward (``method.score_batch=1``) vs all the
    envs' prompts in one forward (``score_batch=num_envs``), on the same real prompts and LoRA policy:
    seconds per lock-step of ``num_envs`` envs (act: log-probs + values, no gradient), seconds per PPO
    sample (forward + backward over all the prompts as one minibatch), env steps/s of acting alone and of
    acting plus one PPO epoch, and the largest log-prob difference between the two paths."""
    import torch

    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.policy import LMPolicy, apply_lora

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    prompts = lockstep_prompts(task, num_envs, steps, k_history)
    lm = HFLM(device=device, dtype=dtype, trainable=True)
    apply_lora(lm, last_layers=lora_last_layers)
    policy = LMPolicy(lm, ACTION_STRINGS)
    flat = [p for step in prompts for p in step]
    out: dict = {"task": task, "num_envs": num_envs, "lock_steps": steps, "threads": threads, "device": device,
                 "prompt_tokens": float(np.mean([len(lm._context_ids(p)) for p in flat]))}
    logps = {}
    for batch in (1, num_envs):
        policy.score_batch = batch
        with torch.no_grad():
            policy(prompts[0])                                   # warm-up
        t0 = time.perf_counter()
        with torch.no_grad():
            logps[batch] = torch.cat([policy(step)[0] for step in prompts]).float().cpu().numpy()
        act = (time.perf_counter() - t0) / steps
        t1 = time.perf_counter()
        logp, values = policy(flat)
        (logp[:, 0].sum() + values.sum()).backward()
        policy.zero_grad(set_to_none=True)
        update = (time.perf_counter() - t1) / len(flat)
        out[f"batch{batch}"] = {"act_s_per_lockstep": act, "update_s_per_sample": update,
                                "act_steps_per_s": num_envs / act,
                                "act_update_steps_per_s": 1.0 / (act / num_envs + update)}
        print(f"[glam batching] score_batch={batch}: act {act:.3f} s per {num_envs}-env step, "
              f"update {update:.3f} s/sample", flush=True)
    out["max_abs_logp_diff"] = float(np.max(np.abs(logps[1] - logps[num_envs])))
    out["act_speedup"] = out[f"batch{num_envs}"]["act_steps_per_s"] / out["batch1"]["act_steps_per_s"]
    out["act_update_speedup"] = (out[f"batch{num_envs}"]["act_update_steps_per_s"]
                                 / out["batch1"]["act_update_steps_per_s"])
    return out


def batching_report(b: dict) -> str:
    """The before/after table of :func:`batching_ratio`."""
    n = b["num_envs"]
    lines = [f"# GLAM batched scoring on BabyAI-Text {b['task']}: {n} envs, {b['device']}, {b['threads']} torch threads",
             "", f"Gemma 3 270M + LoRA (value head on the same pass), {b['lock_steps']} lock-steps of {n} real GLAM "
             f"prompts ({b['prompt_tokens']:.0f} tokens on average) under uniform random actions. Before: one prompt "
             f"per forward (`method.score_batch=1`); after: the {n} prompts in one left-padded forward, shared prefix "
             f"reused for the candidates (`method.score_batch={n}`). PPO update: forward + backward over all "
             f"{n * b['lock_steps']} prompts as one minibatch.", "",
             "| scoring | act s per step of all envs | env steps/s (act) | update s per sample | env steps/s (act + 1 epoch) |",
             "|---|---|---|---|---|"]
    for batch, label in ((1, "one prompt per forward"), (n, f"{n} prompts per forward")):
        r = b[f"batch{batch}"]
        lines.append(f"| {label} | {r['act_s_per_lockstep']:.3f} | {r['act_steps_per_s']:.1f} | "
                     f"{r['update_s_per_sample']:.3f} | {r['act_update_steps_per_s']:.2f} |")
    lines += ["", f"Speed-up: **{b['act_speedup']:.2f}x** acting, **{b['act_update_speedup']:.2f}x** acting + one "
              f"PPO epoch; largest log-prob difference between the two paths {b['max_abs_logp_diff']:.1e} "
              "(same log-probs to 1e-4 when below it)."]
    return "\n".join(lines) + "\n"


def fmt(values: list[float]) -> str:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return "n/a" if not len(v) else f"{v.mean():.2f} ± {v.std():.2f}"


def success_curve(runs: list[dict], grid: np.ndarray) -> np.ndarray:
    """Per run, the success rate of all training episodes finished by each step of ``grid`` (cumulative)."""
    curves = []
    for r in runs:
        ep = np.array(r["episodes"], dtype=float).reshape(-1, 2)
        curves.append([ep[ep[:, 0] <= g, 1].mean() if (ep[:, 0] <= g).any() else np.nan for g in grid])
    return np.array(curves, dtype=float)


def plot(results: dict[str, list[dict]], baselines: dict[str, float], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, runs in results.items():
        steps = max((r["steps"] for r in runs), default=0)
        if not runs or steps <= 0 or not any(r["episodes"] for r in runs):
            continue
        grid = np.linspace(0, steps, 7)[1:]
        c = success_curve(runs, grid)
        mean, std = np.nanmean(c, 0), np.nanstd(c, 0)
        episodes = sum(len(r["episodes"]) for r in runs)
        ax.plot(grid, mean, marker="o", ms=3, label=f"{label} ({episodes} episodes)")
        ax.fill_between(grid, mean - std, mean + std, alpha=0.15)
    for label, value in baselines.items():
        ax.axhline(value, ls="--", lw=1, label=f"{label} (eval)", color="grey" if label == "random" else "black")
    ax.set_xscale("log")
    ax.set_xlabel("environment steps (log)")
    ax.set_ylabel("success rate of training episodes so far")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "glam_success.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def method_overrides(args: argparse.Namespace) -> dict[str, list[str]]:
    common = ["env=babyai", f"env.task={args.task}", f"num_envs={args.num_envs}", f"eval.episodes={args.eval_episodes}",
              f"eval.greedy={str(args.greedy).lower()}"]
    rollout = max(1, min(16, args.steps // (2 * args.num_envs)))
    lm = [*common, "llm=hf", f"total_steps={args.steps}", f"agent.num_steps={rollout}",
          f"agent.num_minibatches={max(1, rollout * args.num_envs // 4)}",   # minibatches of 4 prompts
          f"method.k_history={args.k_history}", f"agent.update_epochs={args.epochs}", f"agent.torch_threads={args.threads}",
          f"llm.device={args.device}", f"llm.dtype={args.dtype}", f"method.score_batch={args.score_batch}"]
    tests = [f"method.post_tests=[{args.post_tests}]", f"method.post_test_episodes={args.post_test_episodes}"]
    lora = [f"method.lora_last_layers={args.lora_last_layers}"]
    drrn = [*common, "method=drrn", f"method.k_history={args.k_history}"]
    ppo = [*common, "method=none", "agent=ppo", "agent.num_minibatches=2"]
    return {
        "glam": [*lm, "method=glam", *lora, *tests],
        "npae": [*lm, "method=npae"],
        "bc-bot": [*lm, "method=glam", *lora, "method.ppo=false", f"method.bc_episodes={args.bc_episodes}", *tests],
        "symbolic-ppo": [*ppo, f"total_steps={args.steps}", f"agent.num_steps={rollout}"],
        "drrn": [*drrn, f"total_steps={args.steps}", *tests],
        "symbolic-ppo-long": [*ppo, f"total_steps={args.long_steps}", "agent.num_steps=64"],
        "drrn-long": [*drrn, f"total_steps={args.long_steps}", *tests],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=384, help="env steps per LM-method run (and the short baselines)")
    p.add_argument("--long-steps", type=int, default=20000, help="env steps for the -long symbolic PPO and DRRN runs")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0, help="train seeds first-seed .. seeds-1 (to split a run)")
    p.add_argument("--task", default="GoToLocal")
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--k-history", type=int, default=2, help="observations in the prompt (GLAM: 3)")
    p.add_argument("--epochs", type=int, default=1, help="PPO epochs per update for the LM methods (GLAM: 4)")
    p.add_argument("--lora-last-layers", type=int, default=6, help="LoRA in the top N blocks only (0: all)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per LM run (runs are sequential)")
    p.add_argument("--bc-episodes", type=int, default=20)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--greedy", action="store_true", help="greedy evaluation (default: sampled actions, as GLAM)")
    p.add_argument("--post-tests", default="oov_nouns,invented_words,synonym_actions")
    p.add_argument("--post-test-episodes", type=int, default=5)
    p.add_argument("--methods", default="glam,npae,bc-bot,symbolic-ppo,drrn,symbolic-ppo-long,drrn-long")
    p.add_argument("--scoring-contexts", type=int, default=8)
    p.add_argument("--batching-only", action="store_true",
                   help="only measure batched vs one-at-a-time scoring at --num-envs envs (writes batching.md/json)")
    p.add_argument("--batching-steps", type=int, default=4, help="lock-steps of --num-envs prompts it times")
    p.add_argument("--skip-train", action="store_true",
                   help="no training: tabulate the finished runs already in --out, the baselines and the scoring ratio")
    p.add_argument("--out", default="runs/bench_glam")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N for the LM methods (cuda refuses without CUDA)")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on a CUDA card that supports it, float32 on CPU")
    p.add_argument("--score-batch", type=int, default=1,
                   help="prompts per batched scoring forward (methods/glam/batched.py); 1: one at a time")
    args = p.parse_args()
    from llmguide.methods.glam.device import default_dtype, require_device

    if (reason := require_device(args.device)) is not None:
        print(reason)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.batching_only:
        b = batching_ratio(args.task, args.num_envs, args.k_history, args.batching_steps, args.threads,
                           args.lora_last_layers, args.device, args.dtype if args.dtype != "auto" else default_dtype(args.device))
        (out / "batching.json").write_text(json.dumps(b, indent=1) + "\n")
        (out / "batching.md").write_text(report := batching_report(b))
        print(report)
        return 0
    every = method_overrides(args)
    chosen = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in every]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {sorted(every)}")
    results: dict[str, list[dict]] = {m: finished_runs(out, m) if args.skip_train else [] for m in chosen}
    if not args.skip_train:
        for seed in range(args.first_seed, args.seeds):
            for label in chosen:
                print(f"[glam bench] {label} seed {seed}", flush=True)
                results[label].append(train_run(label, every[label], out, seed))
                (out / "partial.json").write_text(json.dumps(results))
    env_cfg = {"name": "babyai", "task": args.task}
    baselines = {"random": float(np.mean([random_success(env_cfg, args.eval_episodes, EVAL_SEED + s)
                                          for s in range(args.seeds)])),
                 "bot": bot_success(env_cfg, args.eval_episodes, EVAL_SEED)}
    scoring = scoring_ratio(args.task, args.scoring_contexts, args.k_history)

    mode = "greedy" if args.greedy else "sampled"
    lines = [f"# GLAM baselines on BabyAI-Text {args.task}, {args.seeds} seeds, {args.num_envs} envs", "",
             f"LM methods: Gemma 3 270M (hf, float32, {args.threads} torch threads), {args.steps} env steps, "
             f"{args.k_history} observations in the prompt, {args.epochs} PPO epoch(s), LoRA in the top "
             f"{args.lora_last_layers or 'all'} blocks; BC on {args.bc_episodes} bot episodes. GLAM's paper budget "
             f"is 1.5M steps.  Evaluation: {args.eval_episodes} {mode} episodes on held-out seeds per run.", "",
             f"| method | env steps | train success | eval success ({mode}) | wall s/run |", "|---|---|---|---|---|"]
    for label, runs in results.items():
        if runs:
            train = [float(np.mean([s for _, s in r["episodes"]])) if r["episodes"] else float("nan") for r in runs]
            lines.append(f"| {label} | {runs[0]['steps']} | {fmt(train)} | {fmt([r['eval_success'] for r in runs])} "
                         f"(n={len(runs)}) | {np.nanmean([r['wall'] for r in runs]):.0f} |")
    for label, value in baselines.items():
        lines.append(f"| {label} | 0 | n/a | {value:.2f} | 0 |")
    tests = [t for t in args.post_tests.split(",") if t]
    tested = {label: runs for label, runs in results.items() if any(r["generalisation"] for r in runs)}
    if tested:
        lines += ["", f"Generalisation tests ({mode}, {args.post_test_episodes} episodes per test and seed; "
                  "GLAM's post-training tests, `llmguide.methods.glam.generalisation`):", "",
                  "| method | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
        for label, runs in tested.items():
            lines.append(f"| {label} | " + " | ".join(fmt([r["generalisation"].get(t) for r in runs]) for t in tests)
                         + " |")
    lines += ["", f"Scoring ({scoring['contexts']} GLAM prompts of {scoring['prompt_tokens']:.0f} tokens x 6 actions, "
              f"1 thread): shared prefix {scoring['shared_s_per_ctx']:.3f} s/context, naive "
              f"{scoring['naive_s_per_ctx']:.3f} s/context, **ratio {scoring['speedup']:.2f}x**, "
              f"max |diff| {scoring['max_abs_diff']:.2e}."]
    if any(results.values()):
        lines += ["", f"![success]({plot(results, baselines, out).name})"]
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"results": results, "baselines": baselines, "scoring": scoring,
                                                  "args": vars(args)}, indent=2))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
