"""The request queue of :class:`~llmguide.llm.service.core.LLMService`: de-duplication, owners, priorities.

- **De-duplication**: a request identical to one still in flight (same ``key``: kind, text and
  parameters) is not queued again; the submitter gets the *same* future.
- **Owners** (issue #19): a request may name an ``owner`` (e.g. ``("ellm", env_index)``).  A newer
  submission by the same owner, or :meth:`RequestQueue.release` of it, takes the owner off its older
  *queued* request; a queued request left with no owner is dropped -- its future is **cancelled**
  (counted ``dropped_stale``).  Requests submitted without an owner are never dropped.
- **Priority**: :meth:`RequestQueue.next_batch` takes the highest-priority queued request first (ties:
  first come) and fills the batch with the highest-priority requests of the same ``group`` (requests
  one backend call can answer together); joining an identical request raises its priority to the
  larger one, and :meth:`RequestQueue.reprioritize` changes it while queued.
- **Bound**: at most ``max_size`` requests wait; :meth:`RequestQueue.put` waits up to a deadline for room.

All state is guarded by one :class:`threading.Condition`; the worker waits on it for work and
submitters for room.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Request:
    """One distinct request and the future every submitter of it shares."""

    kind: str                      # "generate" | "score"
    key: str                       # de-duplication key (canonical JSON of kind + text + params)
    group: str                     # requests with the same group can share one backend call
    payload: dict[str, Any]
    future: Future = field(default_factory=Future)
    submitted: float = field(default_factory=time.monotonic)
    owners: set = field(default_factory=set)   # who still wants the answer (empty: nobody said, never dropped)
    priority: float = 0.0
    seq: int = 0                                # arrival order (ties in priority: first come first served)


class RequestQueue:
    """Bounded, de-duplicating priority queue of :class:`Request` with owners (thread-safe)."""

    def __init__(self, max_size: int):
        if max_size < 1:
            raise ValueError("max_size must be >= 1")
        self.max_size = max_size
        self.cond = threading.Condition()
        self.counts: Counter[str] = Counter()           # deduplicated, dropped_stale
        self.closed = False
        self._queue: deque[Request] = deque()
        self._inflight: dict[str, Request] = {}          # key -> request not yet resolved (queued or running)
        self._by_future: dict[Future, Request] = {}      # queued requests by their future (reprioritize)
        self._owned: dict[Any, Request] = {}             # owner -> its newest queued request
        self._seq = 0

    @property
    def depth(self) -> int:
        """Requests waiting for the worker."""
        return len(self._queue)

    @property
    def inflight(self) -> int:
        """Distinct requests queued or running, not yet resolved."""
        return len(self._inflight)

    # -- submitting -----------------------------------------------------------------------------
    def put(self, req: Request, owner: Any, deadline: float,
            refuse: Callable[[], str | None]) -> tuple[Future | None, str | None]:
        """Queue ``req`` or join the identical request in flight: ``(future, None)``; or ``(None, reason)``
        when ``refuse()`` gives a reason (checked under the lock) or no room opened before ``deadline``."""
        with self.cond:
            while True:
                if (reason := "service closed" if self.closed else refuse()) is not None:
                    return None, reason
                same = self._inflight.get(req.key)
                if same is not None:
                    self.counts["deduplicated"] += 1
                    same.priority = max(same.priority, req.priority)
                    if owner is not None and self._by_future.get(same.future) is same:
                        self._drop(self._take_owner(owner, keep=same))
                        same.owners.add(owner)
                        self._owned[owner] = same
                    return same.future, None
                if owner is not None:   # the owner's older queued request is stale now
                    self._drop(self._take_owner(owner))
                if len(self._queue) < self.max_size:
                    self._seq += 1
                    req.seq = self._seq
                    if owner is not None:
                        req.owners.add(owner)
                        self._owned[owner] = req
                    self._inflight[req.key] = req
                    self._by_future[req.future] = req
                    self._queue.append(req)
                    self.cond.notify_all()
                    return req.future, None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, f"queue full ({self.max_size} waiting)"
                self.cond.wait(remaining)

    # -- owners and priority ---------------------------------------------------------------------
    def _take_owner(self, owner: Any, keep: Request | None = None) -> list[Request]:
        """Take ``owner`` off its queued request (unless it is ``keep``); the requests left ownerless."""
        old = self._owned.pop(owner, None)
        if old is None or old is keep:
            return []
        old.owners.discard(owner)
        if old.owners or old.future.done() or self._by_future.get(old.future) is not old:
            return []
        return [old]

    def _drop(self, reqs: list[Request]) -> None:
        """Remove queued, ownerless requests and cancel their futures (lock held)."""
        for req in reqs:
            try:
                self._queue.remove(req)
            except ValueError:   # already taken by the worker: it will be answered
                continue
            self._by_future.pop(req.future, None)
            if self._inflight.get(req.key) is req:
                del self._inflight[req.key]
            self.counts["dropped_stale"] += 1
            req.future.cancel()
        if reqs:
            self.cond.notify_all()

    def release(self, owner: Any) -> None:
        """``owner`` no longer needs its queued request; drop the request if nobody else wants it."""
        with self.cond:
            self._drop(self._take_owner(owner))

    def reprioritize(self, future: Future, priority: float) -> bool:
        """Set the priority of the queued request behind ``future``; False when it is not queued any more."""
        with self.cond:
            req = self._by_future.get(future)
            if req is None:
                return False
            req.priority = float(priority)
            return True

    # -- the worker's side ------------------------------------------------------------------------
    def next_batch(self, max_batch: int, wait: float = 0.5) -> list[Request]:
        """The best queued request and up to ``max_batch - 1`` of its group; waits up to ``wait`` seconds
        for one (``[]`` when none came or the queue is closed and empty)."""
        with self.cond:
            if not self._queue and not self.closed:
                self.cond.wait(wait)
            if not self._queue:
                return []
            order = sorted(self._queue, key=lambda r: (-r.priority, r.seq))
            first = order[0]
            batch = [first] + [r for r in order[1:] if r.group == first.group][: max_batch - 1]
            taken = {id(r) for r in batch}
            self._queue = deque(r for r in self._queue if id(r) not in taken)
            for req in batch:
                self._by_future.pop(req.future, None)
                for owner in req.owners:
                    if self._owned.get(owner) is req:
                        del self._owned[owner]
            self.cond.notify_all()  # room in the queue for blocked submitters
            return batch

    def finish(self, reqs: list[Request]) -> None:
        """The requests are resolved: an identical submission from now on is a new request."""
        with self.cond:
            for req in reqs:
                if self._inflight.get(req.key) is req:
                    del self._inflight[req.key]

    def close(self) -> list[Request]:
        """Refuse new requests; empty the queue and return what was waiting (still unresolved)."""
        with self.cond:
            self.closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._by_future.clear()
            self._owned.clear()
            self.cond.notify_all()
            return pending
