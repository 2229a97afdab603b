"""GLAM on BabyAI-Text at a reduced budget: LM policy (Gemma 3 270M + LoRA, PPO) vs symbolic PPO vs random.

Every (method, seed) training run is one ``llmguide train`` in a subprocess with the same env and
env-step budget; GLAM is far slower per step (a 270M LM forward per env step, forward+backward per
PPO sample), so the budget is small and says so in the table.  Reported per method (mean ± std over
seeds): success rate of the training episodes and the final evaluation's success rate (greedy, on
held-out seeds).  Random and the BabyAI bot are evaluated on the same evaluation seeds.

Throughput: HFLM.score (context encoded once, key/value cache shared by the 6 candidates) over
HFLM.naive_score (one full forward per candidate) on real GLAM prompts, measured here in one run.

    nice python benchmarks/glam.py --steps 128 --seeds 3 --task GoToRedBall --out runs/bench_glam
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

RUNNER = """
import sys
from llmguide.core.config import load_config
from llmguide.pipelines import PIPELINES, register, run
if "glam" not in PIPELINES:
    register("glam", "train", "llmguide.pipelines.glam:train")
sys.exit(run("train", load_config(sys.argv[1:])) or 0)
"""
EVAL_SEED = 10_000  # the pipelines' evaluation seed offset


def read_metrics(path: Path) -> list[dict]:
    out = []
    for line in (path / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def train_run(label: str, overrides: list[str], out: Path, seed: int) -> dict:
    """One training subprocess; returns its training-episode successes, eval success and wall time."""
    run_dir = out / "runs"
    args = [*overrides, f"seed={seed}", f"run.dir={run_dir}", f"run.name={label}-s{seed}", "run.overwrite=true",
            "progress=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, *args], check=True, env=env)
    wall = time.perf_counter() - start
    records = read_metrics(run_dir / f"{label}-s{seed}")
    episodes = [(r["step"], r["charts/success"]) for r in records if "charts/success" in r]
    result = json.loads((run_dir / f"{label}-s{seed}" / "eval.json").read_text())
    return {"episodes": episodes, "eval_success": result.get("success_rate", float("nan")), "wall": wall,
            "steps": result.get("step", 0)}


def finished_runs(out: Path, label: str) -> list[dict]:
    """Results of earlier runs of ``label`` in ``out/runs`` that reached their evaluation (for --skip-train)."""
    runs = []
    for path in sorted((out / "runs").glob(f"{label}-s*")):
        if (path / "eval.json").exists():
            records = read_metrics(path)
            result = json.loads((path / "eval.json").read_text())
            runs.append({"episodes": [(r["step"], r["charts/success"]) for r in records if "charts/success" in r],
                         "eval_success": result.get("success_rate", float("nan")), "wall": float("nan"),
                         "steps": result.get("step", 0)})
    return runs


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
    from llmguide.envs.babyai_text import bot_demonstrations

    demos = bot_demonstrations(env_cfg, episodes, seed)
    return float(np.mean([d["success"] for d in demos]))


def scoring_ratio(task: str, contexts: int) -> dict:
    """Seconds per context of HFLM.score vs naive_score on real GLAM prompts (1 torch thread)."""
    import torch

    from llmguide.envs import make_env
    from llmguide.envs.babyai_text import ACTION_STRINGS
    from llmguide.learners.llm_policy import glam_prompt
    from llmguide.llm.hf import HFLM

    torch.set_num_threads(1)
    env = make_env({"name": "babyai", "task": task}, 0)
    rng = np.random.default_rng(0)
    prompts, captions, acts = [], [], []
    _, info = env.reset(seed=0)
    captions.append(info["caption"])
    while len(prompts) < contexts:
        prompts.append(glam_prompt(info["mission"], captions[-3:], acts[-2:] if len(captions) > 1 else [],
                                   ACTION_STRINGS))
        a = int(rng.integers(6))
        _, _, term, trunc, info = env.step(a)
        acts.append(ACTION_STRINGS[a])
        captions.append(info["caption"])
        if term or trunc:
            _, info = env.reset()
            captions, acts = [info["caption"]], []
    env.close()
    lm = HFLM()
    cands = [[" " + a for a in ACTION_STRINGS]] * len(prompts)
    lm.score(prompts[:1], cands[:1])   # warm-up
    t0 = time.perf_counter()
    shared = lm.score(prompts, cands)
    t1 = time.perf_counter()
    naive = lm.naive_score(prompts, cands)
    t2 = time.perf_counter()
    err = float(np.max(np.abs(np.array(shared) - np.array(naive))))
    return {"contexts": len(prompts), "shared_s_per_ctx": (t1 - t0) / len(prompts),
            "naive_s_per_ctx": (t2 - t1) / len(prompts), "speedup": (t2 - t1) / max(t1 - t0, 1e-9),
            "max_abs_diff": err}


def fmt(values: list[float]) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    return "n/a" if not len(v) else f"{v.mean():.2f} ± {v.std():.2f}"


def plot(results: dict[str, list[dict]], baselines: dict[str, float], out: Path, steps: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    grid = np.linspace(0, steps, 9)[1:]
    for label, runs in results.items():
        curves = []
        for r in runs:   # cumulative training success rate at each grid step
            ep = np.array(r["episodes"], dtype=float).reshape(-1, 2)
            curves.append([ep[ep[:, 0] <= g, 1].mean() if (ep[:, 0] <= g).any() else np.nan for g in grid])
        c = np.array(curves, dtype=float)
        mean, std = np.nanmean(c, 0), np.nanstd(c, 0)
        ax.plot(grid, mean, label=label)
        ax.fill_between(grid, mean - std, mean + std, alpha=0.2)
    for label, value in baselines.items():
        ax.axhline(value, ls="--", lw=1, label=f"{label} (eval)", color="grey" if label == "random" else "black")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("success rate (training episodes so far)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "glam_success.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=128, help="env steps per training run (GLAM and symbolic PPO)")
    p.add_argument("--ppo-steps", type=int, default=0, help="extra budget for symbolic PPO (0: same as --steps)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--task", default="GoToRedBall", help="BabyAI-Text task (GoToLocal is hopeless at tiny budgets)")
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--scoring-contexts", type=int, default=8)
    p.add_argument("--skip-train", action="store_true",
                   help="no training: tabulate the finished runs already in --out, the baselines and the scoring ratio")
    p.add_argument("--out", default="runs/bench_glam")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = ["env=babyai", f"env.task={args.task}", f"num_envs={args.num_envs}",
              f"eval.episodes={args.eval_episodes}"]
    rollout = max(1, min(16, args.steps // (2 * args.num_envs)))
    methods = {
        "glam-lora": [*common, "method=glam", "llm=hf", f"total_steps={args.steps}",
                      f"method.rollout_steps={rollout}"],
        "symbolic-ppo": [*common, "method=none", "agent=ppo", f"total_steps={args.ppo_steps or args.steps}",
                         f"agent.num_steps={rollout}", "agent.num_minibatches=2"],
    }
    results: dict[str, list[dict]] = {k: finished_runs(out, k) if args.skip_train else [] for k in methods}
    if not args.skip_train:
        for seed in range(args.seeds):
            for label, overrides in methods.items():
                print(f"[glam bench] {label} seed {seed}", flush=True)
                results[label].append(train_run(label, overrides, out, seed))
    env_cfg = {"name": "babyai", "task": args.task}
    baselines = {"random": float(np.mean([random_success(env_cfg, args.eval_episodes, EVAL_SEED + s)
                                          for s in range(args.seeds)])),
                 "bot": bot_success(env_cfg, args.eval_episodes, EVAL_SEED)}
    scoring = scoring_ratio(args.task, args.scoring_contexts)

    lines = [f"# GLAM on BabyAI-Text {args.task}: {args.steps} env steps, {args.seeds} seeds, "
             f"{args.num_envs} envs, {args.eval_episodes} greedy eval episodes", "",
             "| method | steps | train success | eval success | wall s/run |", "|---|---|---|---|---|"]
    for label, runs in results.items():
        if runs:
            train = [float(np.mean([s for _, s in r["episodes"]])) if r["episodes"] else float("nan") for r in runs]
            lines.append(f"| {label} | {runs[0]['steps']} | {fmt(train)} | {fmt([r['eval_success'] for r in runs])} "
                         f"(n={len(runs)}) | {np.mean([r['wall'] for r in runs]):.0f} |")
    for label, value in baselines.items():
        lines.append(f"| {label} | 0 | n/a | {value:.2f} | 0 |")
    lines += ["", f"Scoring ({scoring['contexts']} GLAM prompts x 6 actions, Gemma 3 270M, 1 thread): "
              f"shared prefix {scoring['shared_s_per_ctx']:.3f} s/context, naive {scoring['naive_s_per_ctx']:.3f} "
              f"s/context, **ratio {scoring['speedup']:.2f}x**, max |diff| {scoring['max_abs_diff']:.2e}."]
    if any(results.values()):
        lines += ["", f"![success]({plot(results, baselines, out, args.steps).name})"]
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"results": results, "baselines": baselines, "scoring": scoring,
                                                  "args": vars(args)}, indent=2))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
