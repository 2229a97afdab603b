"""The local sweep launcher: ``sweep.jobs`` runs at a time, each in its own process, retried (never one
stopped by a signal)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llmguide.sweep.jobs import CHILDREN, STOPPED, print_outcome, retried, run_train


def run_locally(jobs: list[tuple[str, list[str]]], root: Path, workers: int, retries: int) -> list[tuple[str, int]]:
    """Run every ``(name, overrides)`` job, ``workers`` at a time; ``(name, exit code)`` of each."""
    print(f"sweep: {len(jobs)} runs, {workers} at a time, into {root}")

    def launch(job: tuple[str, list[str]]) -> tuple[str, int]:
        name, args = job
        if CHILDREN.signal is not None:   # stopped before this run's turn: it never starts
            return name, STOPPED
        for attempt in range(retries + 1):
            code = run_train(args, root, name, attempt)
            print_outcome(root, name, code, attempt, retries)
            if not retried(code, attempt, retries):
                break
        return name, code

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(launch, jobs))
