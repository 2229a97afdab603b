"""The learner base: what every training loop shares (Stable-Baselines3's ``BaseAlgorithm``, small).

:class:`Learner` owns the start-up (the callbacks told, the envs reset once, the episode tracker and the
progress bar), the loop's skeleton, the logging (episodes and metrics into the run directory) and the
checkpoint (optimiser, step counters, RNG states, reward modules).  A learner keeps only what differs:

* ``_iteration(total_steps)``: one pass of its loop (PPO: a rollout and its update; DQN: a chunk of steps
  and its gradient steps; DRRN: one vector step and maybe a TD update);
* ``_on_reset(obs, infos)``: the rollout state it builds on freshly reset envs;
* ``_checkpoint_state()`` / ``_load_checkpoint_state(state)``: its networks (and replay) in the checkpoint;
* optionally ``_on_learn_start()`` / ``_on_learn_end()``: work around the loop (GLAM's device check, DRRN's
  last log window).

``learn(total_steps, callback=...)`` trains until ``global_step >= total_steps`` (a total, so a resumed run
continues).  The loop::

    callbacks.init(agent); callbacks.on_training_start()
    reset the envs if this learner has not yet (or was loaded from a checkpoint)
    while global_step < total_steps and no callback asked to stop:
        _iteration(total_steps)      # collect, train, _end_iteration(metrics, ...) -> on_rollout_end
    callbacks.on_training_end()

The helpers a loop calls: :meth:`_record_episodes` (finished episodes logged), :meth:`_on_step` (the callbacks'
``on_step``; False once one asked to stop), :meth:`_end_iteration` (metrics logged, the bar advanced, the
callbacks' ``on_rollout_end``) and :meth:`_sps`; and the helpers of an update: :meth:`_mix_rewards` (the extrinsic
and the reward modules' rewards, the modules trained), :meth:`_apply_gradients` (the clipped optimiser step that
skips a non-finite gradient) with :meth:`_skipped_metrics`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from llmguide.core.progress import Progress
from llmguide.core.rundir import RunDir
from llmguide.learners.callbacks import Callback, as_callback
from llmguide.learners.common import (
    EpisodeTracker,
    load_modules_state,
    mix_rewards,
    modules_state,
    rng_state,
    set_rng_state,
)
from llmguide.rewards.base import RewardModule, StepTransition, TransitionBatch

log = logging.getLogger(__name__)


def use_torch_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)`` unless it is 0 (torch's default): small nets on a shared CPU run fastest
    on one thread."""
    if threads > 0:
        torch.set_num_threads(threads)


class Learner:
    """A training loop on a Gymnasium vector env: start-up, loop skeleton, logging and checkpoints.

    Subclasses set ``algo`` (the checkpoint's tag), optionally ``label`` (the progress bar's; ``algo`` by
    default), build their networks and ``self.optimizer`` after ``super().__init__``, and implement the hooks
    named in the module docstring."""

    algo = ""
    label = ""

    def __init__(self, envs: Any, run: RunDir | None = None, seed: int = 0,
                 reward_modules: Sequence[tuple[float, RewardModule]] = (), extrinsic_coef: float = 1.0):
        self.envs = envs
        self.num_envs = envs.num_envs
        self.run = run
        self.seed = int(seed)
        self.reward_modules = list(reward_modules)
        self.extrinsic_coef = float(extrinsic_coef)
        self.rng = np.random.default_rng(self.seed)   # the learner's own draws (minibatches, replay, exploration)
        self.optimizer: Any = None
        self.global_step = 0                           # env steps over all envs
        self.updates = 0
        self.counters: dict[str, int] = {}
        self.episodes: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.last_metrics: dict[str, float] = {}
        self.envs_ready = False                        # False: the next learn() resets the envs first
        self._callback: Callback = Callback()
        self._tracker = EpisodeTracker(self.num_envs)
        self._bar: Any = None
        self._start_time, self._start_step = 0.0, 0
        self._stop = False
        self._steps_tried = self._steps_skipped = 0   # optimiser steps since _skipped_metrics: tried, skipped

    # --- the loop -------------------------------------------------------------------------
    def learn(self, total_steps: int, callback: Callback | Sequence[Callback] | None = None,
              progress: bool = True) -> Learner:
        """Train until ``global_step >= total_steps`` (a total, so a resumed run continues); callbacks as in
        :mod:`llmguide.learners.callbacks`."""
        self._callback = as_callback(callback)
        self._callback.init(self)
        self._callback.on_training_start()
        if not self.envs_ready:
            self.reset_envs()
        self._on_learn_start()
        self._tracker = EpisodeTracker(self.num_envs)
        self._bar = Progress(total=total_steps, initial=self.global_step, disable=not progress,
                             desc=self.label or self.algo)
        self._start_time, self._start_step = time.perf_counter(), self.global_step
        self._stop = False
        while self.global_step < total_steps and not self._stop:
            self._iteration(total_steps)
        self._on_learn_end()
        self._bar.close()
        self._callback.on_training_end()
        return self

    def reset_envs(self) -> None:
        """Reset the envs (seeded ``seed + global_step``: a resumed run starts from new layouts) and the
        rollout state kept on them (:meth:`_on_reset`)."""
        obs, infos = self.envs.reset(seed=self.seed + self.global_step)
        self._on_reset(obs, infos)
        self.envs_ready = True

    def _iteration(self, total_steps: int) -> None:
        """One pass of the loop: collect, train, and :meth:`_end_iteration` (or the callbacks told otherwise)."""
        raise NotImplementedError

    def _on_reset(self, obs: Any, infos: dict) -> None:
        """The rollout state built on freshly reset envs (``obs``, ``infos``: what ``envs.reset`` returned)."""
        raise NotImplementedError

    def _on_learn_start(self) -> None:
        """Before the loop, after the envs are ready."""

    def _on_learn_end(self) -> None:
        """After the loop, before the callbacks' ``on_training_end``."""

    # --- helpers for the loop -------------------------------------------------------------
    def _log(self, metrics: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log(self.global_step, metrics)

    def _record_episodes(self, rewards: Any, dones: np.ndarray, env_infos: Sequence[dict]) -> None:
        """One env step's rewards into the episode tracker; each finished episode kept, shown and logged."""
        for record in self._tracker.step(np.asarray(rewards, dtype=np.float64), dones, env_infos):
            self.episodes.append({"step": self.global_step, **record})
            self._bar.episode(record["charts/episodic_return"], record["charts/episodic_length"])
            self._log(record)

    def _on_step(self, step: StepTransition) -> bool:
        """The callbacks' ``on_step``; False once one of them asked to stop (the loop ends after this iteration)."""
        if not self._callback.on_step(step):
            self._stop = True
        return not self._stop

    def _sps(self) -> float:
        """Env steps per second since this ``learn`` call started."""
        return (self.global_step - self._start_step) / max(time.perf_counter() - self._start_time, 1e-9)

    def _advance_bar(self, env_steps: int) -> None:
        self._bar.update(env_steps, lm_stats=self._callback.progress_stats)

    def _end_iteration(self, metrics: dict[str, Any], env_steps: int, log: bool = True) -> None:
        """After an update: ``metrics`` logged (and kept as ``last_metrics``) when ``log``, the progress bar
        advanced by ``env_steps``, the callbacks' ``on_rollout_end`` (checkpoints, evaluation, stop requests)."""
        if log:
            self.last_metrics = metrics
            self._log(metrics)
        self._advance_bar(env_steps)
        self._callback.on_rollout_end(metrics)

    # --- helpers for an update ----------------------------------------------------------
    def _mix_rewards(self, batch: TransitionBatch) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """``(mixed, intrinsic, metrics)`` of a batch: ``intrinsic`` = the reward modules' weighted sum
        (:func:`~llmguide.learners.common.mix_rewards`), ``mixed`` = ``extrinsic_coef · batch.rewards + intrinsic``;
        then each module trains on ``batch`` (its statistics into ``metrics``)."""
        intrinsic, metrics = mix_rewards(batch, self.reward_modules, self.counters)
        for _, module in self.reward_modules:
            metrics.update({f"reward/{module.name}/{k}": v for k, v in module.update(batch).items()})
        return self.extrinsic_coef * batch.rewards + intrinsic, intrinsic, metrics

    def _apply_gradients(self, max_grad_norm: float) -> bool:
        """The optimiser's step on its parameters' gradients clipped to a global norm of ``max_grad_norm``, unless that
        norm is not finite: then the gradients are dropped and the step is skipped and counted (one bad minibatch must
        not turn every weight into NaN), and False returned.  :meth:`_skipped_metrics` reports the count."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
        self._steps_tried += 1
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad()
            self._steps_skipped += 1
            return False
        self.optimizer.step()
        return True

    def _skipped_metrics(self, detail: str = "") -> dict[str, float]:
        """``losses/skipped_minibatches``: the steps :meth:`_apply_gradients` skipped since the last call (warned,
        ``detail`` appended), then both counts restart."""
        tried, skipped = self._steps_tried, self._steps_skipped
        self._steps_tried = self._steps_skipped = 0
        if skipped:
            log.warning("%s: %d of %d minibatches at step %d had a non-finite gradient and were skipped%s",
                        self.label or self.algo, skipped, tried, self.global_step, detail)
        return {"losses/skipped_minibatches": float(skipped)}

    # --- checkpoints ----------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any]:
        """The learner's own part of the checkpoint: its networks (and replay)."""
        raise NotImplementedError

    def _load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`_checkpoint_state` saved."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Networks (:meth:`_checkpoint_state`), optimiser, step counters, RNG states and the reward modules' states."""
        return {"algo": self.algo, **self._checkpoint_state(), "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step, "updates": self.updates, "counters": dict(self.counters),
                "rng": rng_state(), "agent_rng": self.rng.bit_generator.state,
                "reward_modules": modules_state(self.reward_modules)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore everything :meth:`state_dict` saved; the envs restart on the next ``learn``."""
        if state.get("algo") != self.algo:
            raise ValueError(f"checkpoint is for agent '{state.get('algo')}', not '{self.algo}'")
        self._load_checkpoint_state(state)
        self.optimizer.load_state_dict(state["optimizer"])
        self.global_step = int(state["global_step"])
        self.updates = int(state["updates"])
        self.counters = dict(state.get("counters", {}))
        set_rng_state(state["rng"])
        self.rng.bit_generator.state = state["agent_rng"]
        load_modules_state(self.reward_modules, state.get("reward_modules", []))
        self.envs_ready = False
