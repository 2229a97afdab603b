"""Which code produced a run: every session that trains in a run folder (its start, and each resume) appends one
line to ``provenance.jsonl``: the time, the package version, the git commit of the package's checkout and
whether its tracked files differed from that commit (``dirty``).  A run resumed under newer code therefore
lists both commits, and a study report can say which code each arm ran (``benchmarks/harness.py``).

Outside a git checkout (an installed wheel) ``commit`` is null and the version says what ran.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

FILE = "provenance.jsonl"
PACKAGE = Path(__file__).resolve().parents[1]   # src/llmguide: the code whose changes matter to a run


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def code_version() -> dict[str, Any]:
    """``{"version", "commit", "dirty"}`` of the running package: ``commit`` is the checkout's HEAD (None outside
    git), ``dirty`` whether tracked files under the package differ from it (None when unknown)."""
    from llmguide.version import __version__

    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", str(PACKAGE)) if commit else None
    return {"version": __version__, "commit": commit, "dirty": None if status is None else bool(status)}


def record(run_dir: str | Path, resumed: bool) -> None:
    """Append this session's line to the run's ``provenance.jsonl``."""
    line = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "resumed": bool(resumed), **code_version()}
    with open(Path(run_dir) / FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's sessions, oldest first (unreadable lines skipped; none for a run older than this file)."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return []
    sessions = []
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            sessions.append(entry)
    return sessions


def label(session: dict[str, Any]) -> str:
    """A session's code as one word: the short commit (``+dirty`` when the tree differed), or the version."""
    commit = session.get("commit")
    if not commit:
        return f"v{session.get('version', '?')} (no git)"
    return str(commit)[:10] + ("+dirty" if session.get("dirty") else "")


def run_codes(run_dir: str | Path) -> list[str]:
    """The distinct codes that trained the run, in order (``["unrecorded"]`` for a run without the file)."""
    codes = list(dict.fromkeys(label(s) for s in read(run_dir)))
    return codes or ["unrecorded"]
