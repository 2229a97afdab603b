"""Name the machine paths in committed results relative (issue 67): ``python benchmarks/tools/relpaths.py``.

Rewrites in place, idempotently, every absolute path of the machines that made ``benchmarks/results/`` in its text
files (``harness.TEXT_SUFFIXES``) and in the ``meta`` table of its answer tables (``.sqlite``; the answers are not
touched). Only paths change: a JSON file whose numbers would differ after the rewrite is refused (exit 1, nothing
written). ``--check`` only lists the machine paths left (exit 1 when there are any).

How a path is named (:func:`harness.relativize`: the innermost folder that holds it wins):

- in a study folder ``<study>/<variant>/``, as the harness names them: its runs folder (``--runs`` of its
  ``result.json`` command, else the folder that holds its arms' ``<arm>/seed-N`` runs) as ``<runs>``, a run in it
  as ``<arm>/seed-0``; its preparation folder (``--prep``, else ``<runs>/prep``) as ``<prep>``; every other
  path-valued flag of its command by the flag's name (``--tables /x/t`` -> ``<tables>``, ``--data`` -> ``<data>``,
  ``--notes`` -> ``<notes>``);
- an answer table committed under ``benchmarks/results/`` by its path in the repository;
- the checkout those machines ran from (:data:`OLD_CHECKOUT`) by the path in the repository;
- their runs folder outside the checkout (:data:`OLD_RUNS_ROOT`) as ``<runs-root>``;
- ``/tmp`` as ``<tmp>``, a home as ``~``.

Shell scripts (``.sh``, the GPU leases' calls) are records of commands run on a lease's scratch disk and are left
as they ran.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
OLD_CHECKOUT = "/work/main"       # the checkout the results' machines ran from
OLD_RUNS_ROOT = "/work/runs"      # and the folder beside it they kept runs, tables and collections in
# a machine folder whose answer tables were committed -> the results folder they were committed to
COMMITTED_TABLES = {"/work/runs/ellm-tables": "ellm_craftax/open-lm-120k/tables"}
PATH_FLAGS_SKIPPED = ("results",)   # --results names the repository's results folder: named by its path


def _harness():
    """benchmarks/harness/ (benchmarks/ goes at the end of sys.path: an installed package still comes first)."""
    if str(HERE.parent) not in sys.path:
        sys.path.append(str(HERE.parent))
    return importlib.import_module("harness")


def json_numbers(value: Any, at: str = "") -> list[tuple[str, Any]]:
    """Every number in a parsed JSON value with where it is (``arms.ppo.values[0]``), in order."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [(at, value)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in json_numbers(v, f"{at}.{k}" if at else str(k))]
    return [n for i, v in enumerate(value) for n in json_numbers(v, f"{at}[{i}]")]


def text_numbers(path: Path, text: str) -> list[Any] | None:
    """The numbers of a JSON (or JSON-lines) file's text, in order (a key that names a run may be renamed, its
    values may not change); None for another kind of file or text that is not JSON."""
    try:
        if path.suffix == ".json":
            return [v for _, v in json_numbers(json.loads(text))]
        if path.suffix == ".jsonl":
            return [v for line in text.splitlines() if line.strip() for _, v in json_numbers(json.loads(line))]
    except ValueError:
        return None
    return None


def _flags(command: str) -> dict[str, str]:
    """``--name value`` pairs of a command line, values that name a path only (absolute, or relative to the
    checkout the command ran from); ``<runs>`` and other names already written are not paths."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = {}
    for flag, value in zip(words, words[1:], strict=False):
        if flag.startswith("--") and "/" in value and not value.startswith(("-", "<")):
            out.setdefault(flag[2:], value if value.startswith("/") else f"{OLD_CHECKOUT}/{value}".rstrip("/"))
    return out


def study_folders(folder: Path) -> dict[str, Any]:
    """The folders of one results folder's own machine (module docstring): from its JSON files' ``command`` and
    the ``<arm>/seed-N`` runs its files name."""
    h = _harness()
    commands, arms, texts = [], set(), []
    for path in sorted(folder.glob("*.json"), key=lambda p: p.name != "result.json"):
        text = path.read_text(errors="replace")
        texts.append(text)
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            if isinstance(data.get("command"), str):
                commands.append(data["command"])
            if isinstance(data.get("arms"), dict):
                arms |= set(data["arms"])
    texts += [p.read_text(errors="replace") for p in folder.glob("*.md")]
    flags: dict[str, str] = {}
    for command in commands:
        for k, v in _flags(command).items():
            flags.setdefault(k, v)
    runs = flags.pop("runs", None) or flags.pop("out", None)
    if runs is None:   # the folder holding the arms' seed-N runs, the most often named
        roots = Counter(p.rsplit("/", 2)[0] for t in texts for p in h.machine_paths(t)
                        if len(p.split("/")) > 3 and p.split("/")[-2] in arms and p.split("/")[-1].startswith("seed-"))
        runs = roots.most_common(1)[0][0] if roots else None
    folders: dict[str, Any] = {}
    for k, v in flags.items():
        if k not in PATH_FLAGS_SKIPPED and k != "prep":
            folders[v] = h.named(f"<{k}>")
    if runs:
        folders[runs] = ("<runs>", "")
        folders[flags.get("prep", f"{runs}/prep")] = h.named("<prep>")
    elif "prep" in flags:
        folders[flags["prep"]] = h.named("<prep>")
    return folders


def machine_folders(results: Path = RESULTS) -> dict[str, Any]:
    """The folders every results file shares: committed answer tables, the old checkout and runs root."""
    h = _harness()
    folders: dict[str, Any] = {OLD_CHECKOUT: (".", ""), OLD_RUNS_ROOT: h.named("<runs-root>")}
    for machine, committed in COMMITTED_TABLES.items():
        for table in sorted((results / committed).glob("*.sqlite")):
            rel = f"benchmarks/results/{committed}/{table.name}"   # its path in the repository
            folders[f"{machine}/{table.name}"] = (rel, rel + "/")
    return folders


def _study_folder(path: Path, results: Path) -> Path:
    parts = path.relative_to(results).parts
    return results.joinpath(*parts[:2]) if len(parts) >= 3 else results.joinpath(*parts[:1])


def rewrite_text(path: Path, text: str, folders: dict[str, Any]) -> str:
    """``text`` of ``path`` with its machine paths named relative; ValueError when a JSON number would change."""
    new = _harness().relativize(text, folders)
    if new != text and text_numbers(path, new) != text_numbers(path, text):
        raise ValueError(f"{path}: the rewrite would change its numbers; nothing written")
    return new


def rewrite_table(path: Path, folders: dict[str, Any]) -> int:
    """The machine paths in an answer table's ``meta`` named relative (its answers untouched); how many values."""
    h = _harness()
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT key, value FROM meta").fetchall()
        changed = [(h.relativize(v, folders), k) for k, v in rows if isinstance(v, str) and h.machine_paths(v)]
        for new, key in changed:
            if [v for _, v in json_numbers(json.loads(new))] != [v for _, v in json_numbers(json.loads(dict(rows)[key]))]:
                raise ValueError(f"{path}: meta {key}: the rewrite would change its numbers; nothing written")
        with db:
            db.executemany("UPDATE meta SET value = ? WHERE key = ?", changed)
        return len(changed)
    except sqlite3.DatabaseError:
        return 0   # not an answer table: no meta to name
    finally:
        db.close()


def table_paths(path: Path) -> list[str]:
    """The machine paths in an answer table's ``meta`` values ([] for another SQLite file)."""
    h = _harness()
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return [p for (v,) in db.execute("SELECT value FROM meta") if isinstance(v, str) for p in h.machine_paths(v)]
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return []


def text_files(results: Path) -> list[Path]:
    suffixes = _harness().TEXT_SUFFIXES
    return sorted(p for p in results.rglob("*") if p.is_file() and p.suffix in suffixes)


def leftover(results: Path = RESULTS) -> dict[str, list[str]]:
    """Every machine path left under ``results``: file (relative to it) -> its paths."""
    h = _harness()
    found = {str(p.relative_to(results)): h.machine_paths(p.read_text(errors="replace")) for p in text_files(results)}
    found |= {str(p.relative_to(results)): table_paths(p) for p in sorted(results.rglob("*.sqlite"))}
    return {k: v for k, v in found.items() if v}


def migrate(results: Path = RESULTS) -> dict[str, int]:
    """Rewrite every file under ``results`` (module docstring); file (relative) -> machine paths it named."""
    h = _harness()
    shared = machine_folders(results)
    per_study: dict[Path, dict[str, Any]] = {}
    plans = []
    for path in [*text_files(results), *sorted(results.rglob("*.sqlite"))]:
        folder = _study_folder(path, results)
        if folder not in per_study:
            per_study[folder] = {**shared, **(study_folders(folder) if folder.is_dir() else {})}
        plans.append((path, per_study[folder]))
    rewritten: dict[str, int] = {}
    writes = []
    for path, folders in plans:   # every rewrite is checked before any file is written
        if path.suffix == ".sqlite":
            if table_paths(path):
                writes.append((path, None, folders))
            continue
        text = path.read_text(errors="replace")
        if found := h.machine_paths(text):
            writes.append((path, rewrite_text(path, text, folders), folders))
            rewritten[str(path.relative_to(results))] = len(found)
    for path, new, folders in writes:
        if new is None:
            n = len(table_paths(path))
            if rewrite_table(path, folders):
                rewritten[str(path.relative_to(results))] = n
        else:
            path.write_text(new)
    return rewritten


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="results folder (default benchmarks/results)")
    p.add_argument("--check", action="store_true", help="list the machine paths left; rewrite nothing")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        print(f"relpaths: {args.results} is not a folder", file=sys.stderr)
        return 2
    if not args.check:
        try:
            done = migrate(args.results)
        except ValueError as e:
            print(f"relpaths: {e}", file=sys.stderr)
            return 1
        print(f"{len(done)} files, {sum(done.values())} machine paths named relative")
    left = leftover(args.results)
    for name, paths in left.items():
        print(f"{name}: {', '.join(sorted(set(paths))[:5])}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
