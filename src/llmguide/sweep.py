"""Sweeps: ``llmguide train -m seed=0,1,2 method=ellm_oracle,rnd`` (Hydra's multirun syntax).

Every combination of the comma-separated values (and Hydra sweep functions such as ``range(0,3)``)
is one run, in its own process, ``sweep.jobs`` at a time, each in ``<run.dir>/<sweep name>/<key-value_...>``.
Every combination's config is composed and validated before the first run starts.  A failed run is
started again up to ``sweep.retries`` times (resumed from its last checkpoint if it wrote one, else from
scratch), then reported (and makes the exit code 1), never dropped silently; the ``llmguide report``
command that aggregates the finished runs is printed at the end.

``sweep.launcher=ray`` runs every combination as a Ray task (``sweep.cpus``/``sweep.gpus`` each) on the
cluster of ``ray.address`` instead of ``sweep.jobs`` local processes (:mod:`llmguide.distributed.launcher`).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from llmguide.core.config import load_config


def expand(overrides: list[str]) -> tuple[list[list[str]], set[str]]:
    """All combinations of the sweep overrides (each a plain override list), and the swept keys."""
    choices, swept = [], set()
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element()
        if override.is_sweep_override():
            swept.add(key)
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        choices.append([f"{key}={v}" for v in values])
    return [list(combo) for combo in itertools.product(*choices)], swept


def _name(combo: list[str], swept: set[str]) -> str:
    parts = [o.replace("=", "-", 1) for o in combo if o.split("=", 1)[0] in swept]
    return "_".join(parts).replace("/", "_").replace(",", "_") or "run"


def attempt_args(args: list[str], run_path: Path, attempt: int) -> list[str]:
    """The overrides of attempt ``attempt`` (0: the first) of a run: a retry resumes from the run's last
    checkpoint when it wrote one, else starts it over."""
    if attempt == 0:
        return list(args)
    keep = [o for o in args if not o.startswith(("run.resume=", "run.overwrite="))]
    if (run_path / "checkpoints" / "latest.pt").exists():
        return [*keep, "run.resume=true"]
    return [*keep, "run.overwrite=true"]


def run_train(args: list[str], root: Path, name: str, attempt: int = 0, env: dict[str, str] | None = None) -> int:
    """One ``llmguide train`` of a sweep in its own process, output in ``<root>/<name>.log``; its exit code."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.log", "a" if attempt else "w") as log:
        if attempt:
            log.write(f"\n--- sweep: attempt {attempt + 1} ---\n")
            log.flush()
        return subprocess.call([sys.executable, "-m", "llmguide.cli", "train",
                                *attempt_args(args, root / name, attempt), "progress=false"],
                               stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def print_outcome(root: Path, name: str, code: int, attempt: int, retries: int, where: str = "") -> None:
    log = root / f"{name}.log"
    if code == 0:
        print(f"  ok     {name}{where}" + (f" (attempt {attempt + 1})" if attempt else ""))
    elif attempt < retries:
        print(f"  retry  {name}{where} (exit {code}; attempt {attempt + 2} of {retries + 1}; log {log})")
    else:
        print(f"  FAILED {name}{where} (exit {code} after {attempt + 1} attempt(s); log {log})")


def run_sweep(overrides: list[str]) -> int:
    """Run every combination; returns 0 when all succeeded."""
    combos, swept = expand(overrides)
    first = load_config(combos[0])
    sweep_name = str(first.run.name or f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    root = Path(str(first.run.dir)).resolve() / sweep_name
    jobs = []
    for combo in combos:
        name = _name(combo, swept)
        args = [o for o in combo if not o.startswith("run.name=")] + [f"run.name={name}", f"run.dir={root}"]
        load_config(args)  # a bad combination fails here, before any run starts
        jobs.append((name, args))
    retries = int(first.sweep.retries)
    if str(first.sweep.launcher) == "ray":
        from llmguide.distributed.launcher import run_on_ray

        results = run_on_ray(jobs, root, first)
    else:
        workers = max(1, int(first.sweep.jobs))
        print(f"sweep: {len(jobs)} runs, {workers} at a time, into {root}")

        def launch(job: tuple[str, list[str]]) -> tuple[str, int]:
            name, args = job
            for attempt in range(retries + 1):
                code = run_train(args, root, name, attempt)
                print_outcome(root, name, code, attempt, retries)
                if code == 0:
                    break
            return name, code

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(launch, jobs))
    done = [str(root / name) for name, code in results if code == 0]
    failed = [name for name, code in results if code != 0]
    if done:
        print("aggregate with:\n  llmguide report " + " ".join(done))
    if failed:
        print(f"sweep: {len(failed)} of {len(results)} runs failed: {failed}", file=sys.stderr)
    return 1 if failed else 0
