"""One harness for reproductions: an arm table x seeds -> ``llmguide train -m`` -> ``report`` -> results.

A study script is an arm table and a call::

    from harness import Study, main

    STUDY = Study(
        name="bk",                                      # results/<name>/<variant>/ ("{env}", "{task}" allowed)
        env="babyai", task="GoToLocal-RedBall-S20",     # defaults of --env / --task
        arms={"ppo": ["method=none"],                   # arm name -> overrides; named <method>-<llm>,
              "bk_code-oracle": ["method=bk_code", "llm=oracle"]},   # baselines by their method
        common=["agent=ppo", "num_envs=8"],             # every arm gets these (same budget, network, env)
        metric="charts/success", metric_name="training success rate",
        control="ppo", steps=300_000, seeds=3,
    )

    if __name__ == "__main__":
        sys.exit(main(STUDY))

Every arm is one sweep, ``llmguide train -m seed=0,1,2 <arm overrides> <common> env=... total_steps=...``
(``sweep.jobs`` runs at a time, ``sweep.retries`` retries from the last checkpoint, failures listed), into
``<runs>/<study>/<variant>/<arm>/seed-<s>/``. Seeds are common random numbers: seed s of every arm has
the same initialisation, env layouts and minibatch order. Then the report code
(:func:`llmguide.report.study_report`, runs grouped by their arm folder) writes, into
``benchmarks/results/<study>/<variant>/``:

- ``report.md``: per-arm final values with honest intervals (a range with <= 5 seeds), paired
  differences against the control arm (t-interval, p-value, Wilcoxon and sign tests from 6 seeds,
  bootstrap from 10, the smallest detectable difference), learning curves, achievements, LM statistics;
- ``curves.png``: the study metric over training, every arm;
- ``result.json``: DESIGN.md's format (``task``, ``budget_steps``, ``metric``, ``higher_is_better``,
  ``arms: {name: {seeds, values, curve}}``, ``paired: {"<arm> - <control>": {mean, t_low, t_high, p, n, ...}}``)
  plus the study's settings, the failed runs and the commit;

and regenerates the index ``benchmarks/results/README.md``: every study variant's headline row, grouped
by env and task, so studies of different methods on the same task sit in one table.

The value of a run is the mean of ``metric`` over its last 10% of logged steps (``llmguide.report``).
The harness drives only the ``llmguide`` CLI and the report module, never a method's modules.

Flags of every study script: ``--env/--env-id`` (env group), ``--task`` (``env.task``, or ``env.id`` for
NetHack/MiniHack), ``--seeds`` (a count, ``3`` = 0,1,2, or a list ``100,101,102`` / range ``100-104``),
``--steps``, ``--variant`` (default ``<task>-<budget>``), ``--arms`` (a subset), ``--jobs``,
``--retries``, ``--num-envs``, ``--extra`` (more overrides for every arm), ``--resume`` (keep finished
runs, continue interrupted ones from their checkpoint), ``--dry-run`` (validate every arm's config, print
the commands, run nothing), ``--runs`` and ``--results`` (folders), ``--report-only`` (no training:
report what is in ``--runs``). ``python benchmarks/harness.py --index`` only regenerates the index.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TASK_KEYS = {"minihack": "env.id", "nethack": "env.id"}   # other env groups take env.task
STATIC_KEYS = ("study", "variant", "env", "task")


@dataclass
class Study:
    """An arm table: ``arms`` (name -> overrides) run over seeds with ``common`` overrides for every arm."""

    name: str
    arms: dict[str, list[str]]
    control: str
    metric: str                                   # a metrics.jsonl key (per episode or per log record)
    metric_name: str = ""                         # how the report names it
    common: list[str] = field(default_factory=list)
    env: str = "crafter"
    task: str | None = None
    steps: int = 100_000
    seeds: int = 3
    per_env: dict[str, list[str]] = field(default_factory=dict)   # extra overrides on one env group only
    upper_reference: tuple[str, ...] = ()         # arms that are labelled upper references, never baselines
    higher_is_better: bool = True
    title: str = ""
    about: str = ""                               # a paragraph at the top of report.md
    jobs: int = 1
    retries: int = 1

    def __post_init__(self) -> None:
        if self.control not in self.arms:
            raise ValueError(f"control arm {self.control!r} is not in the arm table {list(self.arms)}")


# --- arguments -----------------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``3`` -> [0, 1, 2]; ``100,101`` -> [100, 101]; ``100-102`` -> [100, 101, 102]."""
    text = text.strip()
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    if "-" in text.lstrip("-"):
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return list(range(int(text)))


def budget_name(steps: int) -> str:
    """120000 -> '120k', 1000000 -> '1m', 300 -> '300'."""
    if steps >= 1_000_000 and steps % 1_000_000 == 0:
        return f"{steps // 1_000_000}m"
    if steps >= 1000 and steps % 1000 == 0:
        return f"{steps // 1000}k"
    return str(steps)


def build_parser(study: Study) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(study.title or study.name) + "\n\n" + (study.about or ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", "--env-id", dest="env", default=study.env, help=f"env group (default {study.env})")
    p.add_argument("--task", default=study.task, help="env.task (env.id on nethack/minihack); default "
                                                      f"{study.task or 'the env config default'}")
    p.add_argument("--seeds", default=str(study.seeds), help="a count (3 = seeds 0,1,2), a list 100,101 or a range 100-104")
    p.add_argument("--steps", type=int, default=study.steps, help="env steps per run")
    p.add_argument("--variant", default=None, help="results subfolder (default: <task>-<budget>)")
    p.add_argument("--arms", default=",".join(study.arms), help="comma-separated subset of the arm table")
    p.add_argument("--jobs", type=int, default=study.jobs, help="runs at a time (sweep.jobs)")
    p.add_argument("--retries", type=int, default=study.retries, help="sweep.retries: a failed run is resumed this often")
    p.add_argument("--num-envs", type=int, default=None, help="num_envs for every arm")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every arm")
    p.add_argument("--resume", action="store_true", help="keep finished runs; continue unfinished ones")
    p.add_argument("--dry-run", action="store_true", help="validate every arm's config and print the commands")
    p.add_argument("--report-only", action="store_true", help="no training: report the runs already in --runs")
    p.add_argument("--runs", type=Path, default=None, help="run folder (default runs/bench/<study>/<variant>)")
    p.add_argument("--results", type=Path, default=RESULTS, help="results root (default benchmarks/results)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples for >= 10 seeds")
    return p


@dataclass
class Plan:
    """A study resolved against its command line."""

    study: Study
    name: str
    variant: str
    env: str
    task: str | None
    seeds: list[int]
    steps: int
    arms: list[str]
    runs: Path
    out: Path
    results: Path
    jobs: int
    retries: int
    overrides: list[str]          # common + per-env + env/task/budget + extra, for every arm

    def arm_overrides(self, arm: str) -> list[str]:
        return [*self.study.arms[arm], *self.overrides]


def make_plan(study: Study, args: argparse.Namespace) -> Plan:
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in study.arms]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; the table has {list(study.arms)}")
    if study.control not in arms:
        arms.insert(0, study.control)   # paired statistics need the control
    task = args.task
    name = study.name.format(env=args.env, task=task or "default")
    variant = args.variant or "-".join(p for p in (task, budget_name(args.steps)) if p)
    overrides = [*study.common, *study.per_env.get(args.env, []), f"env={args.env}", f"total_steps={args.steps}"]
    if task:
        overrides.append(f"{TASK_KEYS.get(args.env, 'env.task')}={task}")
    if args.num_envs:
        overrides.append(f"num_envs={args.num_envs}")
    overrides += list(args.extra)
    if not any(o.startswith("log_every=") for o in overrides):
        overrides.append(f"log_every={max(args.steps // 50, 1000)}")   # about 50 periodic metric records a run
    runs = (args.runs or Path("runs") / "bench" / name / variant).resolve()
    return Plan(study, name, variant, args.env, task, parse_seeds(args.seeds), args.steps, arms, runs,
                (args.results / name / variant).resolve(), args.results.resolve(), args.jobs, args.retries, overrides)


# --- running ------------------------------------------------------------------------------------------
def _cli() -> list[str]:
    return [sys.executable, "-m", "llmguide.cli"]


def _env(plan: Plan) -> dict[str, str]:
    """The runs' environment: no model hub; one LM cache per study variant (seed 0 pays, later seeds and
    --resume reuse it) unless $LLMGUIDE_CACHE_DIR names one."""
    return {**os.environ, "HF_HUB_OFFLINE": "1",
            "LLMGUIDE_CACHE_DIR": os.environ.get("LLMGUIDE_CACHE_DIR") or str(plan.runs / "lm_cache")}


def run_state(run: Path, plan: Plan) -> str:
    """``done`` (eval.json written, same budget), ``partial`` (has a checkpoint) or ``new``."""
    cfg_path = run / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else {}
    if (run / "eval.json").exists() and int((cfg or {}).get("total_steps", -1)) == plan.steps:
        return "done"
    if (run / "checkpoints" / "latest.pt").exists():
        return "partial"
    return "new"


def seed_runs(plan: Plan, arm: str) -> dict[int, Path]:
    """Run folders of ``arm`` by the seed in their config.yaml (the newest folder per seed)."""
    found: dict[int, Path] = {}
    for cfg_path in sorted((plan.runs / arm).glob("*/config.yaml"), key=lambda p: p.stat().st_mtime):
        cfg = yaml.safe_load(cfg_path.read_text()) or {}
        if "seed" in cfg:
            found[int(cfg["seed"])] = cfg_path.parent
    return found


def sweep_command(plan: Plan, arm: str, seeds: list[int], mode: str) -> list[str]:
    """``llmguide train -m`` over ``seeds`` for one arm; ``mode`` is ``overwrite`` or ``resume``."""
    seed = f"seed={','.join(map(str, seeds))}" if len(seeds) > 1 else f"seed=range({seeds[0]},{seeds[0] + 1})"
    return [*_cli(), "train", "-m", *plan.arm_overrides(arm), seed, f"run.dir={plan.runs}", f"run.name={arm}",
            f"sweep.jobs={plan.jobs}", f"sweep.retries={plan.retries}", f"run.{mode}=true", "progress=false"]


def validate(plan: Plan) -> list[str]:
    """Compose every arm's config (``llmguide train --print-config``); the errors, one per bad arm."""
    errors = []
    for arm in plan.arms:
        proc = subprocess.run([*_cli(), "train", "--print-config", *plan.arm_overrides(arm), f"seed={plan.seeds[0]}"],
                              capture_output=True, text=True, env=_env(plan))
        if proc.returncode != 0:
            errors.append(f"{arm}: {(proc.stderr.strip().splitlines() or ['exit ' + str(proc.returncode)])[-1]}")
    return errors


def run_arms(plan: Plan, resume: bool, dry_run: bool) -> None:
    """One sweep per arm (per resume mode) over the seeds that still need running."""
    for arm in plan.arms:
        existing = seed_runs(plan, arm)
        groups: dict[str, list[int]] = {"overwrite": [], "resume": []}
        for s in plan.seeds:
            state = run_state(existing[s], plan) if resume and s in existing else "new"
            if state == "done":
                print(f"  skip   {arm} seed {s} (finished: {existing[s]})")
            else:
                groups["resume" if state == "partial" else "overwrite"].append(s)
        for mode, seeds in groups.items():
            if not seeds:
                continue
            cmd = sweep_command(plan, arm, seeds, mode)
            print(f"[{arm}] llmguide " + " ".join(cmd[3:]), flush=True)
            if not dry_run:
                subprocess.call(cmd, env=_env(plan))   # failures are found below, from the run folders


# --- results ------------------------------------------------------------------------------------------
def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def collect(plan: Plan) -> tuple[list[str], list[dict[str, str]], dict[str, Any]]:
    """Finished run folders, failed (arm, seed) with their logs, and the first finished run's config."""
    done, failed, cfg = [], [], {}
    for arm in plan.arms:
        existing = seed_runs(plan, arm)
        for s in plan.seeds:
            run = existing.get(s)
            if run is not None and run_state(run, plan) == "done":
                done.append(str(run))
                cfg = cfg or yaml.safe_load((run / "config.yaml").read_text()) or {}
            else:
                log = plan.runs / arm / f"seed-{s}.log"
                failed.append({"arm": arm, "seed": s, "log": str(log) if log.exists() else "no log"})
    return done, failed, cfg


def _task_of(cfg: dict[str, Any], plan: Plan) -> str:
    env = cfg.get("env") or {}
    if plan.task:
        return plan.task
    key = TASK_KEYS.get(plan.env, "env.task").split(".", 1)[1]
    value = env.get(key)
    return str(value) if value else "all achievements" if plan.env in ("crafter", "craftax") else "default"


def write_results(plan: Plan, reps: int = 2000) -> int:
    """Report the finished runs into ``plan.out`` (report.md, curves.png, result.json); 1 if any run failed."""
    from llmguide.report import study_report

    done, failed, cfg = collect(plan)
    study = plan.study
    if not done:
        print(f"{plan.name}/{plan.variant}: no finished run in {plan.runs}", file=sys.stderr)
        return 1
    plan.out.mkdir(parents=True, exist_ok=True)
    task = _task_of(cfg, plan)
    seeds = ", ".join(map(str, plan.seeds))
    intro = [study.about.strip()] if study.about.strip() else []
    intro += [f"Env `{plan.env}`, task `{task}`, {plan.steps:,} env steps per run, seeds {seeds} (common random "
              f"numbers across arms). Control: `{study.control}`. Metric: {study.metric_name or study.metric} "
              f"(`{study.metric}`, {'higher' if study.higher_is_better else 'lower'} is better).", "",
              "| arm | overrides |", "|---|---|",
              *[f"| {a}{' (upper reference)' if a in study.upper_reference else ''} | "
                f"`{' '.join(study.arms[a])}` |" for a in plan.arms], "",
              f"Every arm also gets: `{' '.join(plan.overrides)}`.", "",
              "Failed runs: " + (", ".join(f"{f['arm']} seed {f['seed']} ({f['log']})" for f in failed) or "none") + "."]
    path, summary = study_report(done, plan.out, reps, group_by="folder", control=study.control,
                                 metric=study.metric, metric_name=study.metric_name or study.metric,
                                 title=study.title or f"{plan.name} / {plan.variant}", intro=intro)
    arms = {}
    for arm in plan.arms:
        if arm in summary["arms"]:
            arms[arm] = {**summary["arms"][arm], "overrides": study.arms[arm],
                         "upper_reference": arm in study.upper_reference}
    result = {"study": plan.name, "variant": plan.variant, "env": plan.env, "task": task,
              "budget_steps": plan.steps, "metric": study.metric_name or study.metric, "metric_key": study.metric,
              "higher_is_better": study.higher_is_better, "control": study.control, "arms": arms,
              "paired": summary["paired"], "seeds": plan.seeds, "common": plan.overrides, "failed": failed,
              "notes": summary["notes"], "produced_by": "benchmarks/harness.py", "commit": _git_commit(),
              "command": " ".join(sys.argv)}
    (plan.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{plan.name}/{plan.variant}: {path}")
    write_index(plan.results)
    if failed:
        print(f"{len(failed)} run(s) failed: " + ", ".join(f"{f['arm']} seed {f['seed']}" for f in failed),
              file=sys.stderr)
    return 1 if failed else 0


def plot_summary(summary: dict[str, Any], path: Path, ylabel: str = "") -> None:
    """Every arm's curve of a DESIGN.md summary (``curve: {steps, mean, low|ci95_low, high|ci95_high}``)
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


# --- the index ----------------------------------------------------------------------------------------
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
            cells.append(f"{arm}: no result")
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
             "Written by `benchmarks/harness.py` (regenerate: `python benchmarks/harness.py --index`). One row per "
             "study variant, `<study>/<variant>/` holding `result.json` (DESIGN.md's format), `report.md` and "
             "`curves.png`; studies on the same env and task share a table. Each arm: mean over seeds of the "
             "study's metric, and its paired difference against the control (per seed, matched by seed): mean "
             "Δ, the range of the per-seed differences with <= 5 seeds (not a CI) or the t 95% CI with more, and "
             "the t-test p-value.", "",
             "*Old code*: produced by the reproduction scripts before the harness (moved here from the flat "
             "`benchmarks/results/` layout, numbers unchanged); their paired statistics are computed by this "
             "index from the per-seed values in their `result.json`.", ""]
    for (env, task), items in sorted(groups.items()):
        lines += [f"## {env} · {task}", "",
                  "| study / variant | code | budget | seeds | metric | arms: mean (paired Δ vs control) |",
                  "|---|---|---|---|---|---|"]
        for folder, result in sorted(items, key=lambda x: (x[1].get("budget_steps") or 0, str(x[0]))):
            cell, _ = headline(result)
            rel = folder.relative_to(root).as_posix()
            old = result.get("produced_by") != "benchmarks/harness.py"
            seeds = sorted({s for a in result["arms"].values() for s in a.get("seeds", [])})
            budget = result.get("budget_steps")
            budget = f"{budget:,}" if isinstance(budget, int) else "?"
            lines.append(f"| [{rel}]({rel}/report.md) | {'old code' if old else 'harness'} | {budget} | {len(seeds)} | "
                         f"{result.get('metric', '?')} | {cell} |")
        lines.append("")
    if others:
        lines += ["## Other results (costs, analyses)", "", "| folder | title |", "|---|---|"]
        for folder in sorted(set(others)):
            rel = folder.relative_to(root).as_posix()
            md = folder / "report.md"
            title = next((ln.lstrip("# ").strip() for ln in md.read_text().splitlines() if ln.startswith("#")),
                         "") if md.exists() else ""
            lines.append(f"| [{rel}]({rel}/{'report.md' if md.exists() else 'result.json'}) | {title} |")
        lines.append("")
    path = root / "README.md"
    path.write_text("\n".join(lines))
    return path


# --- entry point --------------------------------------------------------------------------------------
def main(study: Study, argv: list[str] | None = None) -> int:
    """Run ``study`` as its command line says; 0 when every run finished."""
    # benchmarks/ holds scripts named like packages (craftax.py, ray.py): keep it off the import path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    args = build_parser(study).parse_args(argv)
    plan = make_plan(study, args)
    print(f"{plan.name}/{plan.variant}: arms {plan.arms} x seeds {plan.seeds}, {plan.steps:,} steps; runs in "
          f"{plan.runs}; results in {plan.out}", flush=True)
    if args.dry_run:
        errors = validate(plan)
        run_arms(plan, args.resume, dry_run=True)
        for err in errors:
            print(f"config error: {err}", file=sys.stderr)
        return 1 if errors else 0
    if not args.report_only:
        run_arms(plan, args.resume, dry_run=False)
    return write_results(plan, args.reps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="regenerate benchmarks/results/README.md")
    parser.add_argument("--index", action="store_true", help="regenerate the index from every result.json")
    parser.add_argument("--results", type=Path, default=RESULTS)
    ns = parser.parse_args()
    if not ns.index:
        parser.error("run a study script (e.g. benchmarks/ellm_crafter.py), or --index")
    print(write_index(ns.results))
