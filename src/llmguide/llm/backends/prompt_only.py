"""The prompt-only control (``llm=prompt_only``): answers from what the prompt itself tells, with no LM.

A few-shot prompt's worked examples carry answers (ELLM's example captions name actions, BK-Code's notes end with
an example program, ONI's label examples say yes twice and no once).  An LM arm that repeats them shows the
prompt's knowledge, not the LM's.  This backend answers every request from the request's own prompt, read by
:func:`llmguide.llm.examples.worked_examples`, so any prompt, a user's own included, gets its control for free:

* **a list answer** (bullet items): ``k`` of the items the examples name, drawn at random without replacement.
  ``k`` is matched to the LM arm it controls: the number of items the LM's table (``llm.match_table``) answers to
  the same request; without a table, or for a request the table lacks, the number the oracle gives on that state
  (as ``llm=random``), else the examples' mean;
* **a label or a preference** (``<answer>yes</answer>``, a method's own format): drawn at the examples' rates;
* **a program**: the prompt's example program, as written (BK-Code's Φ);
* **a scored request**: the candidates the examples name score 0.0 in a random order, the rest ``MISS_SCORE``;
  yes / no or preference candidates get the examples' label at their rate.

A prompt without examples has no prompt-only control: the request raises :class:`LLMUnavailableError` saying so
(a zero-shot prompt tells no answers; its control is ``llm=random``).  The same prompt always gets the same answer
within a run (seeded by ``llm.seed``: the run's seed), as a deterministic LM would give.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.counterfactual import LABELS, PREFERENCES, TAG_FORMATS, AnswerFormat, normalised
from llmguide.llm.backends.oracle import MISS_SCORE
from llmguide.llm.base import Completion, LanguageModel, check_score_args
from llmguide.llm.examples import WorkedExample, WorkedExamples, worked_examples

NO_EXAMPLES = ("llm=prompt_only: the prompt has no worked examples (no answer it tells), so it has no prompt-only "
               "control; its knowledge control is llm=random")


class PromptOnlyLM(LanguageModel):
    """Answers each request from its prompt's worked examples (see the module docstring).

    ``oracle``: an :class:`~llmguide.llm.backends.oracle.OracleLM` used only to count how many items to give on a
    state when no ``match_table`` answers it (never for which items); ``match_table``: an answer table of the LM
    arm this control is matched to; ``formats``: the answer formats a method writes labels in (beside the tag)."""

    backend = "prompt_only"

    def __init__(self, seed: int = 0, oracle: Any = None, match_table: str | Path | None = None,
                 formats: Sequence[AnswerFormat] = ()):
        self.seed = int(seed)
        self.oracle = oracle
        self.formats = [*TAG_FORMATS, *formats]
        self.model_id = f"prompt_only/seed{self.seed}"
        self._match = None
        if match_table:
            from llmguide.llm.table import AnswerTable

            self._match = AnswerTable(match_table)
        self._memo: dict[tuple, Any] = {}
        self.counts = {"answers": 0, "lists": 0, "items": 0, "matched_k": 0, "labels": 0, "yes": 0,
                       "programs": 0, "scored": 0}

    def __repr__(self) -> str:
        return f"PromptOnlyLM(seed={self.seed})"

    def _rng(self, *key: Any) -> np.random.Generator:
        """A generator for one request: the same request gets the same answer, whatever the order of requests."""
        digest = hashlib.sha256(repr((self.seed, *key)).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    @staticmethod
    def _examples(prompt: str) -> WorkedExamples:
        found = worked_examples(prompt)
        if not found:
            raise LLMUnavailableError(NO_EXAMPLES)
        return found

    # -- generate ----------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], *, max_tokens: int = 48, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int | None = None) -> list[Completion]:
        out = []
        for prompt in prompts:
            key = ("generate", prompt, max_tokens, temperature, tuple(stop or ()))
            if key not in self._memo:
                self._memo[key] = self._generated(prompt, {"prompt": prompt, "max_tokens": max_tokens,
                                                           "temperature": temperature, "stop": stop})
                self.counts["answers"] += 1
            out.append(Completion(text=self._memo[key], finish_reason="stop", meta={"counterfactual": "prompt_only"}))
        return out

    def _generated(self, prompt: str, payload: dict[str, Any]) -> str:
        found = self._examples(prompt)
        rng = self._rng("generate", prompt)
        if found.programs:
            self.counts["programs"] += 1
            program = found.programs[int(rng.integers(len(found.programs)))]
            return f"```python\n{program}```"
        label = self._label_answer(found, rng)
        if label is not None:
            return label
        items = found.items
        if not items:   # examples that are neither lists nor labels: one example answer as written
            return found.answers[int(rng.integers(len(found.answers)))]
        k = min(self._count(prompt, payload, found), len(items))
        picks = [items[j] for j in rng.choice(len(items), size=k, replace=False)] if k else []
        self.counts["lists"] += 1
        self.counts["items"] += len(picks)
        return "\n".join(f"- {p}" for p in picks)

    def _label_answer(self, found: WorkedExamples, rng: np.random.Generator) -> str | None:
        """The examples' label (or preference) at their rate, in their format; None when they write none."""
        for form in self.formats:
            read = [form.read(a) for a in found.answers]
            if not read or any(r is None for r in read):
                continue
            pick = str(read[int(rng.integers(len(read)))])   # an example's answer: its rate is the examples'
            if form.kind == "label":
                self.counts["labels"] += 1
                self.counts["yes"] += int(pick == "yes")
                return form.template.format(pick)
            return form.template.format(PREFERENCES[pick])
        return None

    def _count(self, prompt: str, payload: dict[str, Any], found: WorkedExamples) -> int:
        """How many items to name: the matched LM's, else the oracle's on this state, else the examples' mean."""
        if self._match is not None:
            from llmguide.llm.table import request_key

            row = self._match.get(request_key("generate", payload))
            if row is not None and row[0] == "generate":
                self.counts["matched_k"] += 1
                return len(WorkedExample("", str(row[1].get("text", ""))).items)
        if self.oracle is not None:
            truth = self.oracle.generate([prompt])[0].text
            return len(WorkedExample("", truth).items)
        return int(round(np.mean([len(e.items) for e in found.examples])))

    # -- score -------------------------------------------------------------------------------------
    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
              normalize: bool = False) -> list[list[float]]:
        check_score_args(contexts, candidates)
        rows = []
        for context, cands in zip(contexts, candidates, strict=True):
            key = ("score", context, tuple(cands))
            if key not in self._memo:
                self._memo[key] = self._scored(context, list(cands))
                self.counts["answers"] += 1
                self.counts["scored"] += 1
            rows.append(list(self._memo[key]))
        return rows

    def _scored(self, context: str, cands: list[str]) -> list[float]:
        found = self._examples(context)
        rng = self._rng("score", context, tuple(cands))
        norm = [normalised(c) for c in cands]
        if set(norm) == set(LABELS) or (set(norm) and set(norm) <= set(PREFERENCES)):
            answer = self._label_answer(found, rng)
            pick = None
            for form in self.formats:
                if answer is not None and (pick := form.read(answer)) is not None:
                    break
            if pick is None:
                raise LLMUnavailableError("llm=prompt_only: the prompt's examples write no label or preference "
                                          "for its yes/no or preference candidates")
            return [0.0 if n == pick else MISS_SCORE for n in norm]
        named = {normalised(i) for i in found.items}
        order = rng.permutation(len(cands))
        return [-float(rank) if n in named else MISS_SCORE for n, rank in zip(norm, order, strict=True)]

    def io_stats(self) -> dict[str, float]:
        c = self.counts
        return {"answers": float(c["answers"]), "answer_goals": c["items"] / c["lists"] if c["lists"] else 0.0,
                "matched_k": float(c["matched_k"]), "programs": float(c["programs"]),
                "answer_yes_rate": c["yes"] / c["labels"] if c["labels"] else 0.0}

    def close(self) -> None:
        if self._match is not None:
            self._match.close()
            self._match = None
