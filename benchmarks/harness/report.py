"""A study's report: the finished runs' statistics (:func:`write_results`: report.md, curves.png, result.json), the
value of a run (``final`` or ``auc``) and the report's sections and warnings."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .artifacts import artifacts_section, result_artifacts
from .coverage import arm_coverage, coverage_section, coverage_warnings
from .index import PRODUCED_BY, write_index
from .paths import TEXT_SUFFIXES, plan_folders, relativize
from .plan import TASK_KEYS
from .provenance import _git_commit, code_of_arms, mixed_comparisons, run_records, sessions
from .run import run_state, seed_runs

if TYPE_CHECKING:
    from .plan import Plan

def code_warnings(mixed: dict[str, list[str]], trained: list[dict[str, Any]], coverage: list[str] = ()) -> list[str]:
    """The report's first lines: comparisons across commits (``--allow-mixed``), sessions that trained from
    uncommitted changes (``--allow-dirty``) and arms whose answer-table coverage is low or unequal."""
    lines = []
    if mixed:
        lines += [f"**Mixed code (`--allow-mixed`): {len(mixed)} comparison(s) of this report take their arms from "
                  "different commits**, so a difference may be the code's as well as the arms': " + "; ".join(
                      f"`{k}` ({', '.join(f'`{c}`' for c in v)})" for k, v in mixed.items()) + ".", ""]
    dirty = [s for s in trained if s.get("dirty")]
    if dirty:
        lines += ["**Trained from uncommitted changes (`--allow-dirty`)**: " + "; ".join(
            f"commit `{str(s.get('commit'))[:10]}` + diff sha256 `{s.get('diff_sha256')}`"
            + (f" (`{s['patch']}`)" if s.get("patch") else "") for s in dirty) + ".", ""]
    if coverage:
        lines += ["**Warning: unequal or low answer-table coverage** (see *Answer-table coverage*): "
                  + "; ".join(coverage) + ".", ""]
    return lines


def collect(plan: Plan) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """Finished run folders, failed (arm, seed) with their logs (an arm whose preparation failed: seed
    ``all`` and the reason), and the first finished run's config."""
    done, failed, cfg = [], [], {}
    for arm in plan.arms:
        if arm in plan.failed:
            failed.append({"arm": arm, "seed": "all", "log": "not trained", "reason": plan.failed[arm]})
            continue
        existing = seed_runs(plan, arm)
        for s in plan.seeds:
            run = existing.get(s)
            if run is not None and run_state(run, plan) == "done":
                done.append(str(run))
                cfg = cfg or yaml.safe_load((run / "config.yaml").read_text()) or {}
            else:
                log = plan.runs / arm / f"seed-{s}.log"
                failed.append({"arm": arm, "seed": s, "log": str(log) if log.exists() else "no log",
                               # --report-only over a seed nobody started (no folder, no log): not a failure
                               "not_run": plan.report_only and run is None and not log.exists()})
    return done, failed, cfg



def _failed_text(f: dict[str, Any]) -> str:
    if f["seed"] == "all":
        return f"{f['arm']}, every seed (not trained: {f['reason']})"
    return f"{f['arm']} seed {f['seed']} ({f['log']})"


def _task_of(cfg: dict[str, Any], plan: Plan) -> str:
    env = cfg.get("env") or {}
    if plan.task:
        return plan.task
    key = TASK_KEYS.get(plan.env, "env.task").split(".", 1)[1]
    value = env.get(key)
    return str(value) if value else "all achievements" if plan.env in ("crafter", "craftax") else "default"


def auc(steps: Any, values: Any, budget: int, bins: int) -> float:
    """:func:`llmguide.report.study.curve_auc`: the run's value with ``value="auc"``."""
    from llmguide.report.study import curve_auc

    return curve_auc(steps, values, budget, bins)


def value_text(plan: Plan) -> str:
    if plan.value == "auc":
        return (f"the area under its curve: the mean over {plan.bins} equal env-step bins of the {plan.steps:,}-step "
                "budget of the mean value logged in each bin")
    return "the mean over its last 10% of logged steps"


def auc_section(plan: Plan, done: list[str], reps: int) -> tuple[list[str], dict[str, Any]]:
    """``value="auc"``: :func:`llmguide.report.study.summarize`'s curves with every run's value replaced by
    :func:`auc`, the paired statistics of those values, and the report section of them."""
    from llmguide import stats
    from llmguide.report.runs import group_runs, load_run, metric_series, seed_key
    from llmguide.report.study import study_section, summarize

    groups = group_runs([load_run(p) for p in done], "folder")
    summary = summarize(groups, plan.metric, None, reps)
    for label, data in summary["arms"].items():
        first: dict[Any, Any] = {}
        for run in groups[label]:
            if len(metric_series(run, plan.metric)[0]):
                first.setdefault(seed_key(run), run)
        data["values"] = [auc(*metric_series(first[s], plan.metric), plan.steps, plan.bins) for s in data["seeds"]]
    control = plan.study.control
    if control in summary["arms"]:
        base = dict(zip(summary["arms"][control]["seeds"], summary["arms"][control]["values"], strict=True))
        for label, data in summary["arms"].items():
            mine = dict(zip(data["seeds"], data["values"], strict=True))
            if label != control and set(mine) & set(base):
                summary["paired"][f"{label} - {control}"] = stats.paired(mine, base, names=(label, control)).to_json()
        stats.add_holm(summary["paired"])
    else:
        summary["notes"].append(f"control `{control}` has no values; no paired statistics")
    lines = study_section(summary, plan.metric_name, control, plan.out, value_text=value_text(plan))
    lines += [f"- {n}" for n in summary["notes"]] + ([""] if summary["notes"] else [])
    return lines, summary


def write_results(plan: Plan, reps: int = 2000) -> int:
    """Report the finished runs into ``plan.out`` (report.md, curves.png, result.json); 1 if any run failed."""
    from llmguide.report import study_report

    done, failed, cfg = collect(plan)
    study = plan.study
    if not done:
        print(f"{plan.name}/{plan.variant}: no finished run in {plan.runs}" +
              "".join(f"\n  {_failed_text(f)}" for f in failed if f["seed"] == "all"), file=sys.stderr)
        return 1
    commits, code_lines = code_of_arms(done)
    records, record_lines = run_records(done)
    mixed = mixed_comparisons(commits, study.control)
    if mixed and not getattr(plan.args, "allow_mixed", False):
        which = "; ".join(f"{k}: {' '.join(v)}" for k, v in mixed.items())
        print(f"harness: {plan.name}/{plan.variant}: {len(mixed)} comparison(s) take their arms from different "
              f"commits ({which}): rerun them at one commit, or pass --allow-mixed to report them so", file=sys.stderr)
        return 2
    trained = sessions(plan)
    coverage = arm_coverage(done)
    low_coverage = coverage_warnings(coverage)
    for warning in low_coverage:
        print(f"warning: {plan.name}/{plan.variant}: {warning}", file=sys.stderr)
    plan.out.mkdir(parents=True, exist_ok=True)
    task = _task_of(cfg, plan)
    seeds = ", ".join(map(str, plan.seeds))
    intro = code_warnings(mixed, trained, low_coverage)
    intro += [study.about.strip()] if study.about.strip() else []
    intro += [f"Env `{plan.env}`, task `{task}`, {plan.steps:,} env steps per run, seeds {seeds} (common random "
              f"numbers across arms). Control: `{study.control}`. Metric: {plan.metric_name} "
              f"(`{plan.metric}`, {'higher' if study.higher_is_better else 'lower'} is better); value of a run: "
              f"{value_text(plan)}.", "",
              "| arm | overrides |", "|---|---|",
              *[f"| {a}{' (upper reference)' if a in study.upper_reference else ''} | "
                f"`{' '.join(plan.fill(study.arms[a]))}` |" for a in plan.arms], "",
              f"Every arm also gets: `{' '.join(plan.overrides)}`.", "",
              "Runs are named relative to the runs folder (`--runs`, `<runs>`); preparation folders as `<prep>`; other "
              "folders a flag names outside the repository by the flag (`--tables` as `<tables>`), the repository's "
              "files by their path in it.", ""]
    if plan.steps_done:
        intro += [f"Preparation (`{plan.prep}`): " + "; ".join(
            f"`{name}` ({r['verb']}, {r.get('state', '?')}{', ' + str(r['seconds']) + ' s' if 'seconds' in r else ''})"
            for name, r in plan.steps_done.items()) + ".", ""]
    not_run = [f for f in failed if f.get("not_run")]
    intro += ["Failed runs: " + (", ".join(_failed_text(f) for f in failed if not f.get("not_run")) or "none") + "."
              + (" Not run (no run folder, no log): " + ", ".join(f"{f['arm']} seed {f['seed']}" for f in not_run)
                 + "." if not_run else "")]
    title = study.title or f"{plan.name} / {plan.variant}"
    if plan.value == "auc":
        path, _ = study_report(done, plan.out, reps, group_by="folder", title=title, intro=intro)
        section, summary = auc_section(plan, done, reps)
        text = path.read_text()
        at = text.find("## Learning curves")
        text = text[:at] + "\n".join(section) + "\n" + text[at:] if at >= 0 else text + "\n" + "\n".join(section)
        path.write_text(text)
    else:
        path, summary = study_report(done, plan.out, reps, group_by="folder", control=study.control,
                                     metric=plan.metric, metric_name=plan.metric_name, title=title, intro=intro)
    details_lines, details = study.details(plan) if study.details else ([], {})
    artifacts, recorded = result_artifacts(plan, list(summary["arms"]))
    notes = getattr(plan.args, "notes", None)
    extra = [*details_lines, *coverage_section(coverage), *artifacts_section(artifacts, recorded), *code_lines,
             *record_lines,
             *([Path(notes).read_text().strip(), ""] if notes and Path(notes).exists() else [])]
    if extra:
        path.write_text(path.read_text().rstrip("\n") + "\n\n" + "\n".join(extra) + "\n")
    arms = {}
    for arm in plan.arms:
        if arm in summary["arms"]:
            arms[arm] = {**summary["arms"][arm], "overrides": plan.fill(study.arms[arm]),
                         "upper_reference": arm in study.upper_reference}
        elif arm in plan.failed:
            arms[arm] = {"failed": plan.failed[arm], "seeds": [], "values": [], "overrides": plan.fill(study.arms[arm])}
    result = {"study": plan.name, "variant": plan.variant, "env": plan.env, "task": task,
              "budget_steps": plan.steps, "metric": plan.metric_name, "metric_key": plan.metric,
              "value": {"kind": plan.value, **({"bins": plan.bins} if plan.value == "auc" else {"final_fraction": 0.1})},
              "higher_is_better": study.higher_is_better, "control": study.control, "arms": arms,
              "paired": summary["paired"], "seeds": plan.seeds, "common": plan.overrides, "failed": failed,
              "prepare": plan.steps_done, "details": details, "notes": summary["notes"],
              "produced_by": PRODUCED_BY, "commit": _git_commit(), "commits": commits,
              "mixed_code": mixed, "sessions": trained, "coverage": coverage, "coverage_warnings": low_coverage,
              "artifacts": artifacts, "artifacts_recorded": recorded, "run_records": records,
              "command": " ".join(plan.argv), "argv": plan.argv}
    (plan.out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    folders = plan_folders(plan)
    for written in sorted(plan.out.iterdir()):   # report.md, result.json, lm_stats.json, what a details hook wrote
        if written.suffix in TEXT_SUFFIXES and written.is_file():
            text = written.read_text()
            if (new := relativize(text, folders)) != text:
                written.write_text(new)
    print(f"{plan.name}/{plan.variant}: {path}")
    write_index(plan.results)
    if failed:
        print(f"{len(failed)} run(s) failed or not run: " + ", ".join(
            f"{f['arm']} seed {f['seed']}" if f["seed"] != "all" else f"{f['arm']} (every seed)" for f in failed),
              file=sys.stderr)
    return 1 if failed else 0


def plot_summary(summary: dict[str, Any], path: Path, ylabel: str = "") -> None:
    """Every arm's curve of a docs/design.md summary (``curve: {steps, mean, low|ci95_low, high|ci95_high}``)
    into ``path``; upper references dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for arm, data in summary["arms"].items():
        c = data.get("curve")
        if not c:
            continue
        upper = data.get("upper_reference", False)
        ax.plot(c["steps"], c["mean"], "--" if upper else "-", label=arm + (" (upper ref.)" if upper else ""))
        ax.fill_between(c["steps"], c.get("low", c.get("ci95_low")), c.get("high", c.get("ci95_high")), alpha=0.15)
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel or str(summary.get("metric", "")), fontsize=8)
    ax.set_title(str(summary.get("task", "")), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)

