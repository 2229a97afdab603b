"""The last lines of ``make demo``: what each arm unlocked, and what the LM added beyond its prompt.

    python benchmarks/analyses/demo.py runs/demo      # runs/demo/{ellm-qwen,ellm-prompt-only,ellm-random,no-reward}/seed-0

The arms: ELLM replaying Qwen2.5-Coder-1.5B's committed answers (a table: no Qwen download), ELLM answered by its
few-shot prompt alone (``llm=prompt_only``: the actions the prompt's worked examples name, as many as Qwen gave on
each state), ELLM with a random suggester, and no reward.  Qwen − prompt-only is what the LM added beyond its prompt.
"""

from __future__ import annotations

import sys
from pathlib import Path

METRIC = "charts/achievements_per_episode"
ARMS = {"ellm-qwen": "ELLM, Qwen's answers (replayed)", "ellm-prompt-only": "ELLM, its prompt's examples, no LM",
        "ellm-random": "ELLM, a random suggester", "no-reward": "no reward"}
STUDY = "benchmarks/results/ellm_craftax/attribution-all-120k/report.md"


def last_tenth(run_dir: Path) -> float | None:
    """Achievements per episode over the run's last 10 % of logged steps (None without episodes)."""
    from llmguide.report.runs import final_value, load_run, metric_series

    steps, values = metric_series(load_run(run_dir), METRIC)
    return final_value(steps, values) if len(steps) else None


def verdict(values: dict[str, float | None]) -> str | None:
    """One sentence: what the LM added beyond its prompt (and the prompt beyond random), on this seed."""
    lm, prompt, random = values.get("ellm-qwen"), values.get("ellm-prompt-only"), values.get("ellm-random")
    if lm is None or prompt is None or random is None:
        return None
    return (f"Beyond its prompt, Qwen added {lm - prompt:+.2f} achievements per episode (Qwen {lm:.2f} vs its "
            f"prompt's examples alone {prompt:.2f}; the prompt alone vs a random suggester {prompt - random:+.2f}), "
            f"on one seed, within noise; the seeded measurement is {STUDY}")


def main(root: str) -> int:
    values = {arm: last_tenth(Path(root) / arm / "seed-0") for arm in ARMS}
    for arm, text in ARMS.items():
        value = values[arm]
        print(f"  {text:<36} {'n/a' if value is None else f'{value:.2f}'} achievements per episode (last 10 %)")
    print(f"report: {Path(root) / 'report' / 'report.md'}")
    sentence = verdict(values)
    if sentence:
        print(sentence)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/demo"))
