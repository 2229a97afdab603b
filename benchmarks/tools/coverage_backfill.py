"""Each arm's answer-table coverage in the harness results made before the harness reported it (issue 66):
``python benchmarks/tools/coverage_backfill.py``.

A study folder whose ``result.json`` has no ``coverage`` but whose ``lm_stats.json`` (every run's last ``lm/*``
values, written with the report) holds ``lm/table_coverage`` gets what the harness now writes
(:func:`harness.arm_coverage`): ``coverage`` and ``coverage_warnings`` in ``result.json``, and in ``report.md`` the
warning under its title and the *Answer-table coverage* section before *Code*. Idempotent; the numbers already
in ``result.json`` are kept as they are (the rewrite is refused, exit 1, otherwise).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # relpaths.py beside this script

from relpaths import RESULTS, _harness, json_numbers  # noqa: E402

LM_STATS = "lm_stats.json"


def lm_stats_coverage(folder: Path, arms: list[str]) -> dict[str, dict[str, Any] | None]:
    """``arms``' coverage from the folder's ``lm_stats.json`` (a run named ``<arm>/seed-N``)."""
    stats = json.loads((folder / LM_STATS).read_text())
    per_arm: dict[str, dict[Any, float]] = {arm: {} for arm in arms}
    for arm in arms:
        for run, values in ((stats.get(arm) or {}).get("runs") or {}).items():
            if isinstance(values, dict) and isinstance(values.get("lm/table_coverage"), int | float):
                seed = re.search(r"seed-(\d+)$", run)
                per_arm[arm][int(seed.group(1)) if seed else run] = float(values["lm/table_coverage"])
    return _harness().summarize_coverage(per_arm)


def backfill(folder: Path) -> bool:
    """Backfill one study folder; False when it has coverage already or nothing to give it."""
    h = _harness()
    result_path, report_path = folder / "result.json", folder / "report.md"
    if not (result_path.is_file() and (folder / LM_STATS).is_file()):
        return False
    text = result_path.read_text()
    result = json.loads(text)
    if "coverage" in result or not isinstance(result.get("arms"), dict):
        return False
    coverage = lm_stats_coverage(folder, list(result["arms"]))
    if not any(coverage.values()):
        return False
    warnings = h.coverage_warnings(coverage)
    new = {**result, "coverage": coverage, "coverage_warnings": warnings}
    new_text = json.dumps(new, indent=1, default=str) + "\n"
    old_numbers = [v for _, v in json_numbers(result)]
    if [v for _, v in json_numbers(new)][:len(old_numbers)] != old_numbers:
        raise ValueError(f"{result_path}: the backfill would change its numbers; nothing written")
    report = report_path.read_text() if report_path.is_file() else ""
    if report:
        section = h.coverage_section(coverage)
        section[2] = (section[2] + f" Backfilled from each run's last values in [{LM_STATS}]({LM_STATS}) "
                      "(`benchmarks/tools/coverage_backfill.py`).")
        title, _, rest = report.partition("\n")
        if warnings:   # the report's first lines, as the harness writes them
            report = "\n".join([title, "", *h.code_warnings({}, [], warnings)]) + "\n" + rest.lstrip("\n")
        at = report.find("\n## Code\n")
        block = "\n".join(section)
        report = report[:at + 1] + block + "\n" + report[at + 1:] if at >= 0 else report.rstrip("\n") + "\n\n" + block
        report_path.write_text(report)
    result_path.write_text(new_text if text.endswith("\n") else new_text.rstrip("\n"))
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="results folder (default benchmarks/results)")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        print(f"coverage_backfill: {args.results} is not a folder", file=sys.stderr)
        return 2
    try:
        done = [f for f in sorted(args.results.glob("*/*/")) if backfill(f)]
    except ValueError as e:
        print(f"coverage_backfill: {e}", file=sys.stderr)
        return 1
    for folder in done:
        print(folder.relative_to(args.results))
    print(f"{len(done)} studies given their arms' answer-table coverage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
