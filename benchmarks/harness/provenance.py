"""The code and the machine a study's runs come from (issue 67): the checkout's state (:func:`tree_state`), the
harness sessions that trained in a runs folder, each arm's recorded commits and each run's records."""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .where import HERE
from .where import repo as _repo

if TYPE_CHECKING:
    from .plan import Plan

def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- the code a study trains with ----------------------------------------------------------------------------
# A study trains from one commit: the code that makes its runs (the package, the study scripts, the build file)
# must have no uncommitted change, tracked or new, or --allow-dirty, which keeps the diff and its sha256 with the
# runs. Results, docs and tests may differ.
CODE_PATHS = ("src", "benchmarks", "pyproject.toml", ":(exclude)benchmarks/results")
SESSIONS = "code.jsonl"   # in the runs folder: one line per harness session that trained there


def _git_bytes(repo: Path, *args: str, ok: tuple[int, ...] = (0,)) -> bytes | None:
    try:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode in ok else None


def tree_state(repo: Path | None = None) -> dict[str, Any] | None:
    """The code the checkout would train with: ``{"commit", "dirty", "diff_sha256", "patch"}``, where ``patch`` is
    ``git diff HEAD`` of :data:`CODE_PATHS` plus every new (untracked, not ignored) file there as a patch, and
    ``diff_sha256`` its sha256 (None when clean). None outside a git checkout."""
    repo = repo or _repo()
    head = _git_bytes(repo, "rev-parse", "HEAD")
    if not head:
        return None
    patch = _git_bytes(repo, "diff", "HEAD", "--binary", "--", *CODE_PATHS) or b""
    new = _git_bytes(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE_PATHS) or b""
    for name in sorted(n for n in new.decode(errors="replace").split("\0") if n):
        patch += _git_bytes(repo, "diff", "--no-index", "--binary", "--", "/dev/null", name, ok=(0, 1)) or b""
    return {"commit": head.decode().strip(), "dirty": bool(patch),
            "diff_sha256": hashlib.sha256(patch).hexdigest() if patch else None, "patch": patch}


def record_session(plan: Plan, state: dict[str, Any] | None) -> dict[str, Any]:
    """Append this session's code to ``<runs>/code.jsonl`` (a dirty tree's patch beside it, in ``code/``)."""
    state = state or {"commit": None, "dirty": None, "diff_sha256": None, "patch": b""}
    entry = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "commit": state["commit"],
             "dirty": state["dirty"], "diff_sha256": state["diff_sha256"], "command": " ".join(plan.argv)}
    plan.runs.mkdir(parents=True, exist_ok=True)
    if state["patch"]:
        patch = plan.runs / "code" / f"{state['diff_sha256']}.patch"
        patch.parent.mkdir(exist_ok=True)
        patch.write_bytes(state["patch"])
        entry["patch"] = str(patch)
    with open(plan.runs / SESSIONS, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def sessions(plan: Plan) -> list[dict[str, Any]]:
    """The harness sessions that trained in the runs folder, oldest first (unreadable lines skipped)."""
    from llmguide.core.provenance import json_objects

    return json_objects(plan.runs / SESSIONS)


def mixed_comparisons(commits: dict[str, dict[str, list[Any]]], control: str) -> dict[str, list[str]]:
    """The paired comparisons whose runs (the arm's and the control's) come from more than one recorded code:
    ``{"<arm> - <control>": [codes]}``. A run from before runs recorded their code (``unrecorded``) is not
    counted: it can be told from no other."""
    out = {}
    for arm, codes in commits.items():
        if arm != control and control in commits:
            both = sorted((set(codes) | set(commits[control])) - {"unrecorded"})
            if len(both) > 1:
                out[f"{arm} - {control}"] = both
    return out


def code_of_arms(done: list[str]) -> tuple[dict[str, dict[str, list[Any]]], list[str]]:
    """Which code trained each arm's runs (:mod:`llmguide.core.provenance`): ``{arm: {code: [seeds]}}``, and the
    report's lines: one per arm, and a warning when the study's runs come from more than one code."""
    from llmguide.core.provenance import run_codes

    commits: dict[str, dict[str, list[Any]]] = {}
    for run in map(Path, done):
        cfg = yaml.safe_load((run / "config.yaml").read_text()) or {}
        for code in run_codes(run):
            commits.setdefault(run.parent.name, {}).setdefault(code, []).append(cfg.get("seed"))
    codes = sorted({c for arm in commits.values() for c in arm})
    lines = ["## Code", "", "The code each arm's runs were trained with (each run's `provenance.jsonl`: the commit "
             "of every session, a resume included; `+dirty`: the package's tracked files differed from it; "
             "`unrecorded`: a run from before runs recorded it).", ""]
    lines += [f"- `{arm}`: " + "; ".join(f"`{c}` (seeds {', '.join(map(str, seeds))})" for c, seeds in by.items())
              for arm, by in commits.items()]
    if len(codes) > 1:
        lines += ["", f"**Warning: this study's runs come from {len(codes)} different codes** ({', '.join(codes)}): "
                      "an arm may differ from another by code as well as by its overrides."]
    return commits, [*lines, ""]


# --- the runs' records (issue 67) ---------------------------------------------------------------------------------
# Each session of a run records its system, installed versions and LM in provenance.jsonl (llmguide.core.provenance);
# the report shows the fields whose values differ between arms. The command line and the config's sha256 differ by
# each arm's overrides and seed by design: they stay in the records, out of the comparison.
RECORD_PARTS = ("system", "lm")


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(f"{prefix}.{key}", item).items()}
    return {prefix: value}


def run_records(done: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The record fields of the finished runs: ``{"same": {field: value}, "differ": {field: {arm: [values]}},
    "unrecorded": [arms]}`` (an arm none of whose sessions has a record is not compared), and the report's lines."""
    from llmguide.core.provenance import read

    per_arm: dict[str, dict[str, set[str]]] = {}
    unrecorded = []
    for run in map(Path, done):
        arm = run.parent.name
        fields = per_arm.setdefault(arm, {})
        for session in read(run):
            for part in RECORD_PARTS:
                if part in session:
                    for key, value in _flat(part, session[part]).items():
                        fields.setdefault(key, set()).add(value if isinstance(value, str) else json.dumps(value))
    for arm in [a for a, fields in per_arm.items() if not fields]:
        unrecorded.append(arm)
        del per_arm[arm]
    keys = sorted({k for fields in per_arm.values() for k in fields})
    same, differ = {}, {}
    for key in keys:
        values = {arm: sorted(fields.get(key, {"(none)"})) for arm, fields in per_arm.items()}
        distinct = {tuple(v) for v in values.values()}
        if len(distinct) == 1 and len(next(iter(distinct))) == 1:
            same[key] = next(iter(distinct))[0]
        else:
            differ[key] = dict(sorted(values.items()))
    records = {"same": same, "differ": differ, "unrecorded": unrecorded}
    if not per_arm:
        return records, []
    lines = ["## Run records", "", "What every session of each run recorded (`provenance.jsonl`: the system, the "
             "installed versions, the configured LM); the command line and the config's sha256 differ by each arm's "
             "overrides and seed, and are left out here.", ""]
    if differ:
        lines += ["Fields that differ between arms (an arm's values over its runs):", "", "| field | values |",
                  "|---|---|"]
        lines += [f"| `{key}` | " + "; ".join(f"{arm}: {' / '.join(v)}" for arm, v in values.items()) + " |"
                  for key, values in differ.items()]
    else:
        lines.append("The record is the same for every run: "
                     + ", ".join(f"`{k}` {v}" for k, v in same.items() if k.startswith("system.")) + ".")
    if unrecorded:
        lines += ["", "No record in the runs of " + ", ".join(f"`{a}`" for a in unrecorded)
                  + " (trained before runs kept one)."]
    return records, [*lines, ""]


