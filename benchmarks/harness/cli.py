"""The entry points: :func:`main` runs a study as its script's command line says; :func:`command` is
``python benchmarks/harness`` (``--index``, ``--reproduce``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .artifacts import ArtifactChanged, check_artifacts
from .index import write_index
from .plan import Plan, make_plan
from .provenance import record_session, tree_state
from .report import write_results
from .run import finished_runs, run_arms, validate
from .study import Study, build_parser
from .where import RESULTS


def lost_arms(plan: Plan) -> list[str]:
    """The arms of the report already in ``plan.out`` that this call's report would drop for good: not among this
    call's arms, and with no finished run in its runs folder to report them again from."""
    path = plan.out / "result.json"
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_text()).get("arms", {})
    except (OSError, ValueError):
        return []
    return [arm for arm in old if arm not in plan.arms and (arm not in plan.study.arms or not finished_runs(plan, arm))]


def main(study: Study, argv: list[str] | None = None) -> int:
    """Run ``study`` as its command line says; 0 when every run finished."""
    args = build_parser(study).parse_args(argv)
    plan = make_plan(study, args)
    plan.argv = list(sys.argv) if argv is None else [sys.argv[0], *argv]   # a call from Python: its own arguments
    lost = [] if args.dry_run or args.prepare_only or args.replace_report else lost_arms(plan)
    if lost:   # e.g. a subset of arms run into a study's default variant: its committed report would lose rows
        print(f"harness: {plan.out / 'result.json'} reports arms {lost} that this call would drop (not in --arms, "
              f"no finished run in {plan.runs}): pass --variant NAME for this subset, or --replace-report",
              file=sys.stderr)
        return 2
    print(f"{plan.name}/{plan.variant}: arms {plan.arms} x seeds {plan.seeds}, {plan.steps:,} steps; runs in "
          f"{plan.runs}; results in {plan.out}", flush=True)
    if not (args.dry_run or args.report_only):   # a study trains from one commit
        state = tree_state()
        if state and state["dirty"] and not args.allow_dirty:
            print(f"harness: src/ or benchmarks/ have uncommitted changes (diff sha256 {state['diff_sha256'][:12]}): "
                  "commit them and train from the commit, or pass --allow-dirty (the diff is kept with the runs)",
                  file=sys.stderr)
            return 2
        record_session(plan, state)
    if study.prepare:
        study.prepare(plan)
    try:
        if not (args.dry_run or args.report_only):   # the artifacts' sha256, recorded or checked against the record
            check_artifacts(plan, plan.rebuilt)
        if args.prepare_only:
            return 1 if plan.failed else 0
        if args.dry_run:
            errors = plan.errors + validate(plan)
            run_arms(plan, args.resume, dry_run=True)
            for err in errors:
                print(f"config error: {err}", file=sys.stderr)
            return 1 if errors else 0
        if not args.report_only:
            run_arms(plan, args.resume, dry_run=False)
    except ArtifactChanged as changed:
        print(changed, file=sys.stderr)
        return 2
    return write_results(plan, args.reps)


def command(argv: list[str] | None = None) -> int:
    """``python benchmarks/harness --index`` (regenerate the results' index) or ``--reproduce FOLDER`` (rerun a
    stored study and compare, :mod:`harness.reproduce`)."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--reproduce" or a.startswith("--reproduce=") for a in argv):
        from . import reproduce

        return reproduce.main(argv)
    parser = argparse.ArgumentParser(prog="benchmarks/harness",
                                     description="regenerate benchmarks/results/README.md, or rerun a stored study "
                                                 "(--reproduce benchmarks/results/<study>/<variant>, see "
                                                 "benchmarks/harness/reproduce.py)")
    parser.add_argument("--index", action="store_true", help="regenerate the index from every result.json")
    parser.add_argument("--results", type=Path, default=RESULTS)
    ns = parser.parse_args(argv)
    if not ns.index:
        parser.error("run a study script (e.g. benchmarks/studies/ellm_crafter.py), --index, or --reproduce FOLDER")
    print(write_index(ns.results))
    return 0
