"""Language-model backends behind one batch-first interface (see :mod:`llmguide.llm.base`).

Light on import: backends (llama-cpp, openai, torch/transformers) load only when built.
"""

from __future__ import annotations

from typing import Any

from llmguide.llm.base import Completion, LanguageModel

__all__ = ["Completion", "LanguageModel", "make_llm"]


def make_llm(llm_cfg: Any, env_family: str | None = None, template_version: str | None = None,
             online: bool = False) -> LanguageModel:
    """Build the backend chosen by ``llm_cfg`` (see :func:`llmguide.llm.factory.make_llm`)."""
    from llmguide.llm.factory import make_llm as _make_llm

    return _make_llm(llm_cfg, env_family, template_version, online)
