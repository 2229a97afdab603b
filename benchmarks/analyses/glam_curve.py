"""GLAM's learning curve from a GPU lease, beside CPU baselines at the same env steps.

A lent GPU comes for minutes, so GLAM runs there under a wall-clock limit (``benchmarks/tools/glam_gpu.sh``) and only
their ``metrics.jsonl`` come back, as ``<lease>/train/<task>-<method>-s<seed>.metrics.jsonl``. The baselines
(``benchmarks/studies/glam.py --arms drrn,symbolic-ppo``) run on the CPU to the env steps the GLAM runs reached. This
script puts both on one axis: per run, the env steps reached, wall time, env steps/s, the training episodes'
success per bin of env steps, the policy entropy and value loss per update, and the first update whose losses
were not finite (the run stops there: its next rollout samples from NaN logits).

    python benchmarks/analyses/glam_curve.py --lease benchmarks/results/glam/gpu-h200-curve \\
        --baseline GoToLocal=runs/bench/glam/GoToLocal-10k GoToRedBall=runs/bench/glam/GoToRedBall-10k

Writes ``report.md``, ``result.json`` and ``curves.png`` into ``--lease`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from llmguide.core.rundir import read_metrics

NAME = re.compile(r"^(?P<task>.+)-(?P<method>[a-z_]+)-s(?P<seed>\d+)\.metrics\.jsonl$")


def read_run(path: Path, bin_steps: int) -> dict:
    """One run's summary from its metrics.jsonl (episode rows carry charts/success, update rows losses/*)."""
    rows = read_metrics(path)   # a copy taken mid-write may end in a torn line: skipped
    episodes = [r for r in rows if "charts/success" in r]
    updates = [r for r in rows if "losses/policy_loss" in r]
    reached = max((r["step"] for r in rows), default=0)
    nan_at = next((r["step"] for r in updates if not math.isfinite(r["losses/policy_loss"])), None)
    steps = np.array([e["step"] for e in episodes])
    success = np.array([e["charts/success"] for e in episodes], dtype=float)
    bins = []
    for lo in range(0, reached, bin_steps):
        inside = (steps > lo) & (steps <= lo + bin_steps)
        bins.append({"to": lo + bin_steps, "episodes": int(inside.sum()), "successes": int(success[inside].sum()),
                     "success": float(success[inside].mean()) if inside.any() else None})
    finite = [u for u in updates if math.isfinite(u["losses/policy_loss"])]
    skipped = [int(u["losses/skipped_minibatches"]) for u in updates if "losses/skipped_minibatches" in u]
    times = [r["time"] for r in rows if "time" in r]
    return {"steps": int(reached), "wall_s": float(times[-1] - times[0]) if len(times) > 1 else 0.0,
            "sps": float(updates[-1].get("charts/sps", float("nan"))) if updates else None,
            "episodes": len(episodes), "successes": int(success.sum()),
            "success": float(success.mean()) if len(success) else None, "nan_at": nan_at, "bins": bins,
            # GLAMPPO's guard against a non-finite gradient (None: the run predates it)
            "skipped": {"minibatches": sum(skipped), "updates": sum(s > 0 for s in skipped), "of": len(skipped)}
            if skipped else None,
            "entropy": [u["losses/entropy"] for u in finite], "value_loss": [u["losses/value_loss"] for u in finite]}


def lease_runs(lease: Path, bin_steps: int) -> dict[str, dict[str, dict[int, dict]]]:
    """``{task: {method: {seed: summary}}}`` of ``<lease>/train/*.metrics.jsonl``."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for path in sorted((lease / "train").glob("*.metrics.jsonl")):
        if (m := NAME.match(path.name)) is None:
            continue
        out.setdefault(m["task"], {}).setdefault(m["method"], {})[int(m["seed"])] = read_run(path, bin_steps)
    return out


def baseline_runs(runs: Path, bin_steps: int) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: summary}}`` of a harness run folder ``<runs>/<arm>/seed-N/metrics.jsonl``."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(runs.glob("*/seed-*/metrics.jsonl")):
        arm, seed = path.parent.parent.name, int(path.parent.name.split("-")[1])
        out.setdefault(arm, {})[seed] = read_run(path, bin_steps)
    return out


def pooled(seeds: dict[int, dict], upto: int) -> dict:
    """Success over the training episodes of all seeds that ended by env step ``upto``."""
    n = k = 0
    for run in seeds.values():
        for b in run["bins"]:
            if b["to"] <= upto:
                n += b["episodes"]
                k += b["successes"]
    return {"episodes": n, "successes": k, "success": k / n if n else None}


def fmt(x, spec=".2f") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def fmt_skipped(skip: dict | None) -> str:
    return f"{skip['minibatches']} ({skip['updates']} of {skip['of']})" if skip else "–"


def report(glam: dict, baselines: dict[str, dict], bin_steps: int,
           reached: dict[str, int] | None = None) -> tuple[list[str], dict]:
    """``reached``: the env steps per task up to which episodes are pooled (default: the furthest run's)."""
    lines, result = [], {"bin_steps": bin_steps, "tasks": {}}
    for task, methods in glam.items():
        lines += [f"## {task}", "", "| arm | seed | env steps | wall s | env steps/s | episodes | successes | "
                  "NaN losses at | skipped minibatches (updates) | entropy first → last | value loss first → last |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        entry = {"lease": methods, "baselines": baselines.get(task, {})}
        for method, seeds in methods.items():
            for seed, r in sorted(seeds.items()):
                ent = f"{fmt(r['entropy'][0])} → {fmt(r['entropy'][-1])}" if r["entropy"] else "–"
                val = f"{fmt(r['value_loss'][0], '.3g')} → {fmt(r['value_loss'][-1], '.3g')}" if r["value_loss"] else "–"
                lines.append(f"| {method} (GPU) | {seed} | {r['steps']:,} | {r['wall_s']:.0f} | {fmt(r['sps'], '.1f')} | "
                             f"{r['episodes']} | {r['successes']} | {fmt(r['nan_at'], ',')} | "
                             f"{fmt_skipped(r['skipped'])} | {ent} | {val} |")
        for arm, seeds in baselines.get(task, {}).items():
            for seed, r in sorted(seeds.items()):
                lines.append(f"| {arm} (CPU) | {seed} | {r['steps']:,} | {r['wall_s']:.0f} | {fmt(r['sps'], '.1f')} | "
                             f"{r['episodes']} | {r['successes']} | {fmt(r['nan_at'], ',')} | – | – | – |")
        upto = (reached or {}).get(task) or max((r["steps"] for s in methods.values() for r in s.values()), default=0)
        entry["common_steps"] = upto
        entry["pooled"] = {f"{m} (GPU)": pooled(s, upto) for m, s in methods.items()}
        entry["pooled"].update({f"{a} (CPU)": pooled(s, upto) for a, s in baselines.get(task, {}).items()})
        lines += ["", f"Training episodes in the {bin_steps:,}-step bins that end by env step {upto:,}, all seeds pooled:", "",
                  "| arm | episodes | successes | success |", "|---|---|---|---|"]
        lines += [f"| {a} | {p['episodes']} | {p['successes']} | {fmt(p['success'], '.3f')} |"
                  for a, p in entry["pooled"].items()]
        lines.append("")
        result["tasks"][task] = entry
    return lines, result


def plot(result: dict, path: Path, min_episodes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(result["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        entry = result["tasks"][task]
        groups = [(f"{m} (GPU)", s) for m, s in entry["lease"].items()]
        groups += [(f"{a} (CPU)", s) for a, s in entry["baselines"].items()]
        for g, (label, seeds) in enumerate(groups):
            for r in seeds.values():
                pts = [(b["to"], b["success"]) for b in r["bins"] if b["episodes"] >= min_episodes]
                if pts:
                    x, y = zip(*pts, strict=True)
                    ax.plot(x, y, marker="o", color=f"C{g}", alpha=0.7, label=label)
                    label = None   # one legend entry per arm
        ax.set(title=f"{task} (bins of >= {min_episodes} episodes)", xlabel="env steps",
               ylabel=f"training success per {result['bin_steps']:,} steps",
               ylim=(-0.05, 1.05))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lease", type=Path, required=True, help="folder with train/<task>-<method>-s<seed>.metrics.jsonl")
    p.add_argument("--baseline", nargs="*", default=[], help="TASK=RUNS: a harness run folder of CPU baselines")
    p.add_argument("--earlier", nargs="*", type=Path, default=[],
                   help="earlier leases' folders: their runs as rows '<method> [<folder name>]' beside this lease's")
    p.add_argument("--bin-steps", type=int, default=2048, help="env steps per success bin (default: 32 envs x 64)")
    p.add_argument("--min-episodes", type=int, default=8, help="curves.png: only bins with this many episodes")
    p.add_argument("--notes", type=Path, help="a Markdown file appended to report.md")
    p.add_argument("--out", type=Path, help="default: --lease")
    args = p.parse_args(argv)
    glam = lease_runs(args.lease, args.bin_steps)
    if not glam:
        print(f"glam_curve: no <task>-<method>-s<seed>.metrics.jsonl under {args.lease / 'train'}", file=sys.stderr)
        return 2
    reached = {task: max(r["steps"] for s in methods.values() for r in s.values()) for task, methods in glam.items()}
    for earlier in args.earlier:
        if not (earlier / "train").is_dir():
            print(f"glam_curve: --earlier {earlier}: no train/ folder", file=sys.stderr)
            return 2
        for task, methods in lease_runs(earlier, args.bin_steps).items():
            if task in glam:
                glam[task].update({f"{m} [{earlier.name}]": seeds for m, seeds in methods.items()})
    baselines = {}
    for item in args.baseline:
        task, sep, runs = item.partition("=")
        if not sep or not Path(runs).is_dir():
            print(f"glam_curve: --baseline {item!r}: expected TASK=RUNS with an existing folder", file=sys.stderr)
            return 2
        baselines[task] = baseline_runs(Path(runs), args.bin_steps)
    out = args.out or args.lease
    out.mkdir(parents=True, exist_ok=True)
    lines, result = report(glam, baselines, args.bin_steps, reached)
    title = "GLAM's learning curve on one GPU" + (", beside CPU baselines at the same env steps" if baselines else "")
    head = [f"# {title}", "",
            f"![training success per {args.bin_steps:,} env steps](curves.png)", ""]
    notes = [args.notes.read_text()] if args.notes else []
    (out / "report.md").write_text("\n".join(head + notes + lines) + "\n")
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out / "curves.png", args.min_episodes)
    print(f"glam_curve: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
