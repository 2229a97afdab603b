"""One run of a sweep, shared by the local and the Ray launcher: its overrides per attempt, its child
process and the line that reports it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
