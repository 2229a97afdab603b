"""ELLM reproduction: ground-truth achievements per episode during intrinsic-only pretraining.

Arms (ELLM paper's controls, every one intrinsic-only, ``extrinsic_coef=0``, same PPO agent, network,
env and budget; ELLM's text action space and rules, ``env.actions=text env.ellm_rules=true``):

* ``ellm-oracle``   — ELLM with ground-truth suggestions (``method=ellm_oracle``, the reference SimpleOracle)
* ``ellm-embedded`` — ELLM with the embedded LM scoring the goal vocabulary (``method=ellm llm=embedded``)
* ``novelty``       — every executed action string pays once per episode, no success check (``method=ellm_novelty``)
* ``rnd``, ``apt``  — exploration bonuses with the env reward off
* ``no-reward``     — PPO with no reward at all
* ``ground-truth``  — PPO on the env's achievement reward: a labelled upper reference, never a baseline

Every (arm, seed) is one ``llmguide train`` process (``--jobs`` at a time).  The value per seed is the
ground-truth achievements unlocked per episode over the training episodes of the last 10% of the
budget; curves are binned over training with 95% bootstrap CIs over seeds (rliable).  Writes
``benchmarks/results/ellm_<env-id>.{md,json,png}`` (``--results``) in the format of DESIGN.md.
On ``--env-id craftax`` the rules are Craftax-Classic's (ELLM's rule changes are Crafter-only).

    python benchmarks/ellm_crafter.py --env-id crafter --seeds 3 --steps 200000 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from llmguide.core.rundir import read_metrics

COMMON = ["env.actions=text", "agent=ppo", "eval.episodes=0", "progress=false"]
CRAFTER_ONLY = ["env.ellm_rules=true"]  # ELLM's rule changes patch Crafter's game logic
ARMS = {  # label -> overrides (all intrinsic-only but the labelled upper reference)
    "ellm-oracle": ["method=ellm_oracle", "method.extrinsic_coef=0.0"],
    "ellm-embedded": ["method=ellm", "llm=embedded", "method.suggester=score", "method.extrinsic_coef=0.0"],
    # the reference conditions on the text of all ~139 open actions joined: one long sentence embedding per
    # env whenever an action is first executed (~5 steps/s with 64 envs here); we condition on one open action
    "novelty": ["method=ellm_novelty", "method.extrinsic_coef=0.0", "method.goal_choice=random"],
    "rnd": ["method=rnd", "method.extrinsic_coef=0.0"],
    "apt": ["method=apt", "method.extrinsic_coef=0.0"],
    "no-reward": ["method=none", "method.extrinsic_coef=0.0"],
    "ground-truth": ["method=none", "method.extrinsic_coef=1.0"],
}
UPPER_REFERENCE = {"ground-truth"}


def run_arm(label: str, seed: int, args: argparse.Namespace, out: Path, lm_cache: Path) -> tuple[str, int, float]:
    name = f"{label}-s{seed}"
    if args.reuse and (out / name / "eval.json").exists():
        return name, 0, 0.0
    rules = CRAFTER_ONLY if args.env_id == "crafter" else []
    overrides = [*ARMS[label], *COMMON, *rules, f"env={args.env_id}", f"seed={seed}", f"total_steps={args.steps}",
                 f"num_envs={args.num_envs}", f"env.max_steps={args.max_steps}", f"run.dir={out}",
                 f"run.name={name}", "run.overwrite=true", f"log_every={max(args.steps // 50, 1000)}", *args.extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LLMGUIDE_CACHE_DIR": str(lm_cache)}
    t0 = time.time()
    with open(out / f"{name}.log", "w") as log:
        code = subprocess.call([sys.executable, "-m", "llmguide.cli", "train", *overrides], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    return name, code, time.time() - t0


def episodes(run: Path) -> tuple[np.ndarray, np.ndarray]:
    recs = [r for r in read_metrics(run) if "charts/achievements_per_episode" in r]
    return (np.array([r["step"] for r in recs], float), np.array([r["charts/achievements_per_episode"] for r in recs],
                                                                  float))


def curve_and_value(run: Path, grid: np.ndarray, total: int) -> tuple[np.ndarray, float]:
    from llmguide.report import binned_curve

    steps, values = episodes(run)
    late = values[steps > 0.9 * total]
    late = late if late.size else values[-10:]   # a short budget: the last 10 episodes
    return binned_curve(steps, values, grid), float(late.mean()) if late.size else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", "--task", dest="env_id", default="crafter", help="env group: crafter (or craftax)")
    p.add_argument("--steps", type=int, default=200_000, help="env steps per run")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=400, help="episode cap (ELLM's reference: 400)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time")
    p.add_argument("--out", default="runs/bench_ellm_crafter")
    p.add_argument("--results", default="benchmarks/results", help="folder for ellm_crafter.{md,json,png}")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every run")
    p.add_argument("--reuse", action="store_true", help="keep finished runs already in --out")
    args = p.parse_args()

    out, res = Path(args.out), Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    res.mkdir(parents=True, exist_ok=True)
    arms = [a for a in args.arms.split(",") if a]
    lm_cache = Path(tempfile.mkdtemp(prefix="ellm_lm_cache_"))   # seed 0 pays the LM, later seeds reuse it
    jobs = [(a, s) for s in range(args.seeds) for a in arms]
    started = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, code, secs in pool.map(lambda j: run_arm(j[0], j[1], args, out, lm_cache), jobs):
            print(f"[{time.time() - started:6.0f}s] {name}: exit {code} in {secs:.0f}s", flush=True)

    from llmguide.report import interval_estimates

    grid = np.linspace(args.steps / 20, args.steps, 20)
    rules = " and rules" if args.env_id == "crafter" else ""
    summary: dict = {"task": f"{args.env_id} (ELLM text actions{rules}), intrinsic-only pretraining",
                     "budget_steps": args.steps, "metric": "ground-truth achievements unlocked per episode "
                     "(training episodes in the last 10% of the budget)", "higher_is_better": True, "arms": {}}
    rows = ["| arm | seeds | achievements / episode (mean, 95% CI) | per seed |", "|---|---|---|---|"]
    failed = []
    for arm in arms:
        seeds, values, curves = [], [], []
        for s in range(args.seeds):
            run = out / f"{arm}-s{s}"
            if not (run / "eval.json").exists():
                failed.append(f"{arm}-s{s}")
                continue
            curve, value = curve_and_value(run, grid, args.steps)
            seeds.append(s)
            values.append(value)
            curves.append(curve)
        if not curves:
            continue
        est = interval_estimates(np.nan_to_num(np.array(curves)), reps=2000)["mean"]
        final = interval_estimates(np.nan_to_num(np.array(values))[:, None], reps=2000)["mean"]
        label = f"{arm} (upper reference)" if arm in UPPER_REFERENCE else arm
        summary["arms"][arm] = {"seeds": seeds, "values": values, "upper_reference": arm in UPPER_REFERENCE,
                                "curve": {"steps": grid.tolist(), "mean": est[0].tolist(),
                                          "ci95_low": est[1][0].tolist(), "ci95_high": est[1][1].tolist()}}
        rows.append(f"| {label} | {len(seeds)} | {final[0][0]:.2f} [{final[1][0][0]:.2f}, {final[1][1][0]:.2f}] | "
                    f"{', '.join(f'{v:.2f}' for v in values)} |")
    stem = f"ellm_{args.env_id}"
    plot(summary, res / f"{stem}.png")
    (res / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    text = "\n".join([
        "# ELLM reproduction: achievements during intrinsic-only pretraining", "",
        f"{args.env_id}, ELLM's 139 text actions{rules}, PPO ({args.num_envs} envs, default agent settings"
        f"{' but `' + ' '.join(args.extra) + '`' if args.extra else ''}, the same for every arm), "
        f"{args.steps:,} env steps per run, episodes capped at {args.max_steps} steps, seeds 0..{args.seeds - 1}. "
        "Every arm but the labelled upper reference is trained on its intrinsic reward only.", "",
        *rows, "", f"Failed runs: {', '.join(failed) or 'none'}.", "", f"![curves]({stem}.png)", ""])
    (res / f"{stem}.md").write_text(text)
    print(text)
    return 1 if failed else 0


def plot(summary: dict, path: Path, ylabel: str = "ground-truth achievements / episode") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, data in summary["arms"].items():
        c = data["curve"]
        upper = data.get("upper_reference", False)
        ax.plot(c["steps"], c["mean"], "--" if upper else "-", label=arm + (" (upper ref.)" if upper else ""))
        ax.fill_between(c["steps"], c["ci95_low"], c["ci95_high"], alpha=0.15)
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    ax.set_title(summary["task"], fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
