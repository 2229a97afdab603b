"""Machine paths never go into results (issue 67): find them (:func:`machine_paths`) and name them relative
(:func:`relativize`), a study's as :func:`plan_folders` says."""

from __future__ import annotations

import re
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .where import ROOT, root

if TYPE_CHECKING:
    from .plan import Plan

# An absolute path of the machine that made a result (its checkout, runs, scratch, home) never goes into results
# (issue 67): a reader's clone has none of them. System paths every machine has (/usr/bin/env, /dev/null) are not
# machine paths. A path ends at a character no path of ours holds (space, quote, backtick, colon, comma, brackets).
# the usual top folders of checkouts, runs and scratch, and the top folder of this checkout and of this machine's
# scratch wherever they are (a CI clone under /check holds machine paths too)
SYSTEM_ROOTS = ("usr", "dev", "proc", "sys", "etc", "bin", "lib")
_HERE_TOPS = [parts[1] for parts in (Path(p).resolve().parts for p in (ROOT, tempfile.gettempdir())) if len(parts) > 1]
MACHINE_ROOTS = tuple(dict.fromkeys((
    "work", "tmp", "home", "root", "Users", "mnt", "scratch", "data", "private", "var", "opt", "srv", "media", "run",
    "workspace", *(top for top in _HERE_TOPS if top not in SYSTEM_ROOTS))))
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
    checkout = root().resolve()
    folders: dict[str, Folder] = {str(worktree): (".", "") for worktree in worktrees(checkout)}
    for key, value in sorted(vars(plan.args).items()):
        if key in ("runs", "prep") or not (isinstance(value, Path) or isinstance(value, str) and value.startswith("/")):
            continue
        path = Path(value).resolve()
        if not path.is_relative_to(checkout):
            folders[str(path)] = named(f"<{key}>")
    folders[str(plan.runs)] = ("<runs>", "")
    folders[str(plan.prep)] = named("<prep>")
    return folders


@cache   # one git call per checkout and process: plan_folders runs for every artifact and report
def worktrees(checkout: Path) -> list[Path]:
    """This checkout and every other working tree of its repository (``git worktree list``): a study trained from a
    worktree pinned at its commit names the repository's files by that tree's path, and they are the same files."""
    import subprocess

    try:
        listed = subprocess.run(["git", "-C", str(checkout), "worktree", "list", "--porcelain"], capture_output=True,
                                text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return [checkout]
    others = [Path(line[len("worktree "):]).resolve() for line in listed.splitlines() if line.startswith("worktree ")]
    return list(dict.fromkeys([checkout, *others]))


def relative_paths(plan: Plan, text: str) -> str:
    """``text`` with the machine's folders named as :func:`plan_folders` says."""
    return relativize(text, plan_folders(plan))

