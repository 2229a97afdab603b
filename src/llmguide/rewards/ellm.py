"""ELLM (Du, Watkins et al. 2023): LM-suggested goals and the goal-achievement reward.

Two parts, usable separately:

* :class:`GoalSuggester` keeps, for each parallel env, the goals suggested for its current state.
  Modes: ``generate`` (few-shot bullet prompt, parsed robustly), ``score`` (closed vocabulary:
  rank the env's goal vocabulary by LM log-likelihood given the caption, keep the top-k),
  ``oracle`` (the env family's ground-truth oracle) and ``all_goals`` (every vocabulary goal:
  the novelty baseline).  The LM is asked only when the *state signature* (visible objects,
  inventory item names, vitals) changes, through the asynchronous :class:`LLMService`; answers
  are memoised per signature.  It never blocks: until an answer arrives the env keeps its last
  known suggestions (counted as ``stale``) or none.
* :class:`ELLMReward` pays when an event of the transition (``info["events"]``, e.g. "collect
  wood", computed by the env from real state changes) matches a goal suggested for the state
  *before* the action (``info["ellm_goals"]``): cosine of sentence embeddings >= threshold, or
  exact match.  Each goal pays at most once per episode; the reward is 1 or the cosine.

Suggestion quality is graded against the oracle when an answer arrives (for the state it was
asked about): each suggested goal counts as good / ill-timed / impossible; a response that
does not parse counts as one unparseable unit.  Free-form goals are graded through the nearest
vocabulary goal when its cosine reaches the match threshold, otherwise they are impossible.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SUGGESTERS = ("generate", "score", "oracle", "all_goals")
GRADES = ("good", "ill-timed", "impossible", "unparseable")


# --- state signature -----------------------------------------------------------------------
_SENTENCE = re.compile(r"you (see|face|have|feel|are)\s+([^.]*)\.?", re.IGNORECASE)
_COUNT = re.compile(r"^(\d+)\s+(.+)$")
COUNT_CAP = 4  # item counts above this look the same (no Crafter recipe needs more than 4 of an item)


def _split_list(text: str) -> list[str]:
    parts = re.split(r",\s*|\s+and\s+", text.strip())
    return [p.strip().lower() for p in parts if p.strip() and p.strip().lower() != "nothing"]


@dataclass(frozen=True)
class StateSignature:
    """What the goal suggestions depend on: visible objects, inventory (counts capped), vitals."""

    objects: tuple[str, ...] = ()
    inventory: tuple[str, ...] = ()   # "2 wood", "1 sapling" (counts capped at COUNT_CAP)
    vitals: tuple[str, ...] = ()      # "hungry", "thirsty", ... and "sleeping"
    raw: str = ""  # normalised caption, only when it did not parse into the fields above

    def caption(self) -> str:
        """A canonical caption of the signature (the same signature gives the same prompt)."""
        if self.raw:
            return self.raw
        parts = [f"You see {', '.join(self.objects)}." if self.objects else "You see nothing."]
        parts.append(f"You have {', '.join(self.inventory)}." if self.inventory else "You have nothing.")
        feel = [v for v in self.vitals if v != "sleeping"]
        if feel:
            parts.append(f"You feel {', '.join(feel)}.")
        if "sleeping" in self.vitals:
            parts.append("You are sleeping.")
        return " ".join(parts)


def state_signature(caption: str, count_cap: int = COUNT_CAP) -> StateSignature:
    """Parse an env caption ("You see tree, cow. You face tree. You have 2 wood. You feel thirsty.").

    The faced object is dropped and item counts are capped, so the signature changes only when
    the visible objects, the (capped) inventory or the vitals change.  A caption in another
    format falls back to the lower-cased caption with digits removed.
    """
    fields: dict[str, list[str]] = {"see": [], "have": [], "feel": []}
    found = False
    for verb, body in _SENTENCE.findall(caption or ""):
        verb = verb.lower()
        found = True
        if verb == "face":
            continue
        if verb == "are":
            fields["feel"].extend(["sleeping"] if "sleep" in body.lower() else [])
            continue
        items = _split_list(body)
        if verb == "have":
            capped = []
            for item in items:
                m = _COUNT.match(item)
                capped.append(f"{min(int(m.group(1)), count_cap)} {m.group(2)}" if m else f"1 {item}")
            items = capped
        fields[verb].extend(items)
    if not found:
        raw = re.sub(r"\d+", "", (caption or "").lower())
        return StateSignature(raw=" ".join(raw.split()))
    return StateSignature(
        objects=tuple(sorted(set(fields["see"]))),
        inventory=tuple(sorted(set(fields["have"]), key=lambda s: s.split(" ", 1)[-1])),
        vitals=tuple(sorted(set(fields["feel"]))),
    )


# --- suggestion statistics -----------------------------------------------------------------
@dataclass
class SuggestionStats:
    """Counters of the suggester (requests, memo hits, fallbacks) and suggestion quality."""

    requests: int = 0        # signature changes that needed suggestions
    memo_hits: int = 0       # answered from the in-process memo (no LM request)
    submitted: int = 0       # requests sent to the LM service
    answered: int = 0        # answers received
    fallbacks: int = 0       # failed answers (server down, budget, exception): counted, retried later
    stale_steps: int = 0     # env-steps that used stale suggestions while waiting for an answer
    pending_steps: int = 0   # env-steps with an LM answer outstanding
    grades: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GRADES, 0))

    def quality(self) -> dict[str, float]:
        """Fractions of suggestion units per grade (they sum to 1 when any unit was graded)."""
        total = sum(self.grades.values())
        return {g: (self.grades[g] / total if total else 0.0) for g in GRADES}


# --- goal suggester ------------------------------------------------------------------------
class GoalSuggester:
    """Per-env goal suggestions from an LM (through an async service), the oracle or all goals.

    ``observe(i, info)`` is called with the info of env ``i``'s current state (after reset or
    after a step); ``poll()`` collects finished LM answers; ``goals(i)`` returns the current
    suggestions.  Nothing here waits on the LM.
    """

    def __init__(
        self,
        mode: str,
        num_envs: int,
        vocabulary: Sequence[str],
        oracle: Any = None,
        service: Any = None,
        template: Any = None,
        top_k: int = 5,
        max_tokens: int = 48,
        temperature: float = 0.0,
        normalize_scores: bool = True,
        grade_map: Callable[[str], str | None] | None = None,
        memo_size: int = 100_000,
        parse_stats: Any = None,
        max_pending: int | None = None,
    ):
        if mode not in SUGGESTERS:
            raise ValueError(f"suggester mode must be one of {SUGGESTERS}, got {mode!r}")
        if mode in ("generate", "score") and (service is None or template is None):
            raise ValueError(f"suggester mode {mode!r} needs an LM service and a prompt template")
        if mode == "oracle" and oracle is None:
            raise ValueError("suggester mode 'oracle' needs the env family's oracle")
        self.mode = mode
        self.num_envs = num_envs
        self.vocabulary = list(vocabulary)
        self.oracle = oracle
        self.service = service
        self.template = template
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.normalize_scores = normalize_scores
        self.grade_map = grade_map or (lambda g: g if g in self.vocabulary else None)
        self.memo_size = memo_size
        self.parse_stats = parse_stats
        # at most this many states wait for an answer; newer states are asked when a slot frees,
        # so a slow LM works on the states the envs are in now, not on a backlog of old ones
        self.max_pending = max_pending or 2 * num_envs
        self.stats = SuggestionStats()
        self._memo: OrderedDict[StateSignature, list[str]] = OrderedDict()
        self._inflight: dict[StateSignature, tuple[Future, dict]] = {}
        self._sig: list[StateSignature | None] = [None] * num_envs
        self._goals: list[list[str]] = [[] for _ in range(num_envs)]
        self._fresh: list[bool] = [True] * num_envs
        self._waiting: list[list[StateSignature]] = [[] for _ in range(num_envs)]
        self._info: list[dict] = [{} for _ in range(num_envs)]

    # -- public --------------------------------------------------------------------------
    def observe(self, i: int, info: dict) -> None:
        """Env ``i`` is now in the state described by ``info``; refresh its suggestions if needed."""
        if self.mode == "oracle":
            self._goals[i] = list(self.oracle.suggest(info))
            self._fresh[i] = True
            return
        if self.mode == "all_goals":
            self._goals[i] = list(self.vocabulary)
            self._fresh[i] = True
            return
        sig = state_signature(str(info.get("caption", "")))
        if sig == self._sig[i]:
            return
        self._sig[i] = sig
        self.stats.requests += 1
        if sig in self._memo:
            self._memo.move_to_end(sig)
            self.stats.memo_hits += 1
            self._goals[i] = list(self._memo[sig])
            self._fresh[i] = True
            self._waiting[i] = []
            return
        self._fresh[i] = False  # keep the last known goals until the answer arrives
        self._waiting[i] = [*self._waiting[i][-255:], sig]
        self._info[i] = info
        self._ask(sig, info)

    def poll(self) -> int:
        """Collect finished LM answers without waiting; return how many arrived."""
        arrived = 0
        for sig, (future, info) in list(self._inflight.items()):
            if not future.done():
                continue
            del self._inflight[sig]
            arrived += 1
            goals = self._answer(future, info)
            if goals is None:
                continue
            self._memo[sig] = goals
            if len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        for i in range(self.num_envs):
            if self._fresh[i]:
                continue
            sig = self._sig[i]
            if sig in self._memo:
                self._goals[i] = list(self._memo[sig])
                self._fresh[i] = True
                self._waiting[i] = []
                continue
            # the newest answered state this env passed through since its last fresh answer
            answered = [k for k, w in enumerate(self._waiting[i]) if w in self._memo]
            if answered:
                k = answered[-1]
                self._goals[i] = list(self._memo[self._waiting[i][k]])
                del self._waiting[i][: k + 1]
            self.stats.pending_steps += 1
            self._ask(sig, self._info[i])  # not asked yet (no free slot) or the request failed
            if self._goals[i]:
                self.stats.stale_steps += 1
        return arrived

    def goals(self, i: int) -> list[str]:
        """Current suggestions of env ``i`` (possibly stale while an answer is outstanding)."""
        return list(self._goals[i])

    def reset_env(self, i: int) -> None:
        """Forget env ``i``'s suggestions (a new episode starts; the memo is kept)."""
        self._sig[i] = None
        self._goals[i] = []
        self._fresh[i] = True
        self._waiting[i] = []

    def pending(self) -> int:
        return len(self._inflight)

    def metrics(self) -> dict[str, float]:
        s = self.stats
        quality = s.quality()
        return {
            "ellm/requests": s.requests,
            "ellm/memo_hits": s.memo_hits,
            "ellm/submitted": s.submitted,
            "ellm/answered": s.answered,
            "ellm/fallbacks": s.fallbacks,
            "ellm/stale_steps": s.stale_steps,
            "ellm/pending_steps": s.pending_steps,
            "ellm/pending": self.pending(),
            "ellm/good": quality["good"],
            "ellm/ill_timed": quality["ill-timed"],
            "ellm/impossible": quality["impossible"],
            "ellm/unparseable": quality["unparseable"],
            "ellm/graded": sum(s.grades.values()),
        }

    def close(self, wait: bool = False) -> None:
        """Drop outstanding requests (optionally wait for them)."""
        if wait:
            for future, _ in self._inflight.values():
                future.exception()
            self.poll()
        self._inflight.clear()

    # -- internals -----------------------------------------------------------------------
    def _ask(self, sig: StateSignature, info: dict) -> None:
        if sig not in self._inflight and len(self._inflight) < self.max_pending:
            self._inflight[sig] = (self._submit(sig), _grading_info(info))
            self.stats.submitted += 1

    def _submit(self, sig: StateSignature) -> Future:
        if self.mode == "generate":
            prompt = self.template.render(caption=sig.caption())
            return self.service.submit_generate(
                prompt, max_tokens=self.max_tokens, temperature=self.temperature, stop=["\n\n"]
            )
        context = self.template.render(caption=sig.caption())
        sep = "" if context.endswith((" ", "\n")) else " "
        return self.service.submit_score(context, [sep + g for g in self.vocabulary], normalize=self.normalize_scores)

    def _answer(self, future: Future, info: dict) -> list[str] | None:
        """Goals from a finished future, or None (counted fallback) when it failed."""
        try:
            result = future.result(timeout=0)
        except Exception as err:  # noqa: BLE001 - an LM failure must never reach the learner
            self.stats.fallbacks += 1
            log.warning("LM suggestion request failed (%s); will ask again", err)
            return None
        if self.mode == "generate":
            if getattr(result, "error", None):
                self.stats.fallbacks += 1
                return None
            goals = self._parse(getattr(result, "text", ""))
        else:
            if result is None or any(s is None for s in result):
                self.stats.fallbacks += 1
                return None
            order = np.argsort(-np.asarray(result, dtype=np.float64), kind="stable")
            goals = [self.vocabulary[j] for j in order[: self.top_k]]
        self.stats.answered += 1
        if info:
            self._grade(goals, info)
        return goals

    def _parse(self, text: str) -> list[str]:
        from llmguide.llm.parsing import ParseStats, parse_bullets

        if self.parse_stats is None:
            self.parse_stats = ParseStats()
        return [g for g in parse_bullets(text, self.parse_stats) if g][: max(self.top_k, 1) * 2]

    def _grade(self, goals: list[str], info: dict) -> None:
        if not goals:
            self.stats.grades["unparseable"] += 1
            return
        if self.oracle is None:
            return
        for goal in goals:
            canonical = self.grade_map(goal)
            grade = "impossible" if canonical is None else self.oracle.grade(canonical, info)
            self.stats.grades[grade if grade in GRADES else "impossible"] += 1


def _grading_info(info: dict) -> dict:
    """A shallow copy of the info needed to grade suggestions later (the env moves on)."""
    return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in info.items()}


# the matcher and the reward live in ellm_reward.py; re-exported here for callers of this module
from llmguide.rewards.ellm_reward import ELLMReward, GoalMatcher, nearest_goal_map  # noqa: E402, F401
