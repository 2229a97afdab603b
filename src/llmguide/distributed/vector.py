"""``runners=N``: one run's envs in N Ray env-runner actors, behind one ``gymnasium.vector.VectorEnv``.

:class:`RayVectorEnv` is what :func:`llmguide.envs.make_vector_env` returns for ``runners > 0``.  It
follows :class:`gymnasium.vector.SyncVectorEnv` with SAME_STEP autoreset exactly -- env ``i`` is
``make_env(env_cfg, seed + i)`` wherever it lives, a finished env is reset in the same step and its
last observation/info are in ``info["final_obs"]``/``info["final_info"]`` -- so for the same actions
it returns the same observations, rewards and infos as the local vector env, and PPO, DQN and the
Runner use it unchanged.  Each step sends every actor its slice of the actions at once (the actors
step in parallel) and gathers the results.

Reward modules stay in the learner process: the learner calls their ``watch`` hooks on every step's
:class:`~llmguide.rewards.base.StepTransition` and ``compute``/``update`` on the rollout exactly as in a
local run, so metrics are the same.  The actors only step envs (the expensive part for NetHack or
Crafter); moving ``watch`` into them would split modules' per-episode state across processes.

Faults: an actor that dies is restarted by Ray (``ray.max_restarts``) with fresh envs.  Its envs'
episodes were cut, so the step reports them as *truncated* (reward 0, ``final_obs`` the last observation
the learner saw, so PPO bootstraps from its value) and they start new episodes on new seeds; the run keeps
its step count.  ``runner_restarts`` counts these; past ``max_restarts`` the run stops with a clear error.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from llmguide.core.errors import LLMGuideError

log = logging.getLogger(__name__)

RESTART_SEED_STRIDE = 100_003   # seeds of the envs of a restarted actor: seed + i + stride * restarts


class EnvRunner:
    """A Ray actor holding some envs of a run (``make_env(env_cfg, seed)`` for each of ``seeds``)."""

    def __init__(self, env_cfg: dict, seeds: list[int]):
        from llmguide.envs import make_env

        self.envs = [make_env(env_cfg, s) for s in seeds]

    def spaces(self) -> tuple[Any, Any]:
        return self.envs[0].observation_space, self.envs[0].action_space

    def reset(self, seeds: list[int | None], options: dict | None = None) -> list[tuple[Any, dict]]:
        return [env.reset(seed=s, options=options) for env, s in zip(self.envs, seeds, strict=True)]

    def step(self, actions: list) -> list[tuple]:
        """Per env ``(obs, reward, terminated, truncated, info, final)``; ``final`` is ``(obs, info)`` of a
        finished episode (the env was reset in this step, SAME_STEP autoreset) or None."""
        out = []
        for env, action in zip(self.envs, actions, strict=True):
            obs, reward, terminated, truncated, info = env.step(action)
            final = None
            if terminated or truncated:
                final = (obs, info)
                obs, info = env.reset()
            out.append((obs, float(reward), bool(terminated), bool(truncated), info, final))
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RayVectorEnv(VectorEnv):
    """``num_envs`` envs split over ``runners`` env-runner actors (contiguous slices, in env order)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_cfg: Any, num_envs: int, seed: int, runners: int, ray_cfg: Any = None):
        from llmguide.core.config import cfg_get
        from llmguide.distributed import connect

        if not 1 <= runners <= num_envs:
            raise ValueError(f"runners must be in [1, num_envs={num_envs}], got {runners}")
        ray = connect(ray_cfg)
        from llmguide.core.config import plain_dict

        self._ray = ray
        self.num_envs = int(num_envs)
        self._seed = int(seed)
        self.max_restarts = int(cfg_get(ray_cfg, "max_restarts", 3))
        self.timeout = float(cfg_get(ray_cfg, "step_timeout", 600.0))
        bounds = np.linspace(0, num_envs, runners + 1).round().astype(int)
        self.slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        runner_cpus = float(cfg_get(ray_cfg, "runner_cpus", 1.0))
        total = ray.cluster_resources().get("CPU", 0.0)
        if runners * runner_cpus > total:   # the actors could never all be scheduled: say so now, not after a timeout
            raise LLMGuideError(f"runners={runners} x ray.runner_cpus={runner_cpus:g} CPUs exceed the Ray cluster's "
                                f"{total:g} CPUs; lower ray.runner_cpus (e.g. 0.5) or runners, or add nodes")
        actor = ray.remote(EnvRunner).options(num_cpus=runner_cpus,
                                              max_restarts=self.max_restarts, max_task_retries=0)
        cfg = plain_dict(env_cfg)
        self.actors = [actor.remote(cfg, [seed + i for i in range(a, b)]) for a, b in self.slices]
        self.single_observation_space, self.single_action_space = self._get(self.actors[0].spaces.remote())
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._env_obs: list[Any] = [None] * self.num_envs
        self.runner_restarts = 0
        self._restarts = [0] * len(self.actors)
        self._errors = self._actor_errors()

    def _actor_errors(self) -> tuple[type[BaseException], ...]:
        from ray.exceptions import ActorUnavailableError, RayActorError

        return RayActorError, ActorUnavailableError

    def _get(self, ref: Any) -> Any:
        return self._ray.get(ref, timeout=self.timeout)

    def _batch(self) -> Any:
        return concatenate(self.single_observation_space, self._env_obs,
                           create_empty_array(self.single_observation_space, self.num_envs, fn=np.zeros))

    # -- the VectorEnv API ------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        refs = [a.reset.remote(seeds[lo:hi], options) for a, (lo, hi) in zip(self.actors, self.slices, strict=True)]
        infos: dict[str, Any] = {}
        for k, ref in enumerate(refs):
            try:
                results = self._get(ref)
            except self._errors as err:
                results = self._restarted(k, err)
            lo = self.slices[k][0]
            for j, (obs, info) in enumerate(results):
                self._env_obs[lo + j] = obs
                infos = self._add_info(infos, info, lo + j)
        return self._batch(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(iterate(self.action_space, actions))
        refs = [a.step.remote(actions[lo:hi]) for a, (lo, hi) in zip(self.actors, self.slices, strict=True)]
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        truncated = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for k, ref in enumerate(refs):
            lo = self.slices[k][0]
            try:
                results = self._get(ref)
            except self._errors as err:  # the actor died: its episodes were cut (truncated), new ones start
                results = [(obs, 0.0, False, True, info, (self._env_obs[lo + j], {}))
                           for j, (obs, info) in enumerate(self._restarted(k, err))]
            for j, (obs, reward, term, trunc, info, final) in enumerate(results):
                i = lo + j
                rewards[i], terminated[i], truncated[i] = reward, term, trunc
                if final is not None:
                    infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
                infos = self._add_info(infos, info, i)
                self._env_obs[i] = obs
        return self._batch(), rewards, terminated, truncated, infos

    def _restarted(self, k: int, err: BaseException) -> list[tuple[Any, dict]]:
        """Wait for Ray to restart actor ``k`` (fresh envs) and reset its envs on new seeds."""
        self.runner_restarts += 1
        self._restarts[k] += 1
        lo, hi = self.slices[k]
        if 0 <= self.max_restarts < self._restarts[k]:
            raise LLMGuideError(f"env-runner actor {k} died and the restarts are used up "
                                f"(ray.max_restarts={self.max_restarts}): {err}")
        log.warning("env-runner actor %d (envs %d-%d) died (%s); Ray restarts it, its episodes are truncated",
                    k, lo, hi - 1, type(err).__name__)
        seeds = [self._seed + i + RESTART_SEED_STRIDE * self.runner_restarts for i in range(lo, hi)]
        deadline = time.monotonic() + min(self.timeout, 120.0)
        while True:
            try:
                return self._get(self.actors[k].reset.remote(seeds, None))
            except self._errors as again:
                if time.monotonic() > deadline:
                    raise LLMGuideError(f"env-runner actor {k} did not come back after a crash: {again}") from None
                time.sleep(0.5)

    def metrics(self) -> dict[str, float]:
        """Logged with the run's metrics (``env/runner_restarts``)."""
        return {"env/runner_restarts": float(self.runner_restarts)}

    def close_extras(self, **kwargs: Any) -> None:
        for actor in getattr(self, "actors", []):
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception as err:  # closing must not hide the run's own error
                log.debug("killing an env-runner actor failed: %s", err)
        self.actors = []
