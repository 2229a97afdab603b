"""ELLM on Crafter at a reduced budget: ELLM (oracle goals, embedded LM) vs RND vs no intrinsic reward.

Every (method, seed) is one ``llmguide train`` run in a subprocess, all with the same agent, env
and budget.  The table reports, over the training episodes of the last half of each run,
ground-truth achievements per episode and the Crafter score (mean ± std over seeds), plus LM
calls and hit rate for the LM run.  Throughput: steps/s of the ELLM run with the embedded LM on
a cold cache (an empty cache folder) over steps/s of the no-intrinsic run, measured here in the
same invocation (``charts/sps`` of seed 0, same agent and env).

    nice python benchmarks/ellm_crafter.py --steps 20000 --seeds 3 --out runs/bench_ellm_crafter
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from llmguide.core.rundir import read_metrics

METHODS = {  # label -> overrides
    "ellm-oracle": ["method=ellm_oracle"],
    "ellm-embedded": ["method=ellm", "llm=embedded", "method.suggester=score"],
    "ellm-all-goals": ["method=ellm_all_goals"],
    "rnd": ["method=rnd"],
    "none": ["method=none"],
}
RUNNER = """
import sys
from llmguide.core.config import load_config
from llmguide.pipelines import run
sys.exit(run("train", load_config(sys.argv[1:])) or 0)
"""


def summarise(run: Path, total_steps: int) -> dict:
    """Achievements/episode and Crafter score over the episodes of the last half; sps; LM stats."""
    from llmguide.envs.crafter import ACHIEVEMENTS, achievement_summary

    records = read_metrics(run)
    episodes = [r for r in records if "charts/achievements_per_episode" in r]
    late = [r for r in episodes if r["step"] > total_steps // 2] or episodes
    ach = [{n: int(r.get(f"achievements/{n}", 0) > 0) for n in ACHIEVEMENTS} for r in late]
    out: dict = {"episodes": len(late)}
    if ach:
        s = achievement_summary(ach)
        out["achievements_per_episode"] = s["achievements_per_episode"]
        out["crafter_score"] = s["crafter_score_percent"]
    sps = [r["charts/sps"] for r in records if "charts/sps" in r]
    out["sps"] = float(sps[-1]) if sps else float("nan")
    lm = [r for r in records if r.get("lm/requests")]  # runs that asked an LM (not oracle / all goals)
    if lm:
        out["lm_calls"] = lm[-1]["lm/calls"]
        out["lm_hit_rate"] = lm[-1]["lm/hit_rate"]
        out["lm_requests"] = lm[-1]["lm/requests"]
        out["ellm_good"] = lm[-1].get("ellm/good")
    out["curve"] = [(r["step"], r["charts/achievements_per_episode"]) for r in episodes]
    return out


def fmt(values: list[float]) -> str:
    values = [v for v in values if v is not None and np.isfinite(v)]
    if not values:
        return "–"
    return f"{np.mean(values):.2f} ± {np.std(values):.2f}"


def plot(results: dict[str, list[dict]], out: Path, total_steps: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    bins = np.linspace(0, total_steps, 11)
    for label, runs in results.items():
        curves = []
        for r in runs:
            steps = np.array([s for s, _ in r["curve"]], dtype=float)
            vals = np.array([v for _, v in r["curve"]], dtype=float)
            idx = np.digitize(steps, bins[1:-1])
            curves.append([vals[idx == b].mean() if (idx == b).any() else np.nan for b in range(len(bins) - 1)])
        if not curves:
            continue
        c = np.array(curves)
        with warnings.catch_warnings():  # bins without episodes stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, low, high = np.nanmean(c, axis=0), np.nanmin(c, axis=0), np.nanmax(c, axis=0)
        centers = (bins[:-1] + bins[1:]) / 2
        ax.plot(centers, mean, marker="o", label=label)
        if len(curves) > 1:
            ax.fill_between(centers, low, high, alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("ground-truth achievements per episode")
    ax.set_title("Crafter, reduced budget (band: min–max over seeds)")
    ax.legend()
    fig.tight_layout()
    path = out / "achievements.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20000, help="env steps per run")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {list(METHODS)}")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=400, help="Crafter episode cap (ELLM's reference: 400)")
    p.add_argument("--out", default="runs/bench_ellm_crafter")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every run")
    p.add_argument("--reuse", action="store_true", help="keep finished runs already in --out (re-run the others)")
    args = p.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    methods = [m for m in args.methods.split(",") if m]
    cold_cache = Path(tempfile.mkdtemp(prefix="ellm_cold_cache_"))
    results: dict[str, list[dict]] = {m: [] for m in methods}
    started = time.time()
    for seed in range(args.seeds):
        for label in methods:
            name = f"{label}-s{seed}"
            overrides = [*METHODS[label], "env=crafter", "agent=ppo", f"seed={seed}", f"total_steps={args.steps}",
                         f"num_envs={args.num_envs}", f"env.max_steps={args.max_steps}", "eval.episodes=0",
                         "progress=false", f"run.dir={out}", f"run.name={name}", "run.overwrite=true",
                         "log_every=1000", *args.extra]
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            if label == "ellm-embedded":  # seed 0 starts from an empty LM cache; later seeds reuse it
                env["LLMGUIDE_CACHE_DIR"] = str(cold_cache)
            if args.reuse and (out / name / "checkpoints" / "latest.pt").exists():
                results[label].append({"seed": seed, "reused": True, **summarise(out / name, args.steps)})
                continue
            t0 = time.time()
            code = subprocess.call([sys.executable, "-c", RUNNER, *overrides], env=env)
            print(f"[{time.time() - started:7.0f}s] {name}: exit {code} in {time.time() - t0:.0f}s", flush=True)
            if code == 0:
                results[label].append({"seed": seed, **summarise(out / name, args.steps)})

    rows = ["| method | seeds | achievements / episode | Crafter score (%) | steps/s | LM calls | LM hit rate |",
            "|---|---|---|---|---|---|---|"]
    for label, runs in results.items():
        rows.append(
            f"| {label} | {len(runs)} | {fmt([r.get('achievements_per_episode') for r in runs])} | "
            f"{fmt([r.get('crafter_score') for r in runs])} | {fmt([r['sps'] for r in runs])} | "
            f"{fmt([r.get('lm_calls') for r in runs])} | {fmt([r.get('lm_hit_rate') for r in runs])} |")
    ratio = None
    # only runs made in this invocation are compared (same machine load)
    on = [r["sps"] for r in results.get("ellm-embedded", []) if r["seed"] == 0 and not r.get("reused")]
    off = [r["sps"] for r in results.get("none", []) if r["seed"] == 0 and not r.get("reused")]
    if on and off and off[0] > 0:
        ratio = on[0] / off[0]
    text = "\n".join([
        "# ELLM on Crafter (reduced budget)", "",
        f"Budget: {args.steps} env steps per run, {args.num_envs} envs, PPO, symbolic Crafter, episodes capped at "
        f"{args.max_steps} steps, seeds 0..{args.seeds - 1}. Achievements and score over the training episodes "
        "of the last half of each run (mean ± std over seeds).", "",
        *rows, "",
        f"Throughput, same invocation, seed 0: ELLM with the embedded LM on a cold cache / no intrinsic reward "
        f"= {ratio:.2f}" if ratio is not None else
        "Throughput ratio: not measured in this invocation (ellm-embedded or none seed 0 missing or reused).",
        "", "![achievements](achievements.png)", "",
    ])
    plot(results, out, args.steps)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "ratio_sps_ellm_cold_over_none": ratio,
                                                  "results": {k: [{kk: vv for kk, vv in r.items() if kk != "curve"}
                                                                  for r in v] for k, v in results.items()}},
                                                 indent=2))
    (out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
