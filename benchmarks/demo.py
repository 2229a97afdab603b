"""The last lines of ``make demo``: what the three arms unlocked, and what the difference between the first two means.

    python benchmarks/demo.py runs/demo      # runs/demo/{ellm-gemma,ellm-random,no-reward}/seed-0
"""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ holds scripts named like packages (craftax.py): keep it off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

METRIC = "charts/achievements_per_episode"
ARMS = {"ellm-gemma": "ELLM, Gemma's suggestions", "ellm-random": "ELLM, a random suggester",
        "no-reward": "no reward"}
STUDY = "benchmarks/results/ellm_craftax/open-lm-120k/report.md"


def last_tenth(run_dir: Path) -> float | None:
    """Achievements per episode over the run's last 10 % of logged steps (None without episodes)."""
    from llmguide.report.runs import final_value, load_run, metric_series

    steps, values = metric_series(load_run(run_dir), METRIC)
    return final_value(steps, values) if len(steps) else None


def main(root: str) -> int:
    values = {arm: last_tenth(Path(root) / arm / "seed-0") for arm in ARMS}
    for arm, text in ARMS.items():
        value = values[arm]
        print(f"  {text:<28} {'n/a' if value is None else f'{value:.2f}'} achievements per episode (last 10 %)")
    lm, random = values["ellm-gemma"], values["ellm-random"]
    if lm is not None and random is not None:
        print(f"Gemma − random suggester = {lm - random:+.2f} achievements per episode: what Gemma's knowledge adds "
              "over a suggester without it (both answer from tables over the same states). One seed is within noise; "
              f"the 10-seed measurement: {STUDY}")
    print(f"report: {Path(root) / 'report' / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/demo"))
