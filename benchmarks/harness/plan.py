"""A study resolved against its command line (:class:`Plan`, :func:`make_plan`): the arms, seeds, folders and
the overrides every arm trains with; :meth:`Plan.step` runs a preparation step."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .run import _cli, _env
from .study import Study, budget_name, parse_seeds
from .where import root

TASK_KEYS = {"minihack": "env.id", "nethack": "env.id"}   # other env groups take env.task
STATIC_KEYS = ("study", "variant", "env", "task")
PLACEHOLDER = re.compile(r"(?<!\$)\{(\w+)\}")             # {prep}, {num_envs}; never ${seed}
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
                                  env=_env(self), cwd=root())
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
            code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(self), cwd=root())
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

