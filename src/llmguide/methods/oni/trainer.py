"""Online training of ONI's reward models (:class:`BackgroundTrainer`): a daemon thread fits a model on
a growing labelled dataset and publishes frozen snapshots that reward inference reads without waiting."""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)


class BackgroundTrainer:
    """Trains ``model`` on a growing labelled dataset in a daemon thread and publishes snapshots.

    The learner only ever reads :attr:`snapshot` (a frozen copy swapped under a lock), so reward
    inference never waits for a gradient step.  ``steps_per_round`` gradient steps run each time
    the dataset grows; ``duty`` ≤ 1 throttles the thread to that fraction of one core.
    """

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, list], tuple[torch.Tensor, Any]],
                 *, lr: float = 1e-3, batch_size: int = 256, steps_per_round: int = 32, duty: float = 0.5,
                 background: bool = True, seed: int = 0):
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.batch_size, self.steps_per_round = int(batch_size), int(steps_per_round)
        self.duty = float(duty)
        self.data: list = []
        self.trained_on = 0            # dataset size at the last published snapshot
        self.snapshot: torch.nn.Module | None = None
        self.steps = 0
        self.last_loss = float("nan")
        self.last_acc = float("nan")
        self._rng = random.Random(seed)
        self._lock = threading.Lock()       # dataset
        self._snap_lock = threading.Lock()  # snapshot swap
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="oni-reward-trainer", daemon=True)
            self._thread.start()

    def add(self, examples: Sequence) -> None:
        if not examples:
            return
        with self._lock:
            self.data.extend(examples)
        self._wake.set()

    def train_round(self, steps: int | None = None) -> None:
        """Run gradient steps on the current dataset and publish a snapshot (called by the thread or directly)."""
        with self._lock:
            data = list(self.data)
        if not data:
            return
        self.model.train()
        for _ in range(steps or self.steps_per_round):
            start = time.perf_counter()
            batch = [data[self._rng.randrange(len(data))] for _ in range(min(self.batch_size, len(data)))]
            loss, acc = self.loss_fn(self.model, batch)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
            self.optimizer.step()
            self.steps += 1
            self.last_loss, self.last_acc = float(loss.item()), float(acc)
            if self._thread is not None and self.duty < 1.0:
                time.sleep((time.perf_counter() - start) * (1.0 / self.duty - 1.0))
            if self._stop.is_set():
                break
        snap = copy.deepcopy(self.model).eval()
        with self._snap_lock:
            self.snapshot, self.trained_on = snap, len(data)

    def current(self) -> tuple[torch.nn.Module | None, int]:
        with self._snap_lock:
            return self.snapshot, self.trained_on

    def metrics(self) -> dict[str, float]:
        """``model/trained_on`` (dataset size of the published snapshot), ``model/steps``, ``model/loss``, ``model/acc``."""
        _, trained_on = self.current()
        return {"model/trained_on": float(trained_on), "model/steps": float(self.steps),
                "model/loss": self.last_loss, "model/acc": self.last_acc}

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            if self._stop.is_set():
                break
            if len(self.data) > self.trained_on:
                try:
                    self.train_round()
                except Exception:  # keep the learner alive; the failure is logged with its traceback
                    log.exception("background reward-model training failed")

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def state_dict(self) -> dict[str, Any]:
        snap, trained_on = self.current()
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "snapshot": snap.state_dict() if snap is not None else None, "trained_on": trained_on,
                "data": list(self.data), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        with self._lock:
            self.data = list(state.get("data", []))
        self.steps = int(state.get("steps", 0))
        snap = None
        if state.get("snapshot") is not None:
            snap = copy.deepcopy(self.model).eval()
            snap.load_state_dict(state["snapshot"])
        with self._snap_lock:
            self.snapshot, self.trained_on = snap, int(state.get("trained_on", 0))
