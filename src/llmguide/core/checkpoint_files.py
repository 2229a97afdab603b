"""Checkpoint files read safely: ``torch.load(weights_only=True)`` with numpy's types allowed
(:func:`safe_torch_load`), the classes a blob holds that it would refuse (:func:`unsafe_globals`), and one
checkpoint file loaded or skipped with a one-line reason (:func:`load_or_skip`)."""

from __future__ import annotations

import io
import logging
from functools import cache
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("llmguide.core.rundir")   # the run directory's own messages (where they always were)


@cache
def numpy_safe_globals() -> tuple[Any, ...]:
    """What numpy arrays, scalars and dtypes (RNG states, replay buffers, normalisers) need to load
    with ``weights_only=True``: rebuilding them calls no other function (an object array's items
    must themselves be allowed; numpy refuses raw bytes for object dtype)."""
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:                      # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtypes = [t for t in vars(np.dtypes).values() if isinstance(t, type) and issubclass(t, np.dtype)]
    return (np.ndarray, np.dtype, _reconstruct, scalar, *dtypes)


def safe_torch_load(path: str | Path | io.BytesIO) -> Any:
    """``torch.load(weights_only=True)`` with numpy's types allowed; never runs code from the file."""
    with torch.serialization.safe_globals(list(numpy_safe_globals())):
        return torch.load(path, map_location="cpu", weights_only=True)


def unsafe_globals(data: bytes) -> list[str]:
    """The classes and functions in a ``torch.save`` blob that :func:`safe_torch_load` would refuse."""
    with torch.serialization.safe_globals(list(numpy_safe_globals())):
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)))


def named_step(path: Path) -> int | None:
    """The step in a checkpoint's file name ``ckpt_<step>.pt`` (None for another name)."""
    digits = path.stem.removeprefix("ckpt_")
    return int(digits) if path.stem.startswith("ckpt_") and digits.isdigit() else None


def load_or_skip(path: Path, skipped: list[str]) -> dict[str, Any] | None:
    """A checkpoint file's state, or None with the reason appended to ``skipped`` (and logged)."""
    try:
        if path.stat().st_size == 0:
            raise ValueError("empty file")
        state = safe_torch_load(path)
        if not isinstance(state, dict) or type(state.get("step")) is not int:
            raise ValueError("not a checkpoint (no integer 'step')")
    except Exception as err:             # noqa: BLE001  (any damage: try the next one)
        skipped.append(f"{path.name} ({load_error(err)})")
        log.warning("checkpoint %s does not load: %s", path, load_error(err))
        return None
    return state


def load_error(err: BaseException) -> str:
    """One line for why a checkpoint did not load (torch's weights_only message spans a page)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        boilerplate = ("Please file an issue", "Check the documentation", "(1)", "(2)")
        detail = [ln.split("WeightsUnpickler error:", 1)[-1].strip() for ln in lines[1:]
                  if not ln.startswith(boilerplate) or "WeightsUnpickler error:" in ln]
        detail = " ".join(d for d in detail if d).split(" Please use `torch.serialization")[0]
        return f"safe loading refused it: {detail[:300] or '?'}"
    return f"{type(err).__name__}: {lines[0][:300]}" if lines else type(err).__name__
