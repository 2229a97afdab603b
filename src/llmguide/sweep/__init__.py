"""Sweeps: ``llmguide train -m seed=0,1,2 method=ellm_oracle,rnd`` (Hydra's multirun syntax).

Every combination of the comma-separated values (and Hydra sweep functions such as ``range(0,3)``)
is one run, in its own process, ``sweep.jobs`` at a time, each in ``<run.dir>/<sweep name>/<key-value_...>``.
Every combination is checked as a single ``llmguide train`` checks its config (keys, values, ``env.task``,
``env.id``, method × env, the method's own checks) before the first run starts.  A failed run is
started again up to ``sweep.retries`` times (resumed from its last checkpoint if it wrote one, else from
scratch), then reported (and makes the exit code 1), never dropped silently.  Ctrl-C or SIGTERM to the launcher
is forwarded to every running run (each saves a checkpoint and exits 130; such a run is never retried), no
further run starts, the finished runs are aggregated and one line says what finished and how to continue
(exit 130).  At the end the finished
runs are aggregated into ``<run.dir>/<sweep name>/report/`` (arms: the swept values other than the seed;
a failure there is a warning, never a failed sweep), and the ``llmguide report`` command that aggregates
them again (e.g. with ``--control``) is printed.

``sweep.launcher=ray`` runs every combination as a Ray task (``sweep.cpus``/``sweep.gpus`` each) on the
cluster of ``ray.address`` instead of ``sweep.jobs`` local processes (:mod:`llmguide.sweep.ray_launcher`).
"""

from __future__ import annotations

import copy
import itertools
import shlex
import sys
from datetime import datetime
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from llmguide.pipelines import load_config
from llmguide.sweep.jobs import CHILDREN, STOPPED
from llmguide.sweep.local import run_locally


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


def check_combination(args: list[str], combo: list[str], swept: set[str]) -> DictConfig:
    """The checks a single ``llmguide train`` makes before any compute, on one combination: its config (keys,
    values, ``env.task``, ``env.id``, the method's env families) and the method's own checks (agent, inputs
    such as a pretrained run or labels); its config.  A failure names the combination's swept values."""
    from llmguide.core.errors import ConfigError
    from llmguide.pipelines import recipe_class

    try:
        cfg = load_config(args)
        recipe_class(cfg)(copy.deepcopy(cfg)).check()   # a recipe's check may fill in defaults: on a copy
    except ConfigError as err:
        where = " ".join(o for o in combo if o.split("=", 1)[0] in swept)
        raise ConfigError(err.key, f"{err.message} (sweep combination {where}; no run was started)") from None
    return cfg


def run_sweep(overrides: list[str]) -> int:
    """Run every combination; returns 0 when all succeeded."""
    combos, swept = expand(overrides)
    first = check_combination(combos[0], combos[0], swept)
    sweep_name = str(first.run.name or f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    root = Path(str(first.run.dir)).resolve() / sweep_name
    jobs, arms = [], {}
    for combo in combos:
        name = _name(combo, swept)
        args = [o for o in combo if not o.startswith("run.name=")] + [f"run.name={name}", f"run.dir={root}"]
        check_combination(args, combo, swept)   # a bad combination fails here, before any run starts
        jobs.append((name, args))
        arms[name] = " ".join(o for o in combo if o.split("=", 1)[0] in swept - {"seed"})
    retries = int(first.sweep.retries)
    if str(first.sweep.launcher) == "ray":
        from llmguide.sweep.ray_launcher import run_on_ray

        results = run_on_ray(jobs, root, first)
    else:
        with CHILDREN.forwarding():
            results = run_locally(jobs, root, max(1, int(first.sweep.jobs)), retries)
    done = [str(root / name) for name, code in results if code == 0]
    failed = [name for name, code in results if code not in (0, STOPPED)]
    if done:
        write_sweep_report(root, {name: arms[name] for name, code in results if code == 0})
        print("aggregate with:\n  llmguide report " + " ".join(done))
    if CHILDREN.signal is not None:
        print(stopped_line(CHILDREN.signal, results, root, overrides), file=sys.stderr)
        return STOPPED
    if failed:
        print(f"sweep: {len(failed)} of {len(results)} runs failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


def stopped_line(signal: str, results: list[tuple[str, int]], root: Path, overrides: list[str]) -> str:
    """The one line of a sweep stopped by ``signal``: what finished, what stopped, how to continue."""
    stopped = [name for name, code in results if code == STOPPED]
    started = sum((root / name / "checkpoints").is_dir() for name in stopped)
    again = [o for o in overrides if not o.startswith(("run.dir=", "run.name=", "run.resume="))]
    command = shlex.join(["llmguide", "train", "-m", *again, f"run.dir={root.parent}", f"run.name={root.name}",
                          "run.resume=true"])
    return (f"sweep: {signal}: stopped; {sum(code == 0 for _, code in results)} of {len(results)} runs finished, "
            f"{len(stopped)} stopped ({started} with a checkpoint); "
            f"continue with: {command}")


def write_sweep_report(root: Path, arms: dict[str, str]) -> Path | None:
    """``<root>/report/report.md`` over the finished runs ``{run name: arm}`` (an empty arm: grouped by
    method); printed.  A failure is a warning on stderr, never a failed sweep; returns the report or None."""
    try:
        from llmguide.report import write_report

        labels = {str(root / name): arm for name, arm in arms.items() if arm}
        path = write_report([str(root / name) for name in arms], out=str(root / "report"),
                            group_by=labels if len(labels) == len(arms) else "method")
    except Exception as err:  # noqa: BLE001 - the runs are done; a report problem must not fail the sweep
        print(f"sweep: report not written ({type(err).__name__}: {err})", file=sys.stderr)
        return None
    print(f"report: {path}")
    return path
