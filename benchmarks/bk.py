"""BK reduced-scale reproduction: BK-Code / BK-Pref / BK-Goal vs plain PPO on a BabyAI-Text GoTo task.

One RND collection run, one labelling run per variant (embedded LM by default), then PPO with each
potential and plain PPO over ``--seeds`` seeds.  Writes ``<out>/bk_table.md`` and ``<out>/bk_success.png``
and prints the table.  Example (about 20-30 min on 2 shared CPU cores)::

    nice python benchmarks/bk.py --steps 20000 --seeds 3 --out runs/bench-bk
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

METHODS = ("ppo", "bk_code", "bk_pref", "bk_goal")


def overrides(args: argparse.Namespace, out: Path, *extra: str) -> list[str]:
    return ["env=babyai", f"env.task={args.task}", f"num_envs={args.num_envs}", "agent.num_steps=128",
            "progress=false", f"run.dir={out}", "run.overwrite=true", *extra]


def curve(run: Path, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Success rate of finished episodes per step bin, and the step bin centres."""
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "charts/success" in r]
    if not recs:
        return np.zeros(bins), np.zeros(bins)
    steps = np.array([r["step"] for r in recs])
    succ = np.array([r["charts/success"] for r in recs])
    edges = np.linspace(0, steps.max() + 1, bins + 1)
    idx = np.clip(np.digitize(steps, edges) - 1, 0, bins - 1)
    values = np.array([succ[idx == b].mean() if (idx == b).any() else np.nan for b in range(bins)])
    return (edges[:-1] + edges[1:]) / 2, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="GoToRedBall")
    parser.add_argument("--steps", type=int, default=20000, help="PPO env steps per run")
    parser.add_argument("--collect-steps", type=int, default=8192)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=48, help="BK-Pref pairs labelled by the LM")
    parser.add_argument("--goal-iters", type=int, default=10)
    parser.add_argument("--code-iters", type=int, default=2)
    parser.add_argument("--out", default="runs/bench-bk")
    args = parser.parse_args()

    from llmguide.core.config import load_config
    from llmguide.pipelines import bk, run

    out = Path(args.out)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    bk.collect(load_config(overrides(args, out, "method=bk_code", f"total_steps={args.collect_steps}",
                                     "run.name=data")))
    timings["collect"] = time.perf_counter() - t
    label_extra = {"bk_code": [f"method.code.iterations={args.code_iters}", "method.code.fix_retries=1"],
                   "bk_pref": [f"method.pref.num_pairs={args.pairs}"],
                   "bk_goal": [f"method.goal.iterations={args.goal_iters}"]}
    for variant, extra in label_extra.items():
        t = time.perf_counter()
        bk.label(load_config(overrides(args, out, f"method={variant}", f"method.data={out / 'data'}",
                                       f"run.name=labels-{variant}", *extra)))
        timings[f"label {variant}"] = time.perf_counter() - t
    for seed in range(args.seeds):
        for method in METHODS:
            t = time.perf_counter()
            common = overrides(args, out, f"total_steps={args.steps}", f"seed={seed}", f"run.name={method}-s{seed}")
            if method == "ppo":
                run("train", load_config([*common, "method=none"]))
            else:
                run("train", load_config([*common, f"method={method}", f"method.labels={out / ('labels-' + method)}"]))
            timings[f"train {method}"] = timings.get(f"train {method}", 0.0) + time.perf_counter() - t

    bins = 10
    rows, curves = [], {}
    for method in METHODS:
        finals, aucs, cs = [], [], []
        for seed in range(args.seeds):
            x, y = curve(out / f"{method}-s{seed}", bins)
            cs.append(y)
            finals.append(np.nanmean(y[-3:]))
            aucs.append(np.nanmean(y))
        curves[method] = (x, np.nanmean(np.array(cs), axis=0))
        summary = json.loads((out / f"labels-{method}" / "bk" / "manifest.json").read_text())["summary"] \
            if method != "ppo" else {}
        rows.append((method, np.nanmean(finals), np.nanstd(finals), np.nanmean(aucs), summary))
    base_auc = rows[0][3]
    lines = [f"# BK vs PPO on BabyAI-Text {args.task}: {args.steps} steps x {args.seeds} seeds",
             "", "| method | final success (mean ± std over seeds) | mean success over training | AUC ratio vs PPO |"
             " label summary |", "|---|---|---|---|---|"]
    for method, final, std, auc, summary in rows:
        ratio = auc / base_auc if base_auc > 0 else float("nan")
        short = json.dumps({k: v for k, v in summary.items() if not isinstance(v, dict)})[:120]
        lines.append(f"| {method} | {final:.3f} ± {std:.3f} | {auc:.3f} | {ratio:.2f} | {short} |")
    lines += ["", "Wall-clock seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())]
    table = "\n".join(lines)
    (out / "bk_table.md").write_text(table + "\n")
    print(table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, (x, y) in curves.items():
        ax.plot(x, y, label=method, marker="o")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"success rate (mean of {args.seeds} seeds)")
    ax.set_title(f"BK variants vs PPO, BabyAI-Text {args.task}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bk_success.png", dpi=100)
    print(f"plot: {out / 'bk_success.png'}")


if __name__ == "__main__":
    main()
