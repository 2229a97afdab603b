"""The index of every study: ``benchmarks/results/README.md``, one headline row per study variant, grouped by env
and task (:func:`write_index`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .provenance import mixed_comparisons
from .where import RESULTS

PRODUCED_BY = "benchmarks/harness"                       # result.json ``produced_by`` of a harness study
HARNESS_NAMES = (PRODUCED_BY, "benchmarks/harness.py")   # and of one made before the harness was a package


def _num(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def _paired_of(result: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The result's paired statistics, or ones computed here from its per-seed values (True) when it has none."""
    if result.get("paired"):
        return result["paired"], False
    from llmguide import stats

    control = result.get("control")
    arms = result.get("arms") or {}
    if control not in arms:
        return {}, False
    base = dict(zip(arms[control].get("seeds", []), arms[control].get("values", []), strict=False))
    out = {}
    for arm, data in arms.items():
        mine = dict(zip(data.get("seeds", []), data.get("values", []), strict=False))
        if arm != control and set(mine) & set(base):
            out[f"{arm} - {control}"] = stats.paired(mine, base, names=(arm, control)).to_json()
    return out, True


def headline(result: dict[str, Any]) -> tuple[str, bool]:
    """One table cell: every arm's mean over seeds, and its paired difference against the control."""
    paired, computed = _paired_of(result)
    control = result.get("control")
    cells = []
    for arm, data in (result.get("arms") or {}).items():
        values = [v for v in data.get("values", []) if isinstance(v, int | float)]
        if not values:
            cells.append(f"{arm}: {'failed' if data.get('failed') else 'no result'}")
            continue
        text = f"{arm} {_num(sum(values) / len(values))}"
        if arm == control:
            text = f"**{text}** (control)"
        elif data.get("upper_reference"):
            text += " (upper ref.)"
        d = paired.get(f"{arm} - {control}")
        if d is not None and d.get("n", 0) >= 2:
            kind = "range" if d["n"] <= 5 else "t 95% CI"
            low, high = (d.get("interval_low"), d.get("interval_high")) if d["n"] <= 5 else (d["t_low"], d["t_high"])
            p = d.get("p")
            ptxt = "p n/a" if p is None else "p < 0.001" if p < 0.001 else f"p {p:.3f}" if p < 0.1 else f"p {p:.2f}"
            text += f" (Δ {d['mean']:+.3f}, {kind} [{_num(low)}, {_num(high)}], {ptxt})"
        cells.append(text)
    return "; ".join(cells), computed


def code_note(result: dict[str, Any]) -> str:
    """The index's word on a study's code: which produced it, and whether its arms' commits are on record
    (``commits``, issue 67) and one per comparison."""
    old = result.get("produced_by") not in HARNESS_NAMES
    commits = result.get("commits") or {}
    recorded = {arm: set(codes) - {"unrecorded"} for arm, codes in commits.items()}
    if not any(recorded.values()):
        note = "no commit record"
    elif not all(recorded.get(arm) for arm, data in (result.get("arms") or {}).items() if data.get("values")):
        note = "commits partly unrecorded"
    elif mixed_comparisons(commits, str(result.get("control"))):
        note = "mixed commits"
    else:
        note = "one commit per comparison"
    return f"{'old code' if old else 'harness'}, {note}"


def write_index(root: Path = RESULTS) -> Path:
    """``<root>/README.md``: every study variant's headline row, grouped by env and task."""
    studies, others = [], []
    for path in sorted(root.glob("*/*/result.json")):
        try:
            result = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and isinstance(result.get("arms"), dict) and result.get("control"):
            studies.append((path.parent, result))
        else:
            others.append(path.parent)
    others += [p.parent for p in sorted(root.glob("*/*/report.md")) if not (p.parent / "result.json").exists()]
    groups: dict[tuple[str, str], list[tuple[Path, dict[str, Any]]]] = {}
    for folder, result in studies:
        key = (str(result.get("env", "?")).split()[0], str(result.get("task_id") or result.get("task", "?")))
        groups.setdefault(key, []).append((folder, result))
    lines = ["# Benchmark results", "",
             "Written by `benchmarks/harness` (regenerate: `python benchmarks/harness --index`). One row per "
             "study variant, `<study>/<variant>/` holding `result.json` (`docs/design.md`'s format), `report.md` and "
             "`curves.png`; studies on the same env and task share a table. Each arm: mean over seeds of the "
             "study's metric, and its paired difference against the control (per seed, matched by seed): mean "
             "Δ, the range of the per-seed differences with <= 5 seeds (not a CI) or the t 95% CI with more, and "
             "the t-test p-value.", "",
             "*Old code*: produced by the reproduction scripts before the harness (moved here from the flat "
             "`benchmarks/results/` layout, numbers unchanged); their paired statistics are computed by this "
             "index from the per-seed values in their `result.json`.", "",
             "*Code* also says whether the commit each arm's runs were trained with is on record (`commits` in "
             "`result.json`, from each run's `provenance.jsonl`): *no commit record* (the runs predate it, so "
             "which code trained each arm is unknown), *commits partly unrecorded*, *mixed commits* (a comparison "
             "takes its arms from different commits: the harness now refuses to report that without "
             "`--allow-mixed`) or *one commit per comparison*.", "",
             "*Paths* in these files are relative, never a machine's (`tests/test_results_paths.py`): `<runs>` is a "
             "study's runs folder (a run in it `<arm>/seed-N`), `<prep>` its preparation folder, `<tables>`, "
             "`<data>`, `<notes>` ... the folders its command's flags named, `<runs-root>` the folder beside the "
             "checkout where the machines kept runs, tables and collections, `<tmp>` a machine's scratch folder; "
             "a file the repository holds is named by its path in it (`benchmarks/tools/relpaths.py` rewrote the "
             "results made before).", ""]
    for (env, task), items in sorted(groups.items()):
        lines += [f"## {env} · {task}", "",
                  "| study / variant | code | budget | seeds | metric | arms: mean (paired Δ vs control) |",
                  "|---|---|---|---|---|---|"]
        for folder, result in sorted(items, key=lambda x: (x[1].get("budget_steps") or 0, str(x[0]))):
            cell, _ = headline(result)
            rel = folder.relative_to(root).as_posix()
            seeds = sorted({s for a in result["arms"].values() for s in a.get("seeds", [])})
            budget = result.get("budget_steps")
            budget = f"{budget:,}" if isinstance(budget, int) else "?"
            lines.append(f"| [{rel}]({rel}/report.md) | {code_note(result)} | {budget} | {len(seeds)} | "
                         f"{result.get('metric', '?')} | {cell} |")
        lines.append("")
    if others:
        lines += ["## Other results (costs, analyses)", "", "| folder | title | verdict |", "|---|---|---|"]
        for folder in sorted(set(others)):
            rel = folder.relative_to(root).as_posix()
            md = folder / "report.md"
            text = md.read_text().splitlines() if md.exists() else []
            title = next((ln.lstrip("# ").strip() for ln in text if ln.startswith("#")), "")
            # a report's own verdict line ("**Verdict:** ..."), shown beside its title
            verdict = next((ln.split("**Verdict:**", 1)[1].strip() for ln in text if "**Verdict:**" in ln), "")
            lines.append(f"| [{rel}]({rel}/{'report.md' if md.exists() else 'result.json'}) | {title} | {verdict} |")
        lines.append("")
    path = root / "README.md"
    path.write_text("\n".join(lines))
    return path


