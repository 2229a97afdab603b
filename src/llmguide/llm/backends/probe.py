"""The startup probe of an OpenAI-compatible server (``llm=http``): one request of the mode the run will use,
timed, so a server that answers that mode too slowly is named before training, with the fix.

Scoring (``score``) asks the completions endpoint to echo the prompt with its log-probs, one request per
candidate; servers differ widely there.  vLLM and SGLang compute prompt log-probs in the same pass as the
prompt (fast); llama.cpp's server needs ``--logits_all`` and on CPU took 9-33 s per request, so every
request of a run timed out and fell back.  Generation (``generate``) is fast on all of them.  The probe
bypasses the LM cache (a cached answer says nothing about the server).  A request that answered, but slowly, is
timed once more (a server's first request can pay for its warm-up); one that failed or timed out is not (a second
would wait behind the abandoned one).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from llmguide.core.config import cfg_get
from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.http import HTTPLM

# a prompt of the length ELLM and ONI send (a caption and a question, about 120 tokens)
PROBE_CONTEXT = (
    "You are playing a survival game. Each step you see a caption of your surroundings and your inventory.\n"
    "Caption: You see grass, sand, a tree, water and a cow. You are facing the tree. Your health, food, drink "
    "and energy are high. You have 2 wood and 1 sapling in your inventory. It is day.\n"
    "Question: which goal makes sense now? Think of what you can achieve with what you see and what you have.\n"
    "Goal:"
)
PROBE_CANDIDATE = " collect wood"


def time_request(lm: HTTPLM, mode: str, max_tokens: int = 16) -> tuple[float, str | None]:
    """(seconds, error or None) of one ``score`` (one candidate) or ``generate`` request."""
    start = time.perf_counter()
    try:
        if mode == "score":
            lm.score([PROBE_CONTEXT], [[PROBE_CANDIDATE]])
        else:
            lm.generate([PROBE_CONTEXT], max_tokens=max_tokens)
        error = None
    except LLMUnavailableError as err:
        error = str(err)
    return time.perf_counter() - start, error


@dataclass
class Probe:
    """What the probe found: ``warning`` (None: the mode is usable) and, when a slow or failed ``score`` was
    followed by one ``generate`` request, that request's seconds (None: not tried or failed)."""

    warning: str | None = None
    generate_seconds: float | None = None
    base_url: str = ""


def probe_http(llm_cfg: Any, mode: str, threshold: float, switch: str | None = None,
               max_tokens: int = 16) -> str | None:
    """Time one ``mode`` request to the server of ``llm_cfg``; a warning with the fix when it took longer than
    ``threshold`` seconds or failed, else None.  ``switch`` names the override that moves the run to
    ``generate`` (``method.suggester=generate``)."""
    return probe_server(llm_cfg, mode, threshold, switch, max_tokens).warning


def probe_server(llm_cfg: Any, mode: str, threshold: float, switch: str | None = None,
                 max_tokens: int = 16) -> Probe:
    """:func:`probe_http` with what it measured (:class:`Probe`)."""
    if not threshold or mode not in ("score", "generate"):
        return Probe()
    timeout = float(cfg_get(llm_cfg, "timeout", 30.0))
    lm = HTTPLM(str(cfg_get(llm_cfg, "base_url")), str(cfg_get(llm_cfg, "model")),
                api_key_env=str(cfg_get(llm_cfg, "api_key_env", "OPENAI_API_KEY")), concurrency=1, timeout=timeout,
                max_retries=0, chat=bool(cfg_get(llm_cfg, "chat", False)))
    notice = threading.Timer(2.0, lambda: print(
        f"LM probe: waiting for one {mode} request to {lm.base_url} (at most llm.timeout={timeout:g} s) ...",
        file=sys.stderr, flush=True))    # a slow server: say what the wait is
    notice.daemon = True
    try:
        notice.start()
        seconds, error = time_request(lm, mode, max_tokens)
        if error is None and seconds > threshold:     # answered, slowly: the server may have been warming up
            seconds, error = time_request(lm, mode, max_tokens)
        notice.cancel()
        if error is None and seconds <= threshold:
            return Probe(base_url=lm.base_url)
        where = f"{lm.base_url} (model {lm.model_id!r})"
        if error is not None and "timed out" not in error:
            return Probe(f"LM probe: one {mode} request to {where} failed: {error}; the run goes on and counts "
                         f"its fallbacks (lm/answered_fraction)", base_url=lm.base_url)
        what = "echo + prompt log-probs; the method sends one per candidate" if mode == "score" else "completion"
        took = (f"got no answer within llm.timeout={timeout:g} s" if error is not None else
                f"took {seconds:.1f} s (llm.probe_threshold={threshold:g} s)")
        fixes, generate = [], None
        if mode == "score" and switch:
            other, other_error = time_request(lm, "generate", max_tokens)
            generate = other if other_error is None and other <= threshold else None
            fixes.append(f"{switch} (one generate request took {other:.1f} s)" if other_error is None else switch)
        fixes.append(f"raise llm.timeout (now {timeout:g} s)")
        if mode == "score":
            fixes.append("serve the model where prompt log-probs are fast (vLLM, SGLang; llama.cpp's server is slow "
                         "at them on CPU)")
        return Probe(f"LM probe: one {mode} request ({what}) to {where} {took}; fix: {'; or '.join(fixes)}",
                     generate, lm.base_url)
    finally:
        notice.cancel()
        lm.close()
