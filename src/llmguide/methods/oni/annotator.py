"""Online, asynchronous LM annotation of the agent's messages (ONI) and of message pairs (ONI-Ranking).

Invariants (the ONI reference re-enqueued the same message every minibatch; here it cannot):

- every item (a message, or an unordered pair of messages) is in exactly one of three states:
  *labelled*, *in flight* (one future of the :class:`~llmguide.llm.service.core.LLMService`) or
  *backlog* (waiting while ``max_in_flight`` requests are out); :meth:`submit` skips items
  already in any of them, so an item is sent to the LM at most once while it is pending or known;
- labels are persisted in the LM's SQLite cache (:class:`~llmguide.llm.cache.store.LLMCache`) under a key
  made of backend, model, prompt-template version, labelling mode and the item, so later runs and
  seeds reuse them without any LM call (looked up synchronously in :meth:`submit`);
- nothing here blocks: :meth:`poll` only collects futures that are ``done()``; a pending item
  reads as ``None`` and the caller uses its configured default;
- a fallback answer (server down, budget exhausted) is counted and the item returns to the
  unlabelled state, so it is requested again the next time it is seen; an unparseable answer is
  counted, logged by :class:`~llmguide.llm.parsing.ParseStats` and stored as ``None`` (never re-sent,
  it would parse the same way again).

Label modes: ``score`` asks for the log-probability of each answer after the prompt (one forward pass, no
parsing; works with the 270M model), ``generate`` for a few tokens, the answer parsed from ``<answer>yes</answer>``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np

from llmguide.llm.parsing import parse_label
from llmguide.llm.service.core import gather
from llmguide.llm.table import is_miss

log = logging.getLogger(__name__)

_DIGITS = re.compile(r"\d+")


def canonicalize_message(message: str) -> str:
    """Optional canonical form for label look-up: digits → ``<N>``, whitespace collapsed."""
    return " ".join(_DIGITS.sub("<N>", message).split())


class Annotator:
    """Base class: de-duplicated, persisted, non-blocking labelling of hashable items."""

    kind = "item"

    def __init__(self, service: Any, *, mode: str = "score", cache: Any = None, max_in_flight: int = 64,
                 backend: str | None = None, model_id: str | None = None, stats: Any = None):
        from llmguide.llm.parsing import ParseStats

        if mode not in ("score", "generate"):
            raise ValueError(f"label mode must be 'score' or 'generate', got {mode!r}")
        self.service = service
        self.mode = mode
        lm = getattr(service, "lm", None)
        self.cache = cache if cache is not None else getattr(lm, "cache", None)
        self.backend = backend or getattr(lm, "backend", "unknown")
        self.model_id = model_id or getattr(lm, "model_id", "unknown")
        self.max_in_flight = int(max_in_flight)
        self.max_tokens = 16   # a generation's token budget (each annotator sets its own)
        self.stats = stats if stats is not None else ParseStats()
        self.labels: dict[Hashable, float | None] = {}
        self.in_flight: dict[Hashable, Future] = {}
        self.backlog: OrderedDict[Hashable, None] = OrderedDict()
        self.counts = {"requests": 0, "duplicate_requests": 0, "skipped_duplicates": 0, "cache_reused": 0,
                       "fallbacks": 0, "unparseable": 0, "labelled": 0, "table_misses": 0}
        self._requested: set[Hashable] = set()
        self._fell_back: set[Hashable] = set()
        self._lock = threading.Lock()

    # --- to implement --------------------------------------------------------------------------
    def version(self) -> str:
        """Prompt-template version (part of the persistent key)."""
        raise NotImplementedError

    def payload(self, item: Hashable) -> dict[str, Any]:
        raise NotImplementedError

    def asked(self, item: Hashable) -> dict[str, Any]:
        """What the LM is asked for ``item``: ``{"prompt"}`` for a generation, ``{"context", "candidates"}``
        for a score; stored beside the label, so ``llmguide cache export`` shows each label's question."""
        raise NotImplementedError

    def request(self, item: Hashable) -> Future:
        """Submit one LM request for ``item`` to the service: a score or a generation of :meth:`asked`."""
        asked = self.asked(item)
        if "candidates" in asked:
            return self.service.submit_score(asked["context"], asked["candidates"], normalize=False)
        return self.service.submit_generate(asked["prompt"], **self.generate_kwargs())

    def generate_kwargs(self) -> dict[str, Any]:
        """Sampling settings of a generation request (greedy)."""
        return {"max_tokens": self.max_tokens, "temperature": 0.0}

    def parse(self, result: Any) -> float | None:
        """Label from a finished request's result; None when unparseable."""
        raise NotImplementedError

    # --- persistence ---------------------------------------------------------------------------
    def _key(self, item: Hashable) -> str:
        return self.cache.key(self.backend, self.model_id, self.version(), f"{self.kind}:{self.mode}",
                              self.payload(item))

    def _persist(self, item: Hashable, label: float | None) -> None:
        if self.cache is None:
            return
        self.cache.put(self._key(item), {"label": label},
                       {"backend": self.backend, "model_id": self.model_id, "template_version": self.version(),
                        "kind": f"{self.kind}:{self.mode}", "request": self.asked(item)})

    def _lookup(self, item: Hashable) -> tuple[bool, float | None]:
        if self.cache is None:
            return False, None
        value = self.cache.get(self._key(item))
        if value is None or "label" not in value:
            return False, None
        return True, value["label"]

    # --- the non-blocking protocol -------------------------------------------------------------
    def submit(self, items: Iterable[Hashable]) -> int:
        """Queue the items that are neither labelled nor pending; returns how many LM requests were sent."""
        sent = 0
        with self._lock:
            for item in items:
                if item in self.labels or item in self.in_flight or item in self.backlog:
                    self.counts["skipped_duplicates"] += 1
                    continue
                found, label = self._lookup(item)
                if found:
                    self.labels[item] = label
                    self.counts["cache_reused"] += 1
                    continue
                self.backlog[item] = None
            sent = self._drain_backlog()
        return sent

    def _drain_backlog(self) -> int:
        sent = 0
        while self.backlog and len(self.in_flight) < self.max_in_flight:
            item, _ = self.backlog.popitem(last=False)  # oldest first
            self.in_flight[item] = self.request(item)
            self.counts["requests"] += 1
            if item in self._requested and item not in self._fell_back:
                self.counts["duplicate_requests"] += 1  # an invariant breach: must stay 0
            self._requested.add(item)
            self._fell_back.discard(item)
            sent += 1
        return sent

    def poll(self) -> list[tuple[Hashable, float | None]]:
        """Collect finished requests (never waits); returns the newly labelled items."""
        new: list[tuple[Hashable, float | None]] = []
        with self._lock:
            for item in [i for i, f in self.in_flight.items() if f.done()]:
                future = self.in_flight.pop(item)
                try:
                    result = future.result()
                except Exception as err:  # the service resolves with fallbacks; be safe anyway
                    log.warning("annotation request for %r failed: %s", item, err)
                    result = None
                if self._is_fallback(result):
                    self.counts["fallbacks"] += 1  # back to unlabelled: asked again when seen again
                    self._fell_back.add(item)
                    continue
                if is_miss(result):   # not in the answer table (llm.table): no label, never asked again
                    self.counts["table_misses"] += 1
                    self.labels[item] = None
                    continue
                try:
                    label = self.parse(result)
                except (TypeError, ValueError, IndexError, AttributeError) as err:  # malformed backend answer
                    log.warning("unusable annotation for %r: %s", item, err)
                    label = None
                if label is None:
                    self.counts["unparseable"] += 1
                self.labels[item] = label
                self.counts["labelled"] += 1
                self._persist(item, label)
                new.append((item, label))
            self._drain_backlog()
        return new

    @staticmethod
    def _is_fallback(result: Any) -> bool:
        if result is None:
            return True
        if getattr(result, "error", None):
            return True
        if isinstance(result, list | tuple) and (not result or any(s is None for s in result)):
            return True
        return False

    def get(self, item: Hashable) -> float | None:
        """The label of ``item``, or None when unknown, pending or unparseable."""
        return self.labels.get(item)

    @property
    def pending(self) -> int:
        return len(self.in_flight) + len(self.backlog)

    def wait(self, timeout: float = 60.0) -> bool:
        """Block until nothing is pending (for scripts and tests; never used by the learner)."""
        import time

        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            for future in list(self.in_flight.values()):
                try:
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - counted by poll()
                    pass
            self.poll()
        self.poll()
        return self.pending == 0

    def metrics(self) -> dict[str, float]:
        known = [v for v in self.labels.values() if v is not None]
        return {**{k: float(v) for k, v in self.counts.items()}, "pending": float(self.pending),
                "in_flight": float(len(self.in_flight)), "known": float(len(known)),
                "positive_fraction": float(sum(v > 0.5 for v in known) / len(known)) if known else 0.0}

    def state_dict(self) -> dict[str, Any]:
        """Labels only: pending items are asked again after a restore (nothing is lost)."""
        return {"labels": dict(self.labels), "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.labels.update(state.get("labels", {}))
        self.counts.update(state.get("counts", {}))


class MessageAnnotator(Annotator):
    """Yes/no helpfulness label of one message (label 1.0 = helpful).

    ``score`` mode: ``log p(" yes") − log p(" no") > score_margin`` after the ``oni_label_short`` prompt
    (the 270M embedded model says "yes" to almost anything on NetHack's messages and "no" to every
    Craftax message at margin 1, so the margin is a calibration knob); with ``yes_rate`` instead, "yes" when
    the margin is at or above the ``1 − yes_rate`` quantile of the last ``calibration_window`` margins
    (this one included): the LM's ranking of the messages at a set rate, to compare with a random labeller
    at the same rate (``llm=random llm.positive_rate``);
    ``generate`` mode: a few tokens after the ``oni_label`` prompt, answer parsed from ``<answer>``.
    With a ``goal`` (the task's, :func:`llmguide.envs.nethack.env.task_goal`) the default templates are the
    ``*_goal`` ones, whose ``Goal:`` line carries it, as the reference prompts its LM with the task's goal;
    the goal is part of the label's cache key.
    """

    kind = "oni_label"

    def __init__(self, service: Any, *, template: str | None = None, mode: str = "score", tag: str = "answer",
                 choices: tuple[str, str] = ("yes", "no"), score_candidates: tuple[str, str] = (" yes", " no"),
                 max_tokens: int = 6, score_margin: float = 1.0, goal: str | None = None,
                 yes_rate: float | None = None, calibration_window: int = 512, **kwargs: Any):
        super().__init__(service, mode=mode, **kwargs)
        # score mode: the short few-shot prompt ending in "Good:"; generate mode: the tagged prompt
        self.goal = goal or None
        self.template = _goal_template(template or ("oni_label_short" if mode == "score" else "oni_label"),
                                       self.goal)
        self.tag, self.choices, self.score_candidates = tag, tuple(choices), tuple(score_candidates)
        self.max_tokens, self.score_margin = int(max_tokens), float(score_margin)
        if yes_rate is not None and not 0.0 < float(yes_rate) < 1.0:
            raise ValueError(f"yes_rate must be in (0, 1), got {yes_rate!r}")
        self.yes_rate = None if yes_rate is None else float(yes_rate)
        self._margins: deque[float] = deque(maxlen=int(calibration_window))

    def version(self) -> str:
        return self.template.version

    def payload(self, item: Hashable) -> dict[str, Any]:
        goal = {"goal": self.goal} if self.goal else {}
        if self.mode == "score":
            rule = {"margin": self.score_margin} if self.yes_rate is None else {"yes_rate": self.yes_rate}
            return {"message": item, "candidates": list(self.score_candidates), **rule, **goal}
        return {"message": item, "choices": list(self.choices), "tag": self.tag, "max_tokens": self.max_tokens,
                **goal}

    def prompt(self, message: str) -> str:
        return self.template.render(message=message, **({"goal": self.goal} if self.goal else {}))

    def asked(self, item: Hashable) -> dict[str, Any]:
        prompt = self.prompt(str(item))
        if self.mode == "score":
            return {"context": prompt, "candidates": list(self.score_candidates)}
        return {"prompt": prompt}

    def generate_kwargs(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "temperature": 0.0, "stop": [f"</{self.tag}>", "\n"]}

    def parse(self, result: Any) -> float | None:
        if self.mode == "score":
            margin = float(result[0]) - float(result[1])
            if self.yes_rate is None:
                return 1.0 if margin > self.score_margin else 0.0
            self._margins.append(margin)   # parse runs under the annotator's lock (poll)
            threshold = float(np.quantile(np.fromiter(self._margins, float), 1.0 - self.yes_rate))
            return 1.0 if margin >= threshold else 0.0
        return parse_label(result.text, self.tag, self.choices, self.stats)


def _goal_template(name: str, goal: str | None) -> Any:
    """The template ``name`` (ONI's own Crafter ones, :mod:`.prompts`, or a shipped one); with a goal and no
    ``${goal}`` field in it, its ``<name>_goal`` variant."""
    from llmguide.llm.prompts import PromptTemplateError
    from llmguide.methods.oni.prompts import template as load_template

    template = load_template(name)
    if goal is None:
        if "goal" in template.fields:
            raise ValueError(f"template {template.version} needs a goal (method.goal, or a task that has one)")
        return template
    if "goal" in template.fields:
        return template
    try:
        return load_template(f"{template.name}_goal")
    except PromptTemplateError:
        raise ValueError(f"template {template.version} has no ${{goal}} field and no '{template.name}_goal' "
                         "variant: the goal would not reach the labeller") from None


class PairAnnotator(Annotator):
    """Preference between two messages with the ``motif_pref`` prompt.

    Items are unordered pairs stored as sorted tuples ``(a, b)`` with ``a < b``; the label is the
    probability that ``a`` is preferred (1.0, 0.0, or 0.5 for a tie); unparseable → None (excluded
    from training, counted — ONI turned it into a tie).
    """

    kind = "motif_pref"

    def __init__(self, service: Any, *, template: str = "motif_pref", mode: str = "score", max_tokens: int = 48,
                 goal: str | None = None, both_orders: bool = False, **kwargs: Any):
        super().__init__(service, mode=mode, **kwargs)
        self.goal = goal or None  # with a goal: the ``motif_pref_goal`` template (its ``Goal:`` line)
        self.template = _goal_template(template, self.goal)
        self.max_tokens = int(max_tokens)
        # ask both ways round, add the log-probs per message: a position bias cancels (Gemma 270M: all "A > B")
        if both_orders and mode != "score":
            raise ValueError("both_orders needs the score label mode")
        self.both_orders = bool(both_orders)

    @staticmethod
    def make_pair(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a <= b else (b, a)

    def version(self) -> str:
        return self.template.version

    def payload(self, item: Hashable) -> dict[str, Any]:
        a, b = item  # type: ignore[misc]
        return {"a": a, "b": b, **({} if self.mode == "score" else {"max_tokens": self.max_tokens}),
                **({"goal": self.goal} if self.goal else {}), **({"orders": 2} if self.both_orders else {})}

    def request(self, item: Hashable) -> Future:
        """One score request, or with ``both_orders`` two (``(a, b)`` and ``(b, a)``) resolved as one future
        whose result is the six scores: the first order's three, then the swapped order's."""
        if not self.both_orders:
            return super().request(item)
        a, b = item  # type: ignore[misc]
        return gather([Annotator.request(self, pair) for pair in ((a, b), (b, a))],
                      lambda rs: None if any(self._is_fallback(r) for r in rs) else [*rs[0], *rs[1]])

    def prompt(self, pair: tuple[str, str]) -> str:
        text = self.template.render(a=pair[0], b=pair[1], **({"goal": self.goal} if self.goal else {}))
        # score mode: the answer is read right after the opening tag, as the template asks for it
        return text.rstrip("\n") + "\n<answer>" if self.mode == "score" else text

    def asked(self, item: Hashable) -> dict[str, Any]:
        prompt = self.prompt(item)  # type: ignore[arg-type]
        if self.mode == "score":
            return {"context": prompt, "candidates": ["A > B", "B > A", "A = B"]}
        return {"prompt": prompt}

    def parse(self, result: Any) -> float | None:
        if self.mode == "score":
            scores = [float(x) for x in result]
            if self.both_orders:   # a first: "A > B" asked in order, "B > A" asked swapped; likewise b; the tie
                scores = [scores[0] + scores[4], scores[1] + scores[3], scores[2] + scores[5]]
            best = max(range(3), key=lambda i: scores[i])
            return (1.0, 0.0, 0.5)[best]
        from llmguide.llm.parsing import parse_preference

        answer = parse_preference(result.text, self.stats)
        return {"A": 1.0, "B": 0.0, "=": 0.5}.get(answer) if answer else None
