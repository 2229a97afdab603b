"""Counterfactual LMs: the knowledge controls.  Each answers every prompt the oracle answers, in the
oracle's format, with the knowledge taken out, so a method runs them unchanged (``llm=random``,
``llm=shuffled``, ``llm=constant``):

* ``random``: a valid answer drawn at random: a random ranking of the candidates of a ``score`` call;
  "yes" at ``positive_rate`` for a yes/no label; for a preference a tie at ``tie_rate``, else A or B
  at even odds; a goal list of as many goals as the oracle would give, drawn from the env's goals.
* ``shuffled``: the oracle's answers permuted across queries within the run: each query gets the
  oracle's answer to another query of the same kind (same candidates, same answer format), drawn among
  the last ``window`` (128) such queries, so the relation to the query is gone and the rate follows the
  oracle's as it changes over the run.  (With the whole run as the pool, ``window=0``, the answer at
  query t is drawn from queries 1..t-1 alike, so early answers weigh more: where the oracle says yes
  more often later in training, as to an agent that makes progress, the control said yes less often:
  0.22 vs the oracle's 0.30 on ONI's Craftax make_wood_pickaxe runs.)  Until a second query of a kind
  has been seen, its answer is a ``random`` one (never the query's own).
* ``constant``: one fixed answer: every candidate scored alike, every message helpful ("yes"), every
  pair a tie, every goal of the env.

The same prompt always gets the same answer within a run (a fixed random mapping, seeded by
``llm.seed``: the run's seed unless set), as a deterministic LM would give.  ``io_stats`` reports the answers'
marginal rates (``answer_yes_rate``, ``answer_tie_rate``, ``answer_goals``) beside the oracle's own on the
same queries (``oracle_yes_rate``, ``oracle_tie_rate``), so a report shows that a control was matched to the
treatment's rate.  A program (a fenced code block) has no counterfactual here: its method's control is its own.

**Answer formats.**  A generated answer is read by its :class:`AnswerFormat`: the kernel's own are the ``<answer>``
tag holding a label (yes / no) or a preference (A > B, B > A, A = B), as :mod:`llmguide.llm.parsing` reads them, and
the oracle's goal bullets; a method whose answers write a label or a preference otherwise gives its format with its
answerer (``answer_formats``, read after the tag's), so this module knows no method's format.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.oracle import MISS_SCORE, OracleLM
from llmguide.llm.base import Completion, LanguageModel, check_score_args

KINDS = ("random", "shuffled", "constant")
PREFERENCES = {"a>b": "A > B", "b>a": "B > A", "a=b": "A = B"}   # a preference, normalised -> as written
LABELS = ("yes", "no")


def normalised(text: str) -> str:
    """An answer as compared: lower case, no spaces (``" A > B"`` -> ``"a>b"``)."""
    return text.strip().lower().replace(" ", "")


@dataclass(frozen=True)
class AnswerFormat:
    """How an answerer writes a label or a preference in generated text.  ``pattern``'s first group is the answer
    (``yes`` / ``no`` for ``kind="label"``, ``A > B`` / ``B > A`` / ``A = B`` for ``"preference"``); the
    counterfactual answer is ``template`` with ``{}`` the answer it picks (the rest of the oracle's text is dropped).
    ``name`` is the kind of query: ``shuffled`` draws among the recent queries of one name."""

    name: str
    kind: str              # "label" | "preference"
    pattern: re.Pattern
    template: str

    def read(self, text: str) -> str | None:
        """The normalised answer (``"yes"``, ``"a>b"``) when ``text`` is written in this format, else None."""
        found = self.pattern.search(text)
        answer = normalised(found.group(1)) if found else None
        return answer if answer in (LABELS if self.kind == "label" else PREFERENCES) else None


ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)
# the kernel's own: the <answer> tag (llmguide.llm.parsing reads labels and preferences in it)
TAG_FORMATS = (AnswerFormat("yesno", "label", ANSWER_TAG, "<answer>{}</answer>"),
               AnswerFormat("pref-tag", "preference", ANSWER_TAG, "<answer>{}</answer>"))


class CounterfactualLM(LanguageModel):
    """``kind`` (random | shuffled | constant) answers in the format of ``oracle``'s answers."""

    def __init__(self, kind: str, oracle: OracleLM, seed: int = 0, positive_rate: float = 0.5,
                 tie_rate: float = 0.0, window: int = 128):
        if kind not in KINDS:
            raise ValueError(f"llm.backend: unknown counterfactual {kind!r}; choose one of {list(KINDS)}")
        self.kind, self.oracle = kind, oracle
        # the tag's formats, then those the oracle's answerers write in
        self.formats = [*TAG_FORMATS, *(f for a in oracle.answerers for f in getattr(a, "answer_formats", ()))]
        self.backend = kind
        self.model_id = f"{kind}({oracle.model_id})/seed{seed}"
        self.positive_rate, self.tie_rate = float(positive_rate), float(tie_rate)
        self.rng = np.random.default_rng(seed)
        self._memo: dict[tuple, Any] = {}
        # shuffled: the oracle's last ``window`` answers per kind (0: all of them)
        self._pool: dict[tuple, deque[Any]] = defaultdict(lambda: deque(maxlen=int(window) or None))
        self.counts = {"answers": 0, "labels": 0, "yes": 0, "prefs": 0, "ties": 0, "goal_lists": 0, "goals": 0,
                       "agree": 0, "oracle_yes": 0, "oracle_ties": 0}

    def __repr__(self) -> str:
        return f"CounterfactualLM({self.kind!r}, {self.oracle!r})"

    # -- the LM interface ---------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], *, max_tokens: int = 48, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int | None = None) -> list[Completion]:
        truths = self.oracle.generate(list(prompts), max_tokens=max_tokens)
        out = []
        for prompt, truth in zip(prompts, truths, strict=True):
            key = ("generate", prompt)
            if key not in self._memo:
                self._memo[key] = self._generated(truth)
            out.append(Completion(text=self._memo[key], finish_reason="stop", meta={"counterfactual": self.kind}))
        return out

    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
              normalize: bool = False) -> list[list[float]]:
        check_score_args(contexts, candidates)
        truths = self.oracle.score(list(contexts), [list(c) for c in candidates])
        rows = []
        for context, cands, truth in zip(contexts, candidates, truths, strict=True):
            key = ("score", context, tuple(cands))
            if key not in self._memo:
                self._memo[key] = self._scored(list(cands), truth)
            rows.append(list(self._memo[key]))
        return rows

    def io_stats(self) -> dict[str, float]:
        c = self.counts
        return {"answers": float(c["answers"]),
                "answer_yes_rate": c["yes"] / c["labels"] if c["labels"] else 0.0,
                "answer_tie_rate": c["ties"] / c["prefs"] if c["prefs"] else 0.0,
                "answer_goals": c["goals"] / c["goal_lists"] if c["goal_lists"] else 0.0,
                # labels and preferences equal to the oracle's own answer to that query: the knowledge left in
                # (compare with the agreement of two independent draws at these rates)
                "answer_agreement": c["agree"] / (c["labels"] + c["prefs"]) if c["labels"] + c["prefs"] else 0.0,
                # the oracle's own rates on the same queries: a shuffled control matches these by construction;
                # a gap to the oracle *arm*'s rate comes from the queries (its agent meets other messages)
                "oracle_yes_rate": c["oracle_yes"] / c["labels"] if c["labels"] else 0.0,
                "oracle_tie_rate": c["oracle_ties"] / c["prefs"] if c["prefs"] else 0.0}

    # -- score answers ---------------------------------------------------------------------------
    def _scored(self, cands: list[str], truth: list[float]) -> list[float]:
        norm = [normalised(c) for c in cands]
        self.counts["answers"] += 1
        if set(norm) == set(LABELS):
            yes = self._label(truth[norm.index("yes")] > MISS_SCORE / 2, ("score", "yesno"))
            return [0.0 if (n == "yes") == yes else MISS_SCORE for n in norm]
        if set(norm) and set(norm) <= set(PREFERENCES):
            best = norm[int(np.argmax(truth))]
            pick = self._pref(best, ("score", tuple(norm)))
            return [0.0 if n == pick else MISS_SCORE for n in norm]
        return self._ranking(truth, ("score", tuple(cands)))

    def _ranking(self, truth: list[float], kind: tuple) -> list[float]:
        """A goal ranking: suggested candidates score 0.0, the others ``MISS_SCORE`` (as the oracle's)."""
        truth = [float(x) for x in truth]
        if self.kind == "constant":
            return [0.0] * len(truth)
        if self.kind == "shuffled":
            row = self._swap(truth, kind)
            if row is not None:
                self._count_goals(sum(x > MISS_SCORE / 2 for x in row))
                return list(row)
        return [float(x) for x in self.rng.permutation(len(truth))]   # a random ranking of every candidate

    # -- generated answers -----------------------------------------------------------------------
    def _generated(self, truth: Completion) -> str:
        text = truth.text
        self.counts["answers"] += 1
        for form in self.formats:
            answer = form.read(text)
            if answer is None:
                continue
            if form.kind == "label":
                return form.template.format("yes" if self._label(answer == "yes", ("generate", form.name)) else "no")
            return form.template.format(PREFERENCES[self._pref(answer, ("generate", form.name))])
        if "```" in text:
            raise LLMUnavailableError(f"llm={self.kind} has no counterfactual program: a program's knowledge control "
                                      "is its method's own (a random program)")
        goals = [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]
        return "\n".join(f"- {g}" for g in self._goal_list(goals))

    def _goal_list(self, truth: list[str]) -> list[str]:
        vocabulary = list(self.oracle.oracle.goals)
        if self.kind == "constant":
            out = vocabulary
        elif self.kind == "shuffled" and (row := self._swap(truth, ("generate", "goals"))) is not None:
            out = list(row)
        else:
            n = min(len(truth), len(vocabulary))
            out = [vocabulary[j] for j in sorted(self.rng.choice(len(vocabulary), n, replace=False))]
        self._count_goals(len(out))
        return out

    # -- one answer of each kind ---------------------------------------------------------------------
    def _label(self, truth: bool, kind: tuple) -> bool:
        if self.kind == "constant":
            yes = True
        elif self.kind == "shuffled" and (other := self._swap(truth, kind)) is not None:
            yes = bool(other)
        else:
            yes = bool(self.rng.random() < self.positive_rate)
        self.counts["labels"] += 1
        self.counts["yes"] += int(yes)
        self.counts["agree"] += int(yes == bool(truth))
        self.counts["oracle_yes"] += int(bool(truth))
        return yes

    def _pref(self, truth: str, kind: tuple) -> str:
        if self.kind == "constant":
            pick = "a=b"
        elif self.kind == "shuffled" and (other := self._swap(truth, kind)) is not None:
            pick = str(other)
        elif self.rng.random() < self.tie_rate:
            pick = "a=b"
        else:
            pick = "a>b" if self.rng.random() < 0.5 else "b>a"
        self.counts["prefs"] += 1
        self.counts["ties"] += int(pick == "a=b")
        self.counts["agree"] += int(pick == truth)
        self.counts["oracle_ties"] += int(truth == "a=b")
        return pick

    def _swap(self, truth: Any, kind: tuple) -> Any:
        """Shuffled: the oracle's answer to another recent query of this kind (None while there is none yet)."""
        pool = self._pool[kind]
        other = pool[int(self.rng.integers(len(pool)))] if pool else None
        pool.append(truth)
        return other

    def _count_goals(self, n: int) -> None:
        self.counts["goal_lists"] += 1
        self.counts["goals"] += int(n)
