"""The files a study's arms train on besides the code (issue 67): answer tables and label runs, hashed once the
preparation is done and checked before every sweep."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .paths import relative_paths

if TYPE_CHECKING:
    from .plan import Plan

# --- the artifacts a study trains on (issue 67) ----------------------------------------------------------------
# What an arm reads besides the code: answer tables (llm.table, llm.match_table) and label runs (method.labels: BK's
# program, preference model or goal library, with the run's manifest). Their sha256 are recorded in
# <runs>/artifacts.json once the preparation is done, and checked before every sweep: an artifact that changed since
# the study's runs trained on it is refused (one line, exit 2), unless this call's preparation rebuilt it.
ARTIFACT_FILES = ("llm.table", "llm.match_table")                       # override keys that name one file
LABEL_RUNS = {"method.labels": ("bk/manifest.json", "bk/final.py", "bk/pref_model.pt", "bk/library.json")}
ARTIFACTS = "artifacts.json"   # in the runs folder: {absolute path: {path, key, sha256, bytes, arms}}
# what a label run wrote that the results folder keeps a copy of (the LM's program, the goal library): text, so a
# reviewer reads what each arm trained on beside its numbers; the preference model and the manifest stay in the runs
KEPT = ("final.py", "library.json")
KEPT_DIR = "labels"   # <results>/<study>/<variant>/labels/<label run>/bk/<file>


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
    training (False: the runs folder has none, so they were hashed now, at report time). A label run's program or
    goal library (:data:`KEPT`) is copied into ``<out>/labels/`` when it still has its recorded sha256; its entry
    then names the copy (``kept``: relative to the result's folder)."""
    recorded = recorded_artifacts(plan)
    entries = (recorded or plan_artifacts(plan)).items()
    mine = []
    for file, entry in entries:
        entry = {**entry, "arms": [a for a in entry.get("arms", []) if a in arms]}
        if entry["arms"]:
            if entry.get("key") in LABEL_RUNS and Path(file).name in KEPT:
                entry.pop("kept", None)
                if kept := _keep(Path(file), entry["sha256"], plan.out):
                    entry["kept"] = kept
            mine.append(entry)
    return sorted(mine, key=lambda e: e["path"]), recorded is not None


def _keep(file: Path, sha256: str, out: Path) -> str | None:
    """Copy a label run's ``file`` (``<label run>/bk/<name>``) to ``out/labels/<label run>/bk/<name>`` if it still
    hashes to ``sha256``; the copy's path relative to ``out``, or None (the file is gone or changed: the record's hash
    is not this file's)."""
    if not file.is_file() or sha256_file(file) != sha256:
        return None
    kept = Path(KEPT_DIR) / file.parent.parent.name / file.parent.name / file.name
    (out / kept).parent.mkdir(parents=True, exist_ok=True)
    (out / kept).write_bytes(file.read_bytes())
    return kept.as_posix()


def artifacts_section(artifacts: list[dict[str, Any]], recorded: bool) -> list[str]:
    """``## Artifacts``: every file the arms trained on with its sha256; [] when they read none."""
    if not artifacts:
        return []
    when = ("recorded before training (`<runs>/artifacts.json`) and checked before every sweep" if recorded else
            "hashed at report time: the runs folder holds no record of them from training")
    kept = " A label run's program or goal list is kept beside this report (`labels/`)." if any(
        e.get("kept") for e in artifacts) else ""
    lines = ["## Artifacts", "", f"The files the arms trained on besides the code, with their sha256 ({when}).{kept}", "",
             "| file | override | sha256 | bytes | arms |", "|---|---|---|---|---|"]
    for e in artifacts:
        kept = f" ([kept]({e['kept']}))" if e.get("kept") else ""
        lines.append(f"| `{e['path']}`{kept} | `{e['key']}` | `{e['sha256']}` | {e['bytes']:,} | {', '.join(e['arms'])} |")
    return [*lines, ""]


