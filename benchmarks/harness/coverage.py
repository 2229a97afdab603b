"""Each arm's answer-table coverage (issue 66): the share of its training steps whose query its table answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# --- answer-table coverage per arm (issue 66) ----------------------------------------------------------------
# An arm that reads an answer table (llm.table) logs lm/table_coverage: the share of its training steps whose query
# the table answered. An arm asked less than the others is not a fair comparison: every such arm should answer
# >= 90 % of its steps, within 5 points of the others'.
COVERAGE_KEY = "table_coverage"   # lm/table_coverage, its last logged value in the run's metrics.jsonl
# a table with a declared fallback (llm.table_fallback=nearest) answers a state it lacks with its most similar
# state's answer: coverage counts those steps; the share answered for the step's own state is logged apart by the
# method (<method>/table_exact_fraction, e.g. ellm/) and reported beside it
EXACT_SUFFIX = "/table_exact_fraction"
MIN_COVERAGE, COVERAGE_GAP = 0.90, 0.05


def arm_coverage(done: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each arm's answer-table coverage over its finished runs: ``{"mean", "min", "max", "per_seed", "seeds"}``
    plus, where the method logs it, ``"exact"``: the same summary of the share of steps answered for their own state
    (not by the fallback); None for an arm that reads no table (logs no ``lm/table_coverage``)."""
    from llmguide.report.runs import lm_stats, load_run

    per_arm: dict[str, dict[Any, float]] = {}
    exact: dict[str, dict[Any, float]] = {}
    for path in map(Path, done):
        run = load_run(path)
        seed = run.seed if run.seed is not None else path.name
        values = per_arm.setdefault(path.parent.name, {})
        if (value := lm_stats(run).get(COVERAGE_KEY)) is not None:
            values[seed] = value
            if (own := _last_exact(run.records)) is not None:
                exact.setdefault(path.parent.name, {})[seed] = own
    summary = summarize_coverage(per_arm)
    for arm, own in summarize_coverage(exact).items():
        if summary.get(arm) and own:
            summary[arm]["exact"] = own
    return summary


def _last_exact(records: list[dict[str, Any]]) -> float | None:
    """The last logged ``<method>/table_exact_fraction`` of a run's records, or None."""
    for rec in reversed(records):
        for key, value in rec.items():
            if key.endswith(EXACT_SUFFIX) and isinstance(value, int | float):
                return float(value)
    return None


def summarize_coverage(per_arm: dict[str, dict[Any, float]]) -> dict[str, dict[str, Any] | None]:
    """``{arm: {seed: coverage}}`` -> :func:`arm_coverage`'s summary (None for an arm without a value)."""
    return {arm: {"mean": sum(v.values()) / len(v), "min": min(v.values()), "max": max(v.values()),
                  "per_seed": {str(s): x for s, x in sorted(v.items(), key=lambda sv: str(sv[0]))}, "seeds": len(v)}
            if v else None for arm, v in per_arm.items()}


def coverage_warnings(coverage: dict[str, dict[str, Any] | None]) -> list[str]:
    """One line per problem: an arm under :data:`MIN_COVERAGE`, and arms more than :data:`COVERAGE_GAP` apart."""
    covered = {arm: c["mean"] for arm, c in coverage.items() if c}
    out = [f"`{arm}` answers {mean:.3f} of its training steps from its table (under {MIN_COVERAGE:.2f})"
           for arm, mean in covered.items() if mean < MIN_COVERAGE]
    if covered and max(covered.values()) - min(covered.values()) > COVERAGE_GAP:
        low, high = min(covered, key=covered.get), max(covered, key=covered.get)
        out.append(f"coverage differs by {100 * (covered[high] - covered[low]):.1f} points between arms (more than "
                   f"{100 * COVERAGE_GAP:.0f}): `{low}` {covered[low]:.3f} to `{high}` {covered[high]:.3f}")
    return out


def coverage_section(coverage: dict[str, dict[str, Any] | None]) -> list[str]:
    """``## Answer-table coverage``: each arm's share of training steps its table answered; [] when no arm reads one."""
    if not any(coverage.values()):
        return []
    lines = ["## Answer-table coverage", "", "The share of each arm's training steps whose query its answer table "
             "answered (`lm/table_coverage`, last logged value per run), over its seeds; an arm that reads no table: "
             "–. Arms compare fairly when each answers at least "
             f"{MIN_COVERAGE:.0%} of its steps, within {100 * COVERAGE_GAP:.0f} points of the others.", ""]
    exact = any(c and c.get("exact") for c in coverage.values())
    if exact:
        lines += ["A table with a declared fallback (`llm.table_fallback=nearest`) answers a state it lacks with its "
                  "most similar state's answer, the same rule in every arm; *own state* is the share of steps "
                  "answered for their own state (`<method>/table_exact_fraction`, mean [min, max] over seeds).", ""]
    lines += ["| arm | coverage (mean) | min | max | seeds |" + (" own state |" if exact else ""),
              "|---|---|---|---|---|" + ("---|" if exact else "")]
    for arm, c in coverage.items():
        own = (c or {}).get("exact")
        tail = (f" {own['mean']:.3f} [{own['min']:.3f}, {own['max']:.3f}] |" if own else " – |") if exact else ""
        lines.append(f"| {arm} | " + (f"{c['mean']:.3f} | {c['min']:.3f} | {c['max']:.3f} | {c['seeds']} |" if c
                                      else "– | – | – | – |") + tail)
    return [*lines, ""]


