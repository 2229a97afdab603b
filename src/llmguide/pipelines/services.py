"""The run's language model and its one :class:`~llmguide.llm.service.core.LLMService`, built in one place.

Every method that asks an LM (ELLM's suggester, ONI's labeller, BK's and Motif's label steps, an
LM-backed reward of the standard recipe) gets its service from :func:`open_service`: the backend and
its persistent cache (:func:`llmguide.llm.factory.make_llm`), or, with ``llm.actor=true``, a client of
the one Ray actor holding the LM for the cluster (:mod:`llmguide.distributed.lm`); batching, queue,
retries, timeout and the worker's niceness come from the ``llm.service`` config block.
:func:`close_service` stops the service's worker before the LM is freed (an embedded llama.cpp model
freed under a running worker crashes the process).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import cfg_get, non_negative, positive, register_rule
from llmguide.core.errors import ConfigError, StorageError, file_ancestor
from llmguide.llm.base import LanguageModel
from llmguide.llm.cache.store import default_cache_path
from llmguide.llm.factory import GROUND_TRUTH_BACKENDS, make_llm
from llmguide.llm.service.core import LLMService

# what the progress bar shows of a run's LM: calls sent, the fraction of requests answered, fallbacks
LM_PROGRESS = {"calls": "lm/calls", "answered": "lm/answered_fraction", "fallbacks": "lm/fallbacks",
               "table": "lm/table_coverage"}   # what the progress bar shows of the LM (table: with llm.table only)

for _key, _rule in {"llm.require_fraction": lambda v: None if v is None or 0.0 <= v <= 1.0 else f"must be in [0, 1] or null, got {v!r}",
                    "llm.service.max_batch": positive, "llm.service.max_queue": positive,
                    "llm.service.max_retries": non_negative, "llm.service.timeout": positive,
                    "llm.service.worker_nice": non_negative}.items():
    register_rule(_key, _rule)


def check_cache_path(llm_cfg: DictConfig) -> None:
    """With the LM cache on: its file (``llm.cache.path``, else the default) must not be a folder nor sit under
    a file (:class:`StorageError` naming the path, before the LM loads)."""
    if not cfg_get(cfg_get(llm_cfg, "cache"), "enabled", False):
        return
    path = Path(cfg_get(llm_cfg.cache, "path") or default_cache_path()).expanduser()
    if path.is_dir():
        raise StorageError(OSError(errno.EISDIR, "is a folder"), path, key="llm.cache.path")
    if file_ancestor(path) is not None:
        raise StorageError(OSError(errno.ENOTDIR, "sits under a file"), path, key="llm.cache.path")


def make_run_lm(cfg: DictConfig, answerers: Sequence[Any] = (), online: bool = True) -> LanguageModel:
    """The run's LM: backend + cache, or the shared Ray actor's client with ``llm.actor=true``; an answer table
    (``llm.table``) is checked against the run's configuration first."""
    check_cache_path(cfg.llm)
    if cfg.llm.get("table"):
        from llmguide.pipelines.answers import check_table

        check_table(cfg)
    if bool(cfg.llm.get("actor", False)):
        if answerers and str(cfg.llm.backend) in GROUND_TRUTH_BACKENDS:
            raise ConfigError("llm.actor", "the oracle's answers to a method's own prompts run in the learner "
                                           "process; use llm.actor=false with llm=oracle")
        from llmguide.distributed.lm import actor_lm

        return actor_lm(cfg.llm, str(cfg.env.name), None)
    return make_llm(cfg.llm, str(cfg.env.name), online=online, answerers=answerers,
                    actions=str(cfg.env.get("actions") or "primitive"))


def open_service(cfg: DictConfig, answerers: Sequence[Any] = (), online: bool = True) -> LLMService:
    """The run's LM behind an :class:`LLMService` configured by ``llm.service``; close it with :func:`close_service`."""
    s = cfg.llm.service
    return LLMService(make_run_lm(cfg, answerers, online), max_batch=int(s.max_batch), max_queue=int(s.max_queue),
                      max_retries=int(s.max_retries), timeout=float(s.timeout), worker_nice=int(s.worker_nice))


def close_service(service: LLMService) -> None:
    """Stop the service (its worker joined) and then free the LM."""
    try:
        service.close()
    finally:
        service.lm.close()


@contextmanager
def service_for(cfg: DictConfig, answerers: Sequence[Any] = (), online: bool = False) -> Iterator[LLMService]:
    """:func:`open_service` for an offline step (labelling), closed in the right order on exit."""
    service = open_service(cfg, answerers, online)
    try:
        yield service
    finally:
        close_service(service)
