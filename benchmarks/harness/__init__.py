"""One harness for reproductions: an arm table x seeds -> ``llmguide train -m`` -> ``report`` -> results.

A study script is an arm table and a call::

    from harness import Study, main

    STUDY = Study(
        name="bk",                                      # results/<name>/<variant>/ ("{env}", "{task}" allowed)
        env="babyai", task="GoToLocal-RedBall-S20",     # defaults of --env / --task
        arms={"ppo": ["method=none"],                   # arm name -> overrides; named <method>-<llm>,
              "bk_code-oracle": ["method=bk_code", "method.labels={prep}/labels-bk_code-oracle"]},
        common=["agent=ppo", "num_envs=8"],             # every arm gets these (same budget, network, env)
        metric="charts/success", metric_name="training success rate",
        control="ppo", steps=300_000, seeds=3,
        prepare=prepare,                                # offline steps before the arms (see below)
    )

    if __name__ == "__main__":
        sys.exit(main(STUDY))

Every arm is one sweep, ``llmguide train -m seed=0,1,2 <arm overrides> <common> env=... total_steps=...``
(``sweep.jobs`` runs at a time, ``sweep.retries`` retries from the last checkpoint, failures listed), into
``<runs>/<study>/<variant>/<arm>/seed-<s>/`` (``order="seed"`` / ``"alternate"``: seed by seed, every arm,
one run at a time; ``alternate`` reverses the arm order on odd seeds). Seeds are common random numbers:
seed s of every arm has the same initialisation, env layouts and minibatch order. Then the report code
(:func:`llmguide.report.study_report`, runs grouped by their arm folder) writes, into
``benchmarks/results/<study>/<variant>/``:

- ``report.md``: per-arm values with honest intervals (a range with <= 5 seeds), paired
  differences against the control arm (t-interval, p-value, Wilcoxon and sign tests from 6 seeds,
  bootstrap from 10, the smallest detectable difference; Holm-adjusted p-values beside the raw ones with more
  than 3 comparisons), learning curves, achievements, LM statistics, and the code every arm ran (each run's
  ``provenance.jsonl``: its commit, dirty or not), with a warning when the arms come from different commits;
  its first lines say when a comparison's arms come from different commits (reported only with
  ``--allow-mixed``) or the runs were trained from uncommitted changes (``--allow-dirty``);
- ``curves.png``: the study metric over training, every arm;
- ``result.json``: docs/design.md's format (``task``, ``budget_steps``, ``metric``, ``higher_is_better``,
  ``arms: {name: {seeds, values, curve}}``, ``paired: {"<arm> - <control>": {mean, t_low, t_high, p, n, ...}}``)
  plus the study's settings, the preparation steps, the failed runs, the commit at report time (``commit``) and
  the code of every arm's runs (``commits: {arm: {commit: [seeds]}}``), the comparisons across commits
  (``mixed_code``), every harness session that trained in the runs folder (``sessions``: commit, dirty, diff
  sha256, command), and each arm's answer-table coverage (``coverage``: the last ``lm/table_coverage`` of its
  runs, mean, min, max and per seed; null for an arm that reads no table) with ``coverage_warnings`` (an arm
  under 90 %, arms more than 5 points apart: also the report's first lines and stderr; issue 66);

and regenerates the index ``benchmarks/results/README.md``: every study variant's headline row, grouped
by env and task, so studies of different methods on the same task sit in one table.

**The value of a run** (``Study.value``, ``--value``): ``final`` (default), the mean of ``metric`` over its
last 10% of logged steps (``llmguide.report``); ``auc``, the area under its learning curve: the mean over
``bins`` equal env-step bins of the budget of the mean ``metric`` in each bin (an empty bin counts as the
mean of the others; a longer run is cut at the budget), e.g. success AUC.

**Preparation** (``Study.prepare(plan)``): offline steps a method needs before its arms train (collect a
dataset, label it, fit a codebook, pretrain), run before the arms, into ``<prep>`` (``--prep``, default
``<runs>/prep``). ``plan.step(verb, name, overrides, done)`` runs ``llmguide <verb>`` into ``<prep>/<name>``
unless ``<prep>/<name>/<done>`` exists (resumable: a finished step is never run again), and returns None
or why it failed; ``plan.fail(arm, reason)`` marks an arm failed: it is not trained, and is listed in the
report and ``result.json`` as failed with the reason (the study goes on). With ``--dry-run`` steps are
printed and their configs validated; with ``--report-only`` only finished steps count.

**Placeholders**: ``{prep}``, ``{runs}``, ``{env}``, ``{task}``, ``{steps}`` and every command-line value
(``{num_envs}``, a script flag ``--code-iters`` as ``{code_iters}``) are substituted in arm overrides,
``common`` and ``per_env`` (``${...}`` is left to the config: ``seed-${seed}`` is the run's seed).

**Script flags**: ``Study.flags(parser)`` adds a script's own flags; ``Study.configure(args)`` resolves them
(defaults that depend on the env, computed values, more ``args.extra``) before the plan is made.
``Study.details(plan)`` returns Markdown lines appended to report.md and a dict stored as ``details`` in
result.json (label summaries, pretraining statistics, shaping scale).

The harness drives only the ``llmguide`` CLI and the report module, never a method's modules.

Flags of every study script: ``--env`` (env group; also ``--env-id`` unless the study names the task so),
``--task`` (``env.task``, or ``env.id`` for NetHack/MiniHack), ``--seeds`` (a count, ``3`` = 0,1,2, or a list
``100,101,102`` / range ``100-104``), ``--steps``, ``--variant`` (default ``<task>-<budget>``), ``--study``
(results folder name), ``--arms`` (a subset), ``--jobs``, ``--retries``, ``--num-envs``, ``--extra`` (more
overrides for every arm), ``--metric`` (another metrics key; the report then names it by its key), ``--control``
(pair against another arm, e.g. a knowledge control), ``--value``, ``--bins``, ``--resume`` (keep finished runs,
continue interrupted ones from their checkpoint), ``--dry-run`` (print the preparation and the sweeps,
validate every config, run nothing), ``--prepare-only``, ``--report-only`` (no training: report what is
in ``--runs``), ``--runs``, ``--prep`` and ``--results`` (folders), ``--notes`` (Markdown appended to
report.md), ``--allow-dirty``, ``--allow-mixed`` (below). ``python benchmarks/harness.py --index`` only
regenerates the index.

**One commit per study** (issue 67): a call that trains (or prepares) refuses, exit 2, when the code that makes
runs (``src/``, ``benchmarks/`` but its results, ``pyproject.toml``; tracked or new files) differs from HEAD;
``--allow-dirty`` trains anyway and keeps the diff (``<runs>/code/<sha256>.patch``) and its sha256 in
``<runs>/code.jsonl``. The report refuses, exit 2 and nothing written, when one comparison's arms (the arm's and
the control's runs) come from more than one recorded code, unless ``--allow-mixed``. The index says per study
whether its per-arm commits are on record. Machine paths never go into results: every text file written into
``<variant>/`` names runs, preparation, path flags and the repository relative (:func:`relativize`).

**Artifacts** (issue 67): the files the arms train on besides the code (answer tables: ``llm.table``,
``llm.match_table``; label runs: ``method.labels``' BK program, preference model or goal library and manifest) are
hashed once the preparation is done into ``<runs>/artifacts.json`` and checked before every sweep: one that changed
since is refused (one line naming it and both sha256, exit 2) unless this call's preparation rebuilt it. result.json
lists them (``artifacts``: path, override, sha256, bytes, arms) and the report's *Artifacts* section. **Run
records**: each run's ``provenance.jsonl`` holds its sessions' system, versions and LM (llmguide.core.provenance);
the report's *Run records* section and result.json ``run_records`` say which fields differ between arms.
**Reproduce**: ``python benchmarks/harness.py --reproduce benchmarks/results/<study>/<variant> [--seeds 0]
[--tolerance X]`` reruns the stored command (result.json ``argv``) for a seed of every arm and compares each value
with the stored one, exit 1 past the tolerance (``benchmarks/harness_reproduce.py``).

A call never silently replaces a report holding arms it cannot report again: when ``<variant>/result.json`` has an
arm this call does not run and whose runs are not in ``--runs`` (a subset of arms run into a study's default
variant, or a fresh clone reporting over the committed results), it stops with exit 2 before training and names
them; pass ``--variant`` for the subset, or ``--replace-report``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ROOT = HERE.parent   # runs start here: from benchmarks/, its craftax.py would shadow the craftax package
TASK_KEYS = {"minihack": "env.id", "nethack": "env.id"}   # other env groups take env.task
STATIC_KEYS = ("study", "variant", "env", "task")
PLACEHOLDER = re.compile(r"(?<!\$)\{(\w+)\}")             # {prep}, {num_envs}; never ${seed}
VALUES = ("final", "auc")
ORDERS = ("arm", "seed", "alternate")

# The shared sparse Craftax task (issues 29, 30, 34): one task, episode cap and PPO for every method's study on it,
# so the index sets the methods side by side and their `ppo` arms are one command (a study run with the same
# --runs and --resume reuses another's finished `ppo` runs). The task is one achievement: reward 1 on success, the
# episode ends there, capped at 1500 steps (llmguide.envs.crafter.rules.TASK_MAX_STEPS), no health reward.
SPARSE_TASK = "make_stone_pickaxe"
# flat encoder over the symbolic view, a GRU core (ONI/Motif's reference policy), 64-step rollouts, 256 hidden,
# extrinsic x10 (ONI/Motif on sparse tasks, BK's coefficient); no held-out evaluation (success is logged per episode).
# Learning rate 1e-3 and entropy coefficient 0.003: the winner of benchmarks/ppo_sweep.py on make_wood_pickaxe
# (results/ppo_sweep_craftax/). Every sparse-task result committed before that sweep ran with CleanRL's 2.5e-4 and
# 0.01 (SPARSE_PPO_UNTUNED; each result.json lists its overrides): rerun a study's arms to compare with them.
SPARSE_PPO = ["agent=ppo", "agent.image_encoder=flat", "agent.recurrent=gru", "agent.num_steps=64", "agent.hidden=256",
              "agent.lr=1e-3", "agent.ent_coef=0.003", "method.extrinsic_coef=10.0", "eval.episodes=0"]
SPARSE_PPO_UNTUNED = [o for o in SPARSE_PPO if not o.startswith(("agent.lr=", "agent.ent_coef="))]
SPARSE_PER_ENV = {"craftax": ["num_envs=64", *SPARSE_PPO], "crafter": ["num_envs=8", *SPARSE_PPO]}


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
    value: str = "final"                          # the value of a run: "final" (last 10%) or "auc" (see above)
    bins: int = 20                                # env-step bins of value="auc"
    default_arms: tuple[str, ...] = ()            # --arms default (empty: every arm)
    env_id: str = "env"                           # what --env-id names: "env" (the env group) or "task"
    order: str = "arm"                            # "arm", "seed" or "alternate" (see above)
    flags: Callable[[argparse.ArgumentParser], None] | None = None      # the script's own flags
    configure: Callable[[argparse.Namespace], None] | None = None      # resolve them before the plan
    prepare: Callable[[Plan], None] | None = None                       # offline steps before the arms
    details: Callable[[Plan], tuple[list[str], dict[str, Any]]] | None = None   # report lines, result.json data

    def __post_init__(self) -> None:
        if self.control not in self.arms:
            raise ValueError(f"control arm {self.control!r} is not in the arm table {list(self.arms)}")
        unknown = [a for a in self.default_arms if a not in self.arms]
        if unknown:
            raise ValueError(f"default arms {unknown} are not in the arm table {list(self.arms)}")
        for key, value, allowed in (("value", self.value, VALUES), ("order", self.order, ORDERS),
                                    ("env_id", self.env_id, ("env", "task"))):
            if value not in allowed:
                raise ValueError(f"Study.{key} must be one of {allowed}, got {value!r}")


# --- arguments -----------------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``3`` -> [0, 1, 2]; ``100,101`` -> [100, 101]; ``2,`` -> [2]; ``100-102`` -> [100, 101, 102].

    ValueError when that names no seed: ``0`` is a count of none, not seed 0 (``0,`` is seed 0)."""
    text = text.strip()
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        elif "-" in text.lstrip("-"):
            low, high = text.split("-", 1)
            seeds = list(range(int(low), int(high) + 1))
        else:
            seeds = list(range(int(text)))
    except ValueError:
        seeds = []
    if not seeds:
        raise ValueError(f"{text!r} names no seed: give a count (3 = seeds 0,1,2), a list (0,2 or 2, for seed 2 "
                         "alone) or a range (100-104)")
    return seeds


def seeds_arg(text: str) -> str:
    """argparse type of ``--seeds``: checked now (one line, exit 2), parsed by :func:`parse_seeds` later."""
    try:
        parse_seeds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


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
    env_flags, task_flags = ["--env"], ["--task"]
    (env_flags if study.env_id == "env" else task_flags).append("--env-id")
    p.add_argument(*env_flags, dest="env", default=study.env, help=f"env group (default {study.env})")
    p.add_argument(*task_flags, dest="task", default=study.task,
                   help=f"env.task (env.id on nethack/minihack); default {study.task or 'the env config default'}")
    p.add_argument("--seeds", default=str(study.seeds), type=seeds_arg,
                   help="a count (3 = seeds 0,1,2), a list 100,101 (2, = seed 2 alone) or a range 100-104")
    p.add_argument("--steps", type=int, default=study.steps, help="env steps per run")
    p.add_argument("--variant", default=None, help="results subfolder (default: <task>-<budget>)")
    p.add_argument("--study", default=None, help="results folder <results>/<study>/ (default: the study's name)")
    p.add_argument("--arms", default=",".join(study.default_arms or study.arms),
                   help=f"comma-separated subset of the arm table {list(study.arms)}")
    p.add_argument("--jobs", type=int, default=study.jobs, help="runs at a time (sweep.jobs)")
    p.add_argument("--retries", type=int, default=study.retries, help="sweep.retries: a failed run is resumed this often")
    p.add_argument("--num-envs", type=int, default=None, help="num_envs for every arm")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every arm")
    p.add_argument("--metric", default=study.metric, help=f"metrics.jsonl key of the value (default {study.metric})")
    p.add_argument("--value", default=study.value, choices=VALUES,
                   help="value of a run: final (mean over the last 10%% of logged steps) or auc (mean over --bins "
                        f"equal env-step bins of the budget); default {study.value}")
    p.add_argument("--bins", type=int, default=study.bins, help="env-step bins of --value auc")
    p.add_argument("--resume", action="store_true", help="keep finished runs; continue unfinished ones")
    p.add_argument("--dry-run", action="store_true",
                   help="print the preparation steps and the sweeps, validate every config, run nothing")
    p.add_argument("--prepare-only", action="store_true", help="run the preparation steps only")
    p.add_argument("--report-only", action="store_true", help="no training: report the runs already in --runs")
    p.add_argument("--allow-dirty", action="store_true",
                   help="train although src/ or benchmarks/ have uncommitted changes; the diff and its sha256 are "
                        "kept in <runs>/code/ and named in the report")
    p.add_argument("--allow-mixed", action="store_true",
                   help="report although a comparison's arms come from different commits (the report says so first)")
    p.add_argument("--replace-report", action="store_true",
                   help="let this call's report replace one that holds arms whose runs are not in --runs")
    p.add_argument("--runs", "--out", dest="runs", type=Path, default=None,
                   help="run folder (default runs/bench/<study>/<variant>)")
    p.add_argument("--prep", type=Path, default=None, help="preparation folder (default <runs>/prep)")
    p.add_argument("--results", type=Path, default=RESULTS, help="results root (default benchmarks/results)")
    p.add_argument("--notes", type=Path, default=None, help="a Markdown file appended to report.md")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples for >= 10 seeds")
    p.add_argument("--control", default=study.control,
                   help=f"the arm paired differences are taken against (default {study.control}; e.g. a knowledge "
                        "control, to compare the treatment with it)")
    p.set_defaults(metric_name=study.metric_name)
    if study.flags:
        study.flags(p.add_argument_group("study flags"))
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
    overrides: list[str]          # common + per-env + env/task/budget + extra, for every arm (filled)
    setup: list[str] = field(default_factory=list)   # common + per-env + env + num_envs + extra: prep steps
    prep: Path = Path("prep")
    args: argparse.Namespace = field(default_factory=argparse.Namespace)
    values: dict[str, str] = field(default_factory=dict)          # placeholder -> value
    metric: str = ""
    metric_name: str = ""
    value: str = "final"
    bins: int = 20
    dry_run: bool = False
    report_only: bool = False
    failed: dict[str, str] = field(default_factory=dict)          # arm -> why it cannot run (preparation)
    steps_done: dict[str, dict[str, Any]] = field(default_factory=dict)   # preparation step -> record
    errors: list[str] = field(default_factory=list)               # config errors found by --dry-run
    rebuilt: list[Path] = field(default_factory=list)             # what this call's preparation wrote (artifacts)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))   # the command line (result.json, reproduce)

    def fill(self, overrides: list[str]) -> list[str]:
        """``overrides`` with the placeholders substituted (unknown ``{name}`` left as written)."""
        def sub(m: re.Match[str]) -> str:
            return self.values.get(m.group(1), m.group(0))
        return [PLACEHOLDER.sub(sub, o) for o in overrides]

    def arm_overrides(self, arm: str) -> list[str]:
        """The arm's overrides, then the study's; an arm that names its own agent (``agent=scripted``: a
        reference player) takes none of the study's agent settings."""
        own = self.fill(self.study.arms[arm])
        shared = self.overrides
        if any(o.startswith("agent=") for o in own):
            shared = [o for o in shared if not o.startswith(("agent=", "agent."))]
        return [*own, *shared]

    def fail(self, arm: str, reason: str) -> None:
        """Mark ``arm`` failed before training (its preparation failed): not trained, listed with ``reason``."""
        if arm in self.study.arms and arm not in self.failed:
            self.failed[arm] = reason
            print(f"  failed {arm}: {reason}", flush=True)

    def step(self, verb: str, name: str, overrides: list[str], done: str) -> str | None:
        """A preparation step: ``llmguide <verb> <setup> <overrides>`` into ``<prep>/<name>``, unless
        ``<prep>/<name>/<done>`` exists (then it is kept; ``done`` may be an absolute path, placeholders
        allowed: ``{prep}/motif-data/label_stats.json``). None when complete, else why it failed."""
        folder = self.prep / name
        marker = Path(self.fill([done])[0])
        marker = marker if marker.is_absolute() else folder / marker
        over = [*self.setup, *self.fill(overrides)]
        cmd = [*_cli(), verb, *over, f"run.dir={self.prep}", f"run.name={name}", "run.overwrite=true", "progress=false"]
        record: dict[str, Any] = {"verb": verb, "run": str(folder), "command": "llmguide " + " ".join(cmd[3:])}
        self.steps_done[name] = record
        if marker.exists():
            record["state"] = "kept"
            print(f"  keep   {name} ({marker} exists)", flush=True)
            return None
        if self.dry_run:
            record["state"] = "dry run"
            print(f"[prep {name}] {record['command']}", flush=True)
            proc = subprocess.run([*_cli(), verb, "--print-config", *over], capture_output=True, text=True,
                                  env=_env(self), cwd=ROOT)
            if proc.returncode != 0:
                self.errors.append(f"prep {name}: {(proc.stderr.strip().splitlines() or ['exit ?'])[-1]}")
            return None
        if self.report_only:
            record["state"] = "missing"
            return f"{verb} {name} not done ({marker} missing)"
        self.prep.mkdir(parents=True, exist_ok=True)
        log = self.prep / f"{name}.log"
        print(f"[prep {name}] {record['command']}", flush=True)
        t0 = time.perf_counter()
        with open(log, "w") as f:
            code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(self), cwd=ROOT)
        record.update(exit=code, seconds=round(time.perf_counter() - t0, 1), log=str(log))
        if code == 0 and marker.exists():
            record["state"] = "done"
            self.rebuilt += [folder, marker]
            print(f"  done   {name} ({record['seconds']:.0f}s)", flush=True)
            return None
        tail = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        reason = f"{verb} {name} failed (exit {code}): {tail[-1][:300] if tail else 'no output'}"
        record.update(state="failed", reason=reason)
        print(f"  {reason} (log {log})", flush=True)
        return reason


def make_plan(study: Study, args: argparse.Namespace) -> Plan:
    if study.configure:
        study.configure(args)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in study.arms]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; the table has {list(study.arms)}")
    if args.control != study.control:   # --control: pair against another arm of the table
        if args.control not in study.arms:
            raise SystemExit(f"--control {args.control!r} is not an arm of the table {list(study.arms)}")
        study = dataclasses.replace(study, control=args.control)
    if args.metric != study.metric and args.metric_name == study.metric_name:   # the study's name would be wrong
        args.metric_name = f"`{args.metric}`"
    if study.control not in arms:
        arms.insert(0, study.control)   # paired statistics need the control
    task = args.task
    name = args.study or study.name.format(env=args.env, task=task or "default")
    variant = args.variant or "-".join(p for p in (task, budget_name(args.steps)) if p)
    runs = (args.runs or Path("runs") / "bench" / name / variant).resolve()
    prep = (args.prep or runs / "prep").resolve()
    values = {k: str(v) for k, v in vars(args).items() if isinstance(v, str | int | float | Path) and v is not None}
    values.update(runs=str(runs), prep=str(prep), env=args.env, task=task or "", steps=str(args.steps),
                  study=name, variant=variant)
    setup = [*study.common, *study.per_env.get(args.env, []), f"env={args.env}"]
    if args.num_envs:
        setup.append(f"num_envs={args.num_envs}")
    setup += list(args.extra)
    overrides = [*study.common, *study.per_env.get(args.env, []), f"env={args.env}", f"total_steps={args.steps}"]
    if task:
        overrides.append(f"{TASK_KEYS.get(args.env, 'env.task')}={task}")
    if args.num_envs:
        overrides.append(f"num_envs={args.num_envs}")
    overrides += list(args.extra)
    if not any(o.startswith("log_every=") for o in overrides):
        overrides.append(f"log_every={max(args.steps // 50, 1000)}")   # about 50 periodic metric records a run
    plan = Plan(study, name, variant, args.env, task, parse_seeds(args.seeds), args.steps, arms, runs,
                (args.results / name / variant).resolve(), args.results.resolve(), args.jobs, args.retries, [],
                prep=prep, args=args, values=values, metric=args.metric, metric_name=args.metric_name or args.metric,
                value=args.value, bins=args.bins, dry_run=bool(getattr(args, "dry_run", False)),
                report_only=bool(getattr(args, "report_only", False)))
    plan.overrides, plan.setup = plan.fill(overrides), plan.fill(setup)
    return plan


# --- running ------------------------------------------------------------------------------------------
# ``python -m`` would put the working directory first on sys.path, and benchmarks/craftax.py would then shadow the
# craftax package in every run started from benchmarks/ (each run failing on import): start the CLI without it
_CLI = "import runpy, sys; sys.path.pop(0); runpy.run_module('llmguide.cli', run_name='__main__', alter_sys=True)"


def _cli() -> list[str]:
    return [sys.executable, "-c", _CLI]


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


def finished_runs(plan: Plan, arm: str) -> dict[int, Path]:
    """The run folders of ``arm`` that finished the budget, for the plan's seeds (what ``details`` hooks read)."""
    return {s: run for s, run in seed_runs(plan, arm).items() if s in plan.seeds and run_state(run, plan) == "done"}


def sweep_command(plan: Plan, arm: str, seeds: list[int], mode: str) -> list[str]:
    """``llmguide train -m`` over ``seeds`` for one arm; ``mode`` is ``overwrite`` or ``resume``."""
    seed = f"seed={','.join(map(str, seeds))}" if len(seeds) > 1 else f"seed=range({seeds[0]},{seeds[0] + 1})"
    return [*_cli(), "train", "-m", *plan.arm_overrides(arm), seed, f"run.dir={plan.runs}", f"run.name={arm}",
            f"sweep.jobs={plan.jobs}", f"sweep.retries={plan.retries}", f"run.{mode}=true", "progress=false"]


def validate(plan: Plan) -> list[str]:
    """Compose every arm's config (``llmguide train --print-config``); the errors, one per bad arm.  An arm
    whose preparation failed is not composed: it is listed with its reason, not trained."""
    errors = []
    for arm in plan.arms:
        if arm in plan.failed:
            continue
        proc = subprocess.run([*_cli(), "train", "--print-config", *plan.arm_overrides(arm), f"seed={plan.seeds[0]}"],
                              capture_output=True, text=True, env=_env(plan), cwd=ROOT)
        if proc.returncode != 0:
            errors.append(f"{arm}: {(proc.stderr.strip().splitlines() or ['exit ' + str(proc.returncode)])[-1]}")
    return errors


def _sweep(plan: Plan, arm: str, seeds: list[int], resume: bool, dry_run: bool) -> None:
    """One sweep of ``arm`` per resume mode over those of ``seeds`` that still need running."""
    existing = seed_runs(plan, arm)
    groups: dict[str, list[int]] = {"overwrite": [], "resume": []}
    for s in seeds:
        state = run_state(existing[s], plan) if resume and s in existing else "new"
        if state == "done":
            print(f"  skip   {arm} seed {s} (finished: {existing[s]})")
        else:
            groups["resume" if state == "partial" else "overwrite"].append(s)
    for mode, todo in groups.items():
        if not todo:
            continue
        cmd = sweep_command(plan, arm, todo, mode)
        print(f"[{arm}] llmguide " + " ".join(cmd[3:]), flush=True)
        if not dry_run:
            check_artifacts(plan)   # every artifact as recorded: ArtifactChanged stops the study
            subprocess.call(cmd, env=_env(plan), cwd=ROOT)   # failures are found below, from the run folders


def run_arms(plan: Plan, resume: bool, dry_run: bool) -> None:
    """Every arm that did not fail its preparation: one sweep per arm over the seeds (``order="arm"``), or
    seed by seed over the arms (``"seed"``; ``"alternate"`` reverses the arm order on odd seeds)."""
    arms = [a for a in plan.arms if a not in plan.failed]
    for arm in plan.arms:
        if arm in plan.failed:
            print(f"  not trained: {arm} (its preparation failed)")
    if plan.study.order == "arm":
        for arm in arms:
            _sweep(plan, arm, plan.seeds, resume, dry_run)
        return
    for i, s in enumerate(plan.seeds):
        for arm in (arms[::-1] if plan.study.order == "alternate" and i % 2 else arms):
            _sweep(plan, arm, [s], resume, dry_run)


# --- results ------------------------------------------------------------------------------------------
def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- the code a study trains with (issue 67) ---------------------------------------------------------------
# A study trains from one commit: the code that makes its runs (the package, the study scripts, the build file)
# must have no uncommitted change, tracked or new, or --allow-dirty, which keeps the diff and its sha256 with the
# runs. Results, docs and tests may differ.
REPO = ROOT
CODE_PATHS = ("src", "benchmarks", "pyproject.toml", ":(exclude)benchmarks/results")
SESSIONS = "code.jsonl"   # in the runs folder: one line per harness session that trained there


def _git_bytes(repo: Path, *args: str, ok: tuple[int, ...] = (0,)) -> bytes | None:
    try:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode in ok else None


def tree_state(repo: Path | None = None) -> dict[str, Any] | None:
    """The code the checkout would train with: ``{"commit", "dirty", "diff_sha256", "patch"}``, where ``patch`` is
    ``git diff HEAD`` of :data:`CODE_PATHS` plus every new (untracked, not ignored) file there as a patch, and
    ``diff_sha256`` its sha256 (None when clean). None outside a git checkout."""
    repo = repo or REPO
    head = _git_bytes(repo, "rev-parse", "HEAD")
    if not head:
        return None
    patch = _git_bytes(repo, "diff", "HEAD", "--binary", "--", *CODE_PATHS) or b""
    new = _git_bytes(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_PATHS) or b""
    for name in sorted(n for n in new.decode(errors="replace").split("\0") if n):
        patch += _git_bytes(repo, "diff", "--no-index", "--binary", "--", "/dev/null", name, ok=(0, 1)) or b""
    return {"commit": head.decode().strip(), "dirty": bool(patch),
            "diff_sha256": hashlib.sha256(patch).hexdigest() if patch else None, "patch": patch}


def record_session(plan: Plan, state: dict[str, Any] | None) -> dict[str, Any]:
    """Append this session's code to ``<runs>/code.jsonl`` (a dirty tree's patch beside it, in ``code/``)."""
    state = state or {"commit": None, "dirty": None, "diff_sha256": None, "patch": b""}
    entry = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "commit": state["commit"],
             "dirty": state["dirty"], "diff_sha256": state["diff_sha256"], "command": " ".join(plan.argv)}
    plan.runs.mkdir(parents=True, exist_ok=True)
    if state["patch"]:
        patch = plan.runs / "code" / f"{state['diff_sha256']}.patch"
        patch.parent.mkdir(exist_ok=True)
        patch.write_bytes(state["patch"])
        entry["patch"] = str(patch)
    with open(plan.runs / SESSIONS, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def sessions(plan: Plan) -> list[dict[str, Any]]:
    """The harness sessions that trained in the runs folder, oldest first (unreadable lines skipped)."""
    path = plan.runs / SESSIONS
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def mixed_comparisons(commits: dict[str, dict[str, list[Any]]], control: str) -> dict[str, list[str]]:
    """The paired comparisons whose runs (the arm's and the control's) come from more than one recorded code:
    ``{"<arm> - <control>": [codes]}``. A run from before runs recorded their code (``unrecorded``) is not
    counted: it can be told from no other."""
    out = {}
    for arm, codes in commits.items():
        if arm != control and control in commits:
            both = sorted((set(codes) | set(commits[control])) - {"unrecorded"})
            if len(both) > 1:
                out[f"{arm} - {control}"] = both
    return out


# --- the artifacts a study trains on (issue 67) ----------------------------------------------------------------
# What an arm reads besides the code: answer tables (llm.table, llm.match_table) and label runs (method.labels: BK's
# program, preference model or goal library, with the run's manifest). Their sha256 are recorded in
# <runs>/artifacts.json once the preparation is done, and checked before every sweep: an artifact that changed since
# the study's runs trained on it is refused (one line, exit 2), unless this call's preparation rebuilt it.
ARTIFACT_FILES = ("llm.table", "llm.match_table")                       # override keys that name one file
LABEL_RUNS = {"method.labels": ("bk/manifest.json", "bk/final.py", "bk/pref_model.pt", "bk/library.json")}
ARTIFACTS = "artifacts.json"   # in the runs folder: {absolute path: {path, key, sha256, bytes, arms}}


class ArtifactChanged(Exception):
    """An artifact differs from the sha256 recorded when the study's runs trained on it (the message is one line)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def arm_artifacts(plan: Plan, arm: str) -> dict[Path, str]:
    """The existing files ``arm`` trains on, by the override key that names them (``${seed}`` in a path: one file
    per seed of the plan); the last override of a key wins, as in the config."""
    values = {}
    for override in plan.arm_overrides(arm):
        key, _, value = override.partition("=")
        values[key.lstrip("+~")] = value.strip("'\"")
    found: dict[Path, str] = {}
    for key, value in values.items():
        if not value or value == "null" or (key not in ARTIFACT_FILES and key not in LABEL_RUNS):
            continue
        names = [value] if key in ARTIFACT_FILES else [f"{value}/{name}" for name in LABEL_RUNS[key]]
        for name in names:
            for path in dict.fromkeys(name.replace("${seed}", str(s)) for s in plan.seeds):
                if "${" not in path and (file := Path(path).expanduser().resolve()).is_file():
                    found[file] = key
    return found


def plan_artifacts(plan: Plan) -> dict[str, dict[str, Any]]:
    """Every artifact of the plan's arms (those whose preparation did not fail) with its sha256, size and arms."""
    out: dict[str, dict[str, Any]] = {}
    for arm in plan.arms:
        if arm in plan.failed:
            continue
        for file, key in arm_artifacts(plan, arm).items():
            entry = out.get(str(file)) or {"path": relative_paths(plan, str(file)), "key": key,
                                           "sha256": sha256_file(file), "bytes": file.stat().st_size, "arms": []}
            entry["arms"].append(arm)
            out[str(file)] = entry
    return out


def recorded_artifacts(plan: Plan) -> dict[str, dict[str, Any]] | None:
    """``<runs>/artifacts.json``, or None when the runs folder has no record."""
    path = plan.runs / ARTIFACTS
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def check_artifacts(plan: Plan, rebuilt: list[Path] = ()) -> dict[str, dict[str, Any]]:
    """Hash the plan's artifacts and compare them with ``<runs>/artifacts.json``: :class:`ArtifactChanged` when one
    differs and is not under ``rebuilt`` (what this call's preparation wrote); else the record, updated, is
    written back (an artifact seen first now is added, one of another call's arms is kept)."""
    recorded = recorded_artifacts(plan) or {}
    now = plan_artifacts(plan)
    for file, entry in now.items():
        old = recorded.get(file)
        if old and old.get("sha256") != entry["sha256"] and not any(
                Path(file) == r or Path(file).is_relative_to(r) for r in rebuilt):
            raise ArtifactChanged(
                f"harness: {entry['path']} changed since this study's runs trained on it (recorded sha256 "
                f"{old.get('sha256')}, now {entry['sha256']}): restore it, rebuild it with the study's preparation, "
                f"or train in a new --runs")
    for file, entry in now.items():
        arms = [*recorded.get(file, {}).get("arms", []), *entry["arms"]]
        recorded[file] = {**entry, "arms": list(dict.fromkeys(arms))}
    plan.runs.mkdir(parents=True, exist_ok=True)
    atomic = plan.runs / f".{ARTIFACTS}.tmp"
    atomic.write_text(json.dumps(recorded, indent=1) + "\n")
    os.replace(atomic, plan.runs / ARTIFACTS)
    return recorded


def result_artifacts(plan: Plan, arms: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The artifacts of ``arms`` for result.json, sorted by path, and whether they are the record made before
    training (False: the runs folder has none, so they were hashed now, at report time)."""
    recorded = recorded_artifacts(plan)
    entries = (recorded or plan_artifacts(plan)).values()
    mine = [{**e, "arms": [a for a in e.get("arms", []) if a in arms]} for e in entries]
    return sorted((e for e in mine if e["arms"]), key=lambda e: e["path"]), recorded is not None


def artifacts_section(artifacts: list[dict[str, Any]], recorded: bool) -> list[str]:
    """``## Artifacts``: every file the arms trained on with its sha256; [] when they read none."""
    if not artifacts:
        return []
    when = ("recorded before training (`<runs>/artifacts.json`) and checked before every sweep" if recorded else
            "hashed at report time: the runs folder holds no record of them from training")
    lines = ["## Artifacts", "", f"The files the arms trained on besides the code, with their sha256 ({when}).", "",
             "| file | override | sha256 | bytes | arms |", "|---|---|---|---|---|"]
    lines += [f"| `{e['path']}` | `{e['key']}` | `{e['sha256']}` | {e['bytes']:,} | {', '.join(e['arms'])} |"
              for e in artifacts]
    return [*lines, ""]


# --- answer-table coverage per arm (issue 66) ----------------------------------------------------------------
# An arm that reads an answer table (llm.table) logs lm/table_coverage: the share of its training steps whose query
# the table answered. An arm asked less than the others is not a fair comparison: every such arm should answer
# >= 90 % of its steps, within 5 points of the others'.
COVERAGE_KEY = "table_coverage"   # lm/table_coverage, its last logged value in the run's metrics.jsonl
MIN_COVERAGE, COVERAGE_GAP = 0.90, 0.05


def arm_coverage(done: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each arm's answer-table coverage over its finished runs: ``{"mean", "min", "max", "per_seed", "seeds"}``,
    None for an arm that reads no table (logs no ``lm/table_coverage``)."""
    from llmguide.report.runs import lm_stats, load_run

    per_arm: dict[str, dict[Any, float]] = {}
    for path in map(Path, done):
        run = load_run(path)
        values = per_arm.setdefault(path.parent.name, {})
        if (value := lm_stats(run).get(COVERAGE_KEY)) is not None:
            values[run.seed if run.seed is not None else path.name] = value
    return summarize_coverage(per_arm)


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
             f"{MIN_COVERAGE:.0%} of its steps, within {100 * COVERAGE_GAP:.0f} points of the others.", "",
             "| arm | coverage (mean) | min | max | seeds |", "|---|---|---|---|---|"]
    for arm, c in coverage.items():
        lines.append(f"| {arm} | " + (f"{c['mean']:.3f} | {c['min']:.3f} | {c['max']:.3f} | {c['seeds']} |" if c
                                      else "– | – | – | – |"))
    return [*lines, ""]


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


def code_of_arms(done: list[str]) -> tuple[dict[str, dict[str, list[Any]]], list[str]]:
    """Which code trained each arm's runs (:mod:`llmguide.core.provenance`): ``{arm: {code: [seeds]}}``, and the
    report's lines: one per arm, and a warning when the study's runs come from more than one code."""
    from llmguide.core.provenance import run_codes

    commits: dict[str, dict[str, list[Any]]] = {}
    for run in map(Path, done):
        cfg = yaml.safe_load((run / "config.yaml").read_text()) or {}
        for code in run_codes(run):
            commits.setdefault(run.parent.name, {}).setdefault(code, []).append(cfg.get("seed"))
    codes = sorted({c for arm in commits.values() for c in arm})
    lines = ["## Code", "", "The code each arm's runs were trained with (each run's `provenance.jsonl`: the commit "
             "of every session, a resume included; `+dirty`: the package's tracked files differed from it; "
             "`unrecorded`: a run from before runs recorded it).", ""]
    lines += [f"- `{arm}`: " + "; ".join(f"`{c}` (seeds {', '.join(map(str, seeds))})" for c, seeds in by.items())
              for arm, by in commits.items()]
    if len(codes) > 1:
        lines += ["", f"**Warning: this study's runs come from {len(codes)} different codes** ({', '.join(codes)}): "
                      "an arm may differ from another by code as well as by its overrides."]
    return commits, [*lines, ""]


# --- the runs' records (issue 67) ---------------------------------------------------------------------------------
# Each session of a run records its system, installed versions and LM in provenance.jsonl (llmguide.core.provenance);
# the report shows the fields whose values differ between arms. The command line and the config's sha256 differ by
# each arm's overrides and seed by design: they stay in the records, out of the comparison.
RECORD_PARTS = ("system", "lm")


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(f"{prefix}.{key}", item).items()}
    return {prefix: value}


def run_records(done: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The record fields of the finished runs: ``{"same": {field: value}, "differ": {field: {arm: [values]}},
    "unrecorded": [arms]}`` (an arm none of whose sessions has a record is not compared), and the report's lines."""
    from llmguide.core.provenance import read

    per_arm: dict[str, dict[str, set[str]]] = {}
    unrecorded = []
    for run in map(Path, done):
        arm = run.parent.name
        fields = per_arm.setdefault(arm, {})
        for session in read(run):
            for part in RECORD_PARTS:
                if part in session:
                    for key, value in _flat(part, session[part]).items():
                        fields.setdefault(key, set()).add(value if isinstance(value, str) else json.dumps(value))
    for arm in [a for a, fields in per_arm.items() if not fields]:
        unrecorded.append(arm)
        del per_arm[arm]
    keys = sorted({k for fields in per_arm.values() for k in fields})
    same, differ = {}, {}
    for key in keys:
        values = {arm: sorted(fields.get(key, {"(none)"})) for arm, fields in per_arm.items()}
        distinct = {tuple(v) for v in values.values()}
        if len(distinct) == 1 and len(next(iter(distinct))) == 1:
            same[key] = next(iter(distinct))[0]
        else:
            differ[key] = dict(sorted(values.items()))
    records = {"same": same, "differ": differ, "unrecorded": unrecorded}
    if not per_arm:
        return records, []
    lines = ["## Run records", "", "What every session of each run recorded (`provenance.jsonl`: the system, the "
             "installed versions, the configured LM); the command line and the config's sha256 differ by each arm's "
             "overrides and seed, and are left out here.", ""]
    if differ:
        lines += ["Fields that differ between arms (an arm's values over its runs):", "", "| field | values |",
                  "|---|---|"]
        lines += [f"| `{key}` | " + "; ".join(f"{arm}: {' / '.join(v)}" for arm, v in values.items()) + " |"
                  for key, values in differ.items()]
    else:
        lines.append("The record is the same for every run: "
                     + ", ".join(f"`{k}` {v}" for k, v in same.items() if k.startswith("system.")) + ".")
    if unrecorded:
        lines += ["", "No record in the runs of " + ", ".join(f"`{a}`" for a in unrecorded)
                  + " (trained before runs kept one)."]
    return records, [*lines, ""]


# --- machine paths --------------------------------------------------------------------------------------
# An absolute path of the machine that made a result (its checkout, runs, scratch, home) never goes into results
# (issue 67): a reader's clone has none of them. System paths every machine has (/usr/bin/env, /dev/null) are not
# machine paths. A path ends at a character no path of ours holds (space, quote, backtick, colon, comma, brackets).
# the usual top folders of checkouts, runs and scratch, and the top folder of this checkout and of this machine's
# scratch wherever they are (a CI clone under /check holds machine paths too)
SYSTEM_ROOTS = ("usr", "dev", "proc", "sys", "etc", "bin", "lib")
MACHINE_ROOTS = tuple(dict.fromkeys((
    "work", "tmp", "home", "root", "Users", "mnt", "scratch", "data", "private", "var", "opt", "srv", "media", "run",
    "workspace", *(top for top in (Path(p).resolve().parts[1:2] and Path(p).resolve().parts[1]
                                   for p in (ROOT, tempfile.gettempdir())) if top and top not in SYSTEM_ROOTS))))
MACHINE_PATH = re.compile(r"(?<![\w.~<>$}/-])/(?:" + "|".join(map(re.escape, MACHINE_ROOTS))
                          + r")(?![\w.-])(?:/[\w.${}*+@%=-]*)*")
# (pattern, name) for a machine path under no folder the caller names: a home as ~, the scratch folder as <tmp>
FALLBACK_NAMES = ((re.compile(r"^/(?:home|Users)/[^/]+|^/root(?=/|$)"), "~"), (re.compile(r"^/tmp(?=/|$)"), "<tmp>"))
TEXT_SUFFIXES = (".json", ".md", ".jsonl", ".txt", ".yaml", ".yml", ".csv", ".py")   # results' text files
Folder = tuple[str, str]   # how a folder is named: (the folder itself, the prefix of a path inside it)


def named(name: str) -> Folder:
    """A folder named ``name``: itself ``name``, a path inside it ``name/<rest>`` (``<tables>/qwen.sqlite``)."""
    return name, f"{name}/"


def machine_paths(text: str) -> list[str]:
    """Every absolute machine path in ``text`` (:data:`MACHINE_PATH`), in order."""
    return [m.group(0).rstrip(".") for m in MACHINE_PATH.finditer(text)]


def relativize(text: str, folders: dict[str, Folder]) -> str:
    """``text`` with every machine path named relative: by the innermost of ``folders`` (absolute folder or file
    -> :data:`Folder`) that holds it, else by :data:`FALLBACK_NAMES`; a path under neither is left as it is (a
    test of the committed results names it). Idempotent: what it writes holds no machine path."""
    ordered = sorted(((f.rstrip("/"), n) for f, n in folders.items() if f.startswith("/")), key=lambda fn: -len(fn[0]))

    def name(m: re.Match[str]) -> str:
        path = m.group(0)
        tail = path[len(path.rstrip(".")):]     # a sentence's full stop is not part of the path
        path = path[:len(path) - len(tail)]
        for folder, (itself, inside) in ordered:
            if path == folder:
                return itself + tail
            if path.startswith(folder + "/"):
                return inside + path[len(folder) + 1:] + tail
        for pattern, short in FALLBACK_NAMES:
            if pattern.match(path):
                return pattern.sub(short, path, count=1) + tail
        return m.group(0)

    return MACHINE_PATH.sub(name, text)


def plan_folders(plan: Plan) -> dict[str, Folder]:
    """The folders a study's results name relative (:func:`relativize`): a run as ``<arm>/seed-0`` (relative to
    ``--runs``, itself ``<runs>``), the preparation folder as ``<prep>``, the repository's files by their path in
    it, and every other path-valued flag outside the repository by its name (``--tables /x/t`` -> ``<tables>``)."""
    folders: dict[str, Folder] = {str(ROOT.resolve()): (".", "")}
    for key, value in sorted(vars(plan.args).items()):
        if key in ("runs", "prep") or not (isinstance(value, Path) or isinstance(value, str) and value.startswith("/")):
            continue
        path = Path(value).resolve()
        if not path.is_relative_to(ROOT.resolve()):
            folders[str(path)] = named(f"<{key}>")
    folders[str(plan.runs)] = ("<runs>", "")
    folders[str(plan.prep)] = named("<prep>")
    return folders


def relative_paths(plan: Plan, text: str) -> str:
    """``text`` with the machine's folders named as :func:`plan_folders` says."""
    return relativize(text, plan_folders(plan))


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
              "produced_by": "benchmarks/harness.py", "commit": _git_commit(), "commits": commits,
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
    old = result.get("produced_by") != "benchmarks/harness.py"
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
             "Written by `benchmarks/harness.py` (regenerate: `python benchmarks/harness.py --index`). One row per "
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


# --- entry point --------------------------------------------------------------------------------------
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
    # benchmarks/ holds scripts named like packages (craftax.py, ray.py): keep it off the import path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
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


if __name__ == "__main__":
    if any(a == "--reproduce" or a.startswith("--reproduce=") for a in sys.argv[1:]):
        import harness_reproduce  # beside this file, which is sys.path[0] when it runs as a script

        sys.exit(harness_reproduce.main(sys.argv[1:]))
    parser = argparse.ArgumentParser(description="regenerate benchmarks/results/README.md, or rerun a stored study "
                                                 "(--reproduce benchmarks/results/<study>/<variant>, see "
                                                 "benchmarks/harness_reproduce.py)")
    parser.add_argument("--index", action="store_true", help="regenerate the index from every result.json")
    parser.add_argument("--results", type=Path, default=RESULTS)
    ns = parser.parse_args()
    if not ns.index:
        parser.error("run a study script (e.g. benchmarks/ellm_crafter.py), --index, or --reproduce FOLDER")
    print(write_index(ns.results))
