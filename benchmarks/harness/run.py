"""Running the arms: one ``llmguide train -m`` sweep per arm (or seed by seed), resumable, each run's state read
from its folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .artifacts import check_artifacts
from .where import root

if TYPE_CHECKING:
    from .plan import Plan

# ``python -m`` would put the working directory first on sys.path, and a folder of scripts there could shadow a
# package in every run (benchmarks/craftax.py once shadowed the craftax package, each run failing on import):
# start the CLI without it, from the checkout's root
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
                              capture_output=True, text=True, env=_env(plan), cwd=root())
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
            subprocess.call(cmd, env=_env(plan), cwd=root())   # failures are found below, from the run folders


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

