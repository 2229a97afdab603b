"""ELLM's goal suggester: for each parallel env, the goals suggested for its current state.

Modes: ``generate`` (few-shot bullet prompt, parsed robustly), ``score`` (closed vocabulary: rank the
env's goal vocabulary by LM log-likelihood given the caption, keep the top-k), ``oracle`` (the env
family's ground-truth oracle) and ``all_goals`` (every vocabulary goal: the novelty baseline).  The
LM is asked only when the state signature (:mod:`llmguide.methods.ellm.signature`) changes, through
the asynchronous :class:`~llmguide.llm.service.core.LLMService`; answers are memoised per signature.  It
never blocks a live LM: until an answer arrives the env keeps its last known suggestions (counted as
``stale``) or none.  Answers replayed from a table (``llm.table``) are waited for as they are asked
(``wait``), so a run reading a table is the same every time.  Each env owns at most one queued request
(the service drops the one for a state the env has left), requests carry the signature's visit count as priority, ``lm/fresh_fraction``
counts the steps whose current signature was answered, and the memo is preloaded from the persistent
cache for the signatures earlier runs answered with the same prompt (``warm_start``).

Suggestion quality is graded against the oracle when an answer arrives (for the state it was asked
about): each suggested goal counts as good / ill-timed / impossible; a response that does not parse
counts as one unparseable unit.  Free-form goals are graded through the nearest vocabulary goal when
its cosine reaches the match threshold, otherwise they are impossible.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmguide.llm.backends.oracle import MISS_SCORE
from llmguide.llm.table import is_miss, is_nearest
from llmguide.methods.ellm.signature import StateSignature, goal_request, state_signature
from llmguide.methods.ellm.warm_start import cached_answers, record_seen

log = logging.getLogger(__name__)

SUGGESTERS = ("generate", "score", "oracle", "all_goals")
GRADES = ("good", "ill-timed", "impossible", "unparseable")


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
    steps: int = 0           # env-steps accounted (account_step)
    fresh_steps: int = 0     # of which the env's current signature had an answer
    dropped: int = 0         # requests the service dropped as stale (every env that asked moved on)
    warm: int = 0            # signatures preloaded into the memo from the persistent cache
    table_misses: int = 0    # signatures an answer table (llm.table) does not hold: no goals, not fresh
    table_nearest: int = 0   # ... answered by the table's nearest state instead (llm.table_fallback=nearest)
    exact_steps: int = 0     # fresh steps whose own signature the table holds (not a nearest state's answer)
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
        warm_start: bool = True,
        seed: int = 0,
        wait: bool = False,
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
        self.seed = seed   # ties of a score row are broken at random, seeded by the run seed and the state
        # wait for each answer as it is asked (an answer table: a lookup, not an LM): a run is then the same
        # every time, whatever the threads' timing; otherwise an env keeps its last goals until the answer comes
        self.wait = wait
        self.stats = SuggestionStats()
        self._missed: set[StateSignature] = set()   # signatures an answer table does not hold (no goals)
        self._near: set[StateSignature] = set()     # ... answered by its nearest state (llm.table_fallback=nearest)
        self._memo: OrderedDict[StateSignature, list[str]] = OrderedDict()
        self._inflight: dict[StateSignature, tuple[Future, dict]] = {}
        self._sig: list[StateSignature | None] = [None] * num_envs
        self._goals: list[list[str]] = [[] for _ in range(num_envs)]
        self._fresh: list[bool] = [True] * num_envs
        self._waiting: list[list[StateSignature]] = [[] for _ in range(num_envs)]
        self._info: list[dict] = [{} for _ in range(num_envs)]
        self._visits: dict[StateSignature, int] = {}   # env-steps spent in a not yet answered signature
        self._seen_buffer: list[str] = []
        if warm_start and mode in ("generate", "score"):
            self.warm_start()

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
            self._use_answer(i, sig)
            self._release(i)
            return
        self._fresh[i] = False  # keep the last known goals until the answer arrives
        self._waiting[i] = [*self._waiting[i][-255:], sig]
        self._info[i] = _grading_info(info)   # a copy: ``info`` may be a view of this step's infos
        self._visits[sig] = self._visits.get(sig, 0) + 1
        self._ask(sig, self._info[i], i)
        if self.wait and sig in self._inflight:   # an answer table answers at once: use its answer now
            wait([self._inflight[sig][0]])
            self._collect(sig)
            if sig in self._memo:
                self._use_answer(i, sig)

    def poll(self) -> int:
        """Collect finished LM answers without waiting; return how many arrived."""
        arrived = 0
        for sig, (future, _) in list(self._inflight.items()):
            if future.done():
                arrived += self._collect(sig)
        if len(self._seen_buffer) >= 32:
            self._flush_seen()
        for i in range(self.num_envs):
            if self._fresh[i]:
                continue
            sig = self._sig[i]
            if sig in self._memo:
                self._use_answer(i, sig)
                continue
            # the newest answered state this env passed through since its last fresh answer
            answered = [k for k, w in enumerate(self._waiting[i]) if w in self._memo]
            if answered:
                k = answered[-1]
                self._goals[i] = list(self._memo[self._waiting[i][k]])
                del self._waiting[i][: k + 1]
            self.stats.pending_steps += 1
            visits = self._visits[sig] = self._visits.get(sig, 0) + 1
            if sig in self._inflight:   # most-visited first: the priority follows the visit count
                self.service.reprioritize(self._inflight[sig][0], visits)
            else:
                self._ask(sig, self._info[i], i)  # not asked yet (no free slot), dropped, or the request failed
            if self._goals[i]:
                self.stats.stale_steps += 1
        return arrived

    def _use_answer(self, i: int, sig: StateSignature) -> None:
        """Env ``i`` now has the memoised answer to its state ``sig``: its goals, fresh, nothing waited for."""
        self._goals[i] = list(self._memo[sig])
        self._fresh[i] = True
        self._waiting[i] = []

    def _collect(self, sig: StateSignature) -> int:
        """Take the finished request for ``sig`` out of flight and memoise its goals; 1 when it was answered."""
        future, info = self._inflight.pop(sig)
        if future.cancelled():   # dropped by the service: no env is in that state any more
            self.stats.dropped += 1
            return 0
        goals = self._answer(future, info, sig)
        if goals is not None:
            self._memo[sig] = goals
            self._visits.pop(sig, None)
            self._seen_buffer.append(sig.caption())
            if len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        return 1

    def account_step(self) -> int:
        """Count one step of every env: fresh when its current signature has an answer; returns the fresh count.

        Called once per vector step by the wrapper (after :meth:`poll`); reported to the LM service
        (``lm/fresh_fraction``) and as ``ellm/fresh_fraction``.  A signature an answer table does not hold has
        no answer, so its steps are not fresh (with a table, ``lm/table_coverage``)."""
        fresh_sigs = [sig for f, sig in zip(self._fresh, self._sig, strict=True) if f and sig not in self._missed]
        fresh = len(fresh_sigs)
        self.stats.steps += self.num_envs
        self.stats.fresh_steps += fresh
        self.stats.exact_steps += sum(sig not in self._near for sig in fresh_sigs)
        if self.service is not None:
            self.service.record_fresh(fresh, self.num_envs)
        return fresh

    def goals(self, i: int) -> list[str]:
        """Current suggestions of env ``i`` (possibly stale while an answer is outstanding)."""
        return list(self._goals[i])

    def reset_env(self, i: int) -> None:
        """Forget env ``i``'s suggestions (a new episode starts; the memo is kept)."""
        self._sig[i] = None
        self._goals[i] = []
        self._fresh[i] = True
        self._waiting[i] = []
        self._release(i)

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
            "ellm/fresh_fraction": s.fresh_steps / s.steps if s.steps else 0.0,
            "ellm/dropped_stale": s.dropped,
            "ellm/warm_start": s.warm,
            "ellm/table_misses": s.table_misses,
            "ellm/table_nearest": s.table_nearest,
            # the share of steps whose own state the table answered (lm/table_coverage also counts nearest answers)
            "ellm/table_exact_fraction": s.exact_steps / s.steps if s.steps else 0.0,
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
                if not future.cancelled():
                    future.exception()
            self.poll()
        self._inflight.clear()
        self._flush_seen()

    # -- internals -----------------------------------------------------------------------
    def _owner(self, i: int) -> tuple[str, int, int]:
        return ("ellm", id(self), i)

    def _release(self, i: int) -> None:
        """Env ``i`` no longer needs its queued request (the service drops it if no other env does)."""
        if self.service is not None:
            self.service.release(self._owner(i))

    def _ask(self, sig: StateSignature, info: dict, i: int) -> None:
        if sig in self._inflight:   # another env asked already: join it, so it is not dropped while wanted
            self._submit(sig, i)
        elif len(self._inflight) < self.max_pending:
            self._inflight[sig] = (self._submit(sig, i), info)   # observe() stored a copy
            self.stats.submitted += 1

    def _request(self, sig: StateSignature) -> tuple[str, dict[str, Any]]:
        """(kind, payload) of the LM request for ``sig``: exactly what the service and the cache see."""
        return goal_request(self.mode, self.template, sig.caption(), self.vocabulary, max_tokens=self.max_tokens,
                            temperature=self.temperature, normalize=self.normalize_scores)

    def _submit(self, sig: StateSignature, i: int | None = None) -> Future:
        kind, req = self._request(sig)
        extra: dict[str, Any] = {}
        if i is not None:
            extra = {"owner": self._owner(i), "priority": float(self._visits.get(sig, 1))}
        if kind == "generate":
            return self.service.submit_generate(req.pop("prompt"), **req, **extra)
        return self.service.submit_score(req["context"], req["candidates"], normalize=req["normalize"], **extra)

    # -- warm start (the ledger of answered signatures in the persistent cache) ------------
    def _namespace(self) -> str:
        import hashlib

        vocab = hashlib.sha256("\n".join(self.vocabulary).encode()).hexdigest()[:16]
        version = getattr(self.template, "version", "?")
        return f"ellm/{self.mode}/{version}/{vocab}/top{self.top_k}"

    def _flush_seen(self) -> None:
        items, self._seen_buffer = self._seen_buffer, []
        record_seen(self.service, self._namespace(), items)

    def warm_start(self) -> int:
        """Preload the memo with cached answers for the signatures earlier runs answered (same prompt, same
        candidates, same model: the cache key says so).  Returns how many; no LM call, no grading."""
        answers = cached_answers(self.service, self._namespace(), self.memo_size, self._request)
        n = 0
        for sig, (kind, value) in answers.items():
            if sig in self._memo:
                continue
            goals = self._goals_from(value.get("text", "") if kind == "generate" else value.get("scores"), sig.caption())
            if goals is not None:
                self._memo[sig] = goals
                n += 1
        self.stats.warm += n
        if n:
            log.info("ELLM warm start: %d signatures preloaded from the LM cache", n)
        return n

    def _goals_from(self, result: Any, key: str = "") -> list[str] | None:
        """Goals from a generated text (generate) or a score row (score); None when unusable.  A score row
        ranks the vocabulary; the top ``top_k`` are kept, except candidates scored ``MISS_SCORE`` (the oracle
        and the counterfactual LMs' "not suggested"; a real LM's log-probabilities are never that low)."""
        if self.mode == "generate":
            return self._parse(str(result))
        if result is None or len(result) != len(self.vocabulary) or any(s is None for s in result):
            return None
        scores = np.asarray(result, dtype=np.float64)
        order = top_order(scores, self.seed, key)
        return [self.vocabulary[j] for j in order[: self.top_k] if scores[j] > MISS_SCORE / 2]

    def _answer(self, future: Future, info: dict, sig: StateSignature | None = None) -> list[str] | None:
        """Goals from a finished future, or None (counted fallback) when it failed."""
        try:
            result = future.result(timeout=0)
        except Exception as err:  # noqa: BLE001 - an LM failure must never reach the learner
            self.stats.fallbacks += 1
            log.warning("LM suggestion request failed (%s); will ask again", err)
            return None
        if is_miss(result):   # not in the answer table: no goals for this state, and its steps are not fresh
            self.stats.table_misses += 1
            if sig is not None:
                self._missed.add(sig)
            return []
        if is_nearest(result):   # answered by the table's nearest state: fresh, but not the state's own answer
            self.stats.table_nearest += 1
            if sig is not None:
                self._near.add(sig)
        if self.mode == "generate":
            if getattr(result, "error", None):
                self.stats.fallbacks += 1
                return None
            goals = self._parse(getattr(result, "text", ""))
        else:
            goals = self._goals_from(result, sig.caption() if sig is not None else "")
            if goals is None:
                self.stats.fallbacks += 1
                return None
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


def top_order(scores: np.ndarray, seed: int, key: str) -> np.ndarray:
    """Indices of ``scores`` best first, equal scores in a random order seeded by ``seed`` and ``key`` (the
    state): an oracle that marks six goals feasible keeps a random five, not the first five of the list."""
    import zlib

    tiebreak = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(key.encode())]).random(len(scores))
    return np.lexsort((tiebreak, -scores))


def _grading_info(info: dict) -> dict:
    """A shallow copy of the info needed to grade suggestions later (the env moves on)."""
    return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in info.items()}
