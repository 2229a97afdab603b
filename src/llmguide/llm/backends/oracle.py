"""Oracle backend: answers from an env family's ground-truth goal oracle (no language model).

Prompt convention (shared with the prompt templates in ``llmguide/llm/prompts``): the state caption
is the rest of the **last line that starts with** ``Caption:``.  A prompt without such a line is used
whole as the caption; that fallback is counted in ``stats["no_caption"]`` and logged.

A method whose prompts ask something else (a labelling question, a program) gives the oracle its own
**answerers** (``OracleLM(family, answerers=[...])``, built by the method's recipe): each has a ``name``,
``generate(prompt) -> str | None`` and ``score(prompt, candidates) -> list[float] | None`` and answers
the prompts it recognises (None: not mine).  The first answerer that recognises a prompt answers it
(counted in ``stats["<name>_answers"]``); other prompts get the env oracle's goal suggestions.  An answerer
whose generated answers write a label or a preference in a format of its own also has ``answer_formats``
(:class:`~llmguide.llm.backends.counterfactual.AnswerFormat`), so the counterfactual LMs answer in it.
``score`` gives 0.0 to the oracle's answers and ``MISS_SCORE`` to the others, so the oracle goes through
exactly the code path of an LM.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from llmguide.llm.base import Completion, LanguageModel, check_score_args

log = logging.getLogger(__name__)

CAPTION_PREFIX = "Caption:"
MISS_SCORE = -1e9


def extract_caption(prompt: str) -> str | None:
    """The rest of the last line of ``prompt`` starting with ``Caption:`` (stripped), or None."""
    for line in reversed(prompt.splitlines()):
        if line.lstrip().startswith(CAPTION_PREFIX):
            return line.lstrip()[len(CAPTION_PREFIX):].strip()
    return None


class Answerer(Protocol):
    """A method's ground-truth answers to its own prompts (see the module docstring)."""

    name: str

    def generate(self, prompt: str) -> str | None: ...

    def score(self, prompt: str, candidates: Sequence[str]) -> list[float] | None: ...


class OracleLM(LanguageModel):
    """Ground-truth goals of ``env_family`` (``llmguide.envs.get_oracle``) behind the LM interface."""

    backend = "oracle"

    def __init__(self, env_family: str, answerers: Sequence[Answerer] = (), actions: str = "primitive"):
        from llmguide.envs import get_oracle

        self.env_family = env_family
        self.model_id = f"oracle-{env_family}" + ("-text" if actions == "text" else "")
        self.oracle = get_oracle(env_family, actions)   # actions="text": goals are ELLM's action strings
        self.answerers = list(answerers)
        self.stats: dict[str, Any] = {"no_caption": 0, **{f"{a.name}_answers": 0 for a in self.answerers}}

    def __repr__(self) -> str:
        return f"OracleLM(env_family={self.env_family!r})"

    def _suggest(self, prompt: str) -> list[str]:
        caption = extract_caption(prompt)
        if not getattr(self.oracle, "ground_truth", True):
            return []   # an env without ground truth (your own env): nothing to suggest, nothing to warn about
        if caption is None:
            self.stats["no_caption"] += 1
            log.warning("oracle LM: prompt has no line starting with %r; using the whole prompt as caption",
                        CAPTION_PREFIX)
            caption = prompt
        return list(self.oracle.suggest_from_caption(caption))

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """Bullets ``- goal``, one per line, for the goals the oracle suggests from each prompt's caption."""
        out = []
        for prompt in prompts:
            answer = self._answer("generate", prompt)
            if answer is not None:
                out.append(Completion(text=answer, finish_reason="stop", meta={"answerer": True}))
                continue
            goals = self._suggest(prompt)
            out.append(Completion(text="\n".join(f"- {g}" for g in goals), finish_reason="stop",
                                  meta={"goals": goals}))
        return out

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """0.0 for candidates the oracle suggests from the context's caption, -1e9 for the others."""
        check_score_args(contexts, candidates)
        rows = []
        for context, cands in zip(contexts, candidates, strict=True):
            answer = self._answer("score", context, cands)
            if answer is not None:
                rows.append([float(x) for x in answer])
                continue
            good = set(self._suggest(context))
            rows.append([0.0 if self.oracle.canonical(c) in good else MISS_SCORE for c in cands])
        return rows

    def _answer(self, how: str, *args: Any) -> Any:
        """The first answerer's ``how`` (generate / score) answer to a prompt, counted; None when none knows it."""
        for answerer in self.answerers:
            answer = getattr(answerer, how)(*args)
            if answer is not None:
                self.stats[f"{answerer.name}_answers"] += 1
                return answer
        return None


def last_line(prompt: str, prefix: str) -> str | None:
    """The rest of the last line starting with ``prefix`` (stripped, surrounding quotes removed), or None."""
    for line in reversed(prompt.splitlines()):
        if line.startswith(prefix):
            text = line[len(prefix):].strip()
            if len(text) >= 2 and text[0] == text[-1] == '"':
                text = text[1:-1]
            return text
    return None
