"""Callbacks: the one vocabulary of periodic work that every learner honours (SB3's shape).

A learner's ``learn(total_steps, callback=...)`` calls, on a :class:`Callback` (or a list of them):

* ``init(agent)`` once, then ``on_training_start()``;
* ``on_step(step)`` after every vector-env step with its :class:`~llmguide.rewards.base.StepTransition`
  (return ``False`` to stop training early);
* ``on_rollout_end(metrics)`` after every update (PPO rollout, DQN chunk, GLAM/DRRN rollout) with
  the update's metrics; periodic work (checkpoints, evaluation, LM statistics) happens here;
* ``on_training_end()`` once.

:class:`StopCallback` ends training early when the user asks (Ctrl-C, SIGTERM: :mod:`llmguide.core.stopping`).
``progress_stats()`` feeds the progress bar (e.g. LM calls and hit rate).  The learner owns its
loop and its state; callbacks read ``agent.global_step`` and call ``agent.state_dict()``, never
set learner attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmguide.core.rundir import RunDir
from llmguide.learners.common import crossed


class Callback:
    """Base callback: every hook does nothing."""

    agent: Any = None

    def init(self, agent: Any) -> None:
        self.agent = agent

    def on_training_start(self) -> None:
        return None

    def on_step(self, step: Any) -> bool:
        return True

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        return None

    def on_training_end(self) -> None:
        return None

    def progress_stats(self) -> dict[str, Any]:
        return {}


class FunctionCallback(Callback):
    """``fn(agent, metrics)`` after every update (Stable-Baselines3's function callback); returning ``False``
    stops training at that boundary (as a stop request does: checkpoint, evaluation and report follow)."""

    def __init__(self, fn: Callable[[Any, dict[str, Any]], Any]):
        self.fn = fn

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        if self.fn(self.agent, metrics) is False:
            raise TrainingStopped


class CallbackList(Callback):
    """Several callbacks in order."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)

    def init(self, agent: Any) -> None:
        super().init(agent)
        for c in self.callbacks:
            c.init(agent)

    def on_training_start(self) -> None:
        for c in self.callbacks:
            c.on_training_start()

    def on_step(self, step: Any) -> bool:
        return all([c.on_step(step) for c in self.callbacks])

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        for c in self.callbacks:
            c.on_rollout_end(metrics)

    def on_training_end(self) -> None:
        for c in self.callbacks:
            c.on_training_end()

    def progress_stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c in self.callbacks:
            out.update(c.progress_stats())
        return out


def as_callback(callback: Callback | Sequence[Callback] | None) -> Callback:
    """A single callback from None, one callback or a list."""
    if callback is None:
        return Callback()
    if isinstance(callback, Callback):
        return callback
    return CallbackList(list(callback))


class Periodic(Callback):
    """Runs :meth:`fire` at the first rollout end at or past every multiple of ``every`` env steps."""

    def __init__(self, every: int):
        self.every = int(every)
        self._previous = 0

    def on_training_start(self) -> None:
        self._previous = int(self.agent.global_step)

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        step, previous = int(self.agent.global_step), self._previous
        self._previous = step
        if self.every > 0 and crossed(step, previous, self.every):
            self.fire()

    def fire(self) -> None:
        raise NotImplementedError


class CheckpointCallback(Periodic):
    """``run.save_checkpoint({"agent": agent.state_dict()})`` every ``every`` env steps."""

    def __init__(self, run: RunDir, every: int):
        super().__init__(every)
        self.run = run

    def fire(self) -> None:
        self.run.save_checkpoint({"agent": self.agent.state_dict()}, int(self.agent.global_step))


class EvalCallback(Periodic):
    """``evaluate(agent) -> dict`` every ``every`` env steps, logged under ``eval/``."""

    def __init__(self, run: RunDir, every: int, evaluate: Callable[[Any], dict[str, Any]]):
        super().__init__(every)
        self.run, self.evaluate = run, evaluate

    def fire(self) -> None:
        results = self.evaluate(self.agent)
        self.run.log(int(self.agent.global_step), {f"eval/{k}": v for k, v in results.items()
                                                   if isinstance(v, int | float) and not isinstance(v, bool)})


class MetricsCallback(Periodic):
    """Logs ``source() -> dict`` every ``every`` env steps (LM and module statistics);
    ``progress`` names the keys shown in the progress bar (``{"calls": "lm/calls"}``)."""

    def __init__(self, run: RunDir, every: int, source: Callable[[], dict[str, Any]],
                 progress: dict[str, str] | None = None):
        super().__init__(every)
        self.run, self.source, self.progress = run, source, dict(progress or {})

    def fire(self) -> None:
        self.run.log(int(self.agent.global_step), self.source())

    def progress_stats(self) -> dict[str, Any]:
        if not self.progress:
            return {}
        values = self.source()
        return {short: values[key] for short, key in self.progress.items() if key in values}


class TrainingStopped(Exception):
    """Raised by :class:`StopCallback` at a rollout end once a stop was requested: the learner leaves ``learn``
    at that boundary (its state is the one a checkpoint there would hold)."""


class StopCallback(Callback):
    """Stops training at the next step boundary once ``request.requested`` (a
    :class:`~llmguide.core.stopping.StopRequest`): ``on_step`` returns False, so a learner ends its rollout and
    update; the rollout end raises :class:`TrainingStopped` (also stopping a learner that ignores ``on_step``).
    Put it last, so the other callbacks see that rollout end first."""

    def __init__(self, request: Any):
        self.request = request

    def on_step(self, step: Any) -> bool:
        return not self.request.requested

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        if self.request.requested:
            raise TrainingStopped
