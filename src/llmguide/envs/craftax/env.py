"""Craftax-Classic (JAX) as a batched Gymnasium vector env with Crafter's text contract.

``CraftaxVectorEnv`` steps N worlds in one jitted, vmapped call: Craftax-Classic's own game logic
(``craftax_step``), then the "optimistic reset" of Craftax's baselines (every step generates
``ceil(N / reset_ratio)`` fresh worlds and hands them to the envs that just finished; never
``auto_reset=True``, which generates a world per env per step), then observation, caption keys and
event bits (:mod:`llmguide.envs.craftax.text`). States are cast to fixed dtypes after reset and
step, so the second call does not retrace.

Observations are the same as ``env=crafter`` symbolic ones: ``image`` = one-hot Crafter semantic
planes of the 9x7 view (19, 7, 9) float32 and ``vector`` = inventory/9, facing one-hot, sleeping,
daylight (22,). Infos carry Crafter's keys per env (``caption``, ``events``, ``message`` = the message line,
``mission``, ``achievements`` = counts this episode, ``inventory``, ``visible``, ``facing``, ``sleeping``);
autoreset is SAME_STEP with ``final_obs``/``final_info`` like Gymnasium's vector envs.

Scores on this env are Craftax-Classic scores, not Crafter scores: the rules differ in details
(a furnace costs 1 stone, iron tools also need 1 stone, diamonds always exist, mob caps).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from craftax.craftax_classic.envs.craftax_state import EnvParams, StaticEnvParams
from craftax.craftax_classic.game_logic import craftax_step
from craftax.craftax_classic.world_gen import generate_world
from gymnasium.vector import AutoresetMode

from llmguide.core.config import cfg_get
from llmguide.envs.craftax import text as tx
from llmguide.envs.craftax.actions import action_flags, primitive_actions
from llmguide.envs.crafter import seen_map
from llmguide.envs.crafter.actions import ACTION_STRINGS
from llmguide.envs.crafter.env import CrafterText, lenient_rules
from llmguide.envs.crafter.rules import ACHIEVEMENTS, GOALS, ITEMS, SEMANTIC_NAMES, CrafterOracle, make_task

SCORE_NAME = "Craftax-Classic"


def _persistent_compile_cache() -> None:
    """Reuse compiled programs across processes (a first step compiles in ~7 s instead of ~35 s).

    ``LLMGUIDE_JAX_CACHE`` names the directory (default ``~/.cache/llmguide/jax``; empty: off); a
    cache directory already configured for JAX is left alone.
    """
    path = os.environ.get("LLMGUIDE_JAX_CACHE", str(Path.home() / ".cache" / "llmguide" / "jax"))
    if path and not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


_persistent_compile_cache()
N_ACTIONS = 17
VECTOR_DIM = len(ITEMS) + 4 + 2
TRACES = {"reset": 0, "step": 0}  # incremented only while JAX traces (tests check for retraces)


def _canon(tree: Any) -> Any:
    """Every leaf as a strong-typed int32 / float32 / bool / uint32 array (no weak types)."""
    def cast(x: Any) -> Any:
        x = jnp.asarray(x)
        if x.dtype == jnp.bool_:
            return x.astype(jnp.bool_)
        if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
            return x.astype(jnp.uint32)
        if jnp.issubdtype(x.dtype, jnp.integer):
            return x.astype(jnp.int32)
        return x.astype(jnp.float32)
    return jax.tree_util.tree_map(cast, tree)


def _view(state) -> dict[str, jax.Array]:
    """Observation, caption key and inventory of one env state."""
    ids = tx.local_ids(state)
    image = (ids[None] == jnp.arange(len(SEMANTIC_NAMES))[:, None, None]).astype(jnp.float32)
    inv = tx.inventory_vector(state)
    facing = jax.nn.one_hot(state.player_direction - 1, 4, dtype=jnp.float32)
    extra = jnp.stack([state.is_sleeping.astype(jnp.float32), jnp.clip(state.light_level, 0.0, 1.0)])
    vector = jnp.concatenate([inv.astype(jnp.float32) / 9.0, facing, extra.astype(jnp.float32)])
    return {"image": image, "vector": vector, "key": tx.caption_key(state, ids), "inv": inv,
            "sleeping": state.is_sleeping}


class _Program:
    """The jitted reset and step of N envs for one (N, reset_ratio); task and max_steps are traced."""

    def __init__(self, num_envs: int, reset_ratio: int):
        self.n = num_envs
        self.k = max(1, -(-num_envs // max(1, reset_ratio)))  # fresh worlds per step
        self.params = EnvParams()
        self.static = StaticEnvParams()
        self.reset = jax.jit(self._reset)
        self.step = jax.jit(self._step)

    def _worlds(self, key: jax.Array, n: int):
        keys = jax.random.split(key, n)
        return _canon(jax.vmap(generate_world, (0, None, None))(keys, self.params, self.static))

    def _reset(self, key: jax.Array):
        TRACES["reset"] += 1
        key, sub = jax.random.split(key)
        states = self._worlds(sub, self.n)
        counts = jnp.zeros((self.n, len(ACHIEVEMENTS)), jnp.int32)
        view = jax.vmap(_view)(states)
        carry = {"states": states, "counts": counts, "key": key, "seen": jax.vmap(tx.seen_bits)(view["key"])}
        return carry, view

    def _step(self, carry, actions: jax.Array, task: jax.Array, max_steps: jax.Array):
        TRACES["step"] += 1
        states, counts = carry["states"], carry["counts"]
        key, k_step, k_reset = jax.random.split(carry["key"], 3)
        step = jax.vmap(craftax_step, (0, 0, 0, None, None))
        after, reward = step(jax.random.split(k_step, self.n), states, actions, self.params, self.static)
        after = _canon(after)
        bits = jax.vmap(tx.event_bits)(states, after, actions)
        effects = jax.vmap(tx.action_effects)(states, after, actions)
        dead = jax.vmap(tx.is_dead)(after)
        truncated = (after.timestep >= max_steps) & ~dead
        terminated = dead
        has_task = task >= 0
        success = has_task & ((bits >> jnp.maximum(task, 0)) & 1).astype(jnp.bool_)
        reward = jnp.where(has_task, success.astype(jnp.float32), reward.astype(jnp.float32))
        terminated = terminated | success
        truncated = truncated & ~terminated
        done = terminated | truncated
        ach = ((bits[:, None] >> jnp.arange(len(ACHIEVEMENTS))) & 1).astype(jnp.int32)
        counts = counts + ach
        final = jax.vmap(_view)(after)
        messages = jax.vmap(tx.message_key)(states, after, actions, bits, carry["seen"],
                                            jax.vmap(tx.seen_bits)(final["key"]))
        # optimistic reset: k fresh worlds per step, the j-th finished env takes world j mod k; they are
        # generated only on steps where some env finished (else unused: zeros of the same shapes)
        def generate(k):
            worlds = self._worlds(k, self.k)
            return worlds, jax.vmap(_view)(worlds)

        shapes = jax.eval_shape(generate, k_reset)
        fresh, fresh_view = jax.lax.cond(
            done.any(), generate,
            lambda _: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes), k_reset)
        pick = (jnp.cumsum(done) - 1) % self.k

        def choose(a, b):
            mask = done.reshape((-1,) + (1,) * (a.ndim - 1))
            return jnp.where(mask, b[pick], a)

        new_states = jax.tree_util.tree_map(choose, after, fresh)
        view = jax.tree_util.tree_map(choose, final, fresh_view)
        new_counts = jnp.where(done[:, None], 0, counts)
        out = {"view": view, "final": final, "reward": reward, "terminated": terminated, "truncated": truncated,
               "bits": bits, "counts": counts, "success": success, "effects": effects, "messages": messages}
        seen = jax.vmap(tx.seen_bits)(view["key"])
        return {"states": new_states, "counts": new_counts, "key": key, "seen": seen}, out


_PROGRAMS: dict[tuple[int, int], _Program] = {}


def program(num_envs: int, reset_ratio: int) -> _Program:
    """Shared per shape, so several envs of one size compile once per process."""
    key = (int(num_envs), int(reset_ratio))
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _Program(*key)
    return _PROGRAMS[key]


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


class CraftaxVectorEnv(gym.vector.VectorEnv):
    """N Craftax-Classic worlds behind Gymnasium's VectorEnv API (SAME_STEP autoreset)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 64, max_steps: int | None = None, task: str | None = None,
                 seed: int = 0, reset_ratio: int = 16, actions: str = "primitive"):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if actions not in ("primitive", "text"):
            raise ValueError(f"env.actions must be 'primitive' or 'text', got {actions!r}")
        self.text_actions = actions == "text"
        self.num_envs = int(num_envs)
        self.task_def, self.max_steps = make_task(task, max_steps)  # the same single task as env=crafter
        self.task = self.task_def.achievement if self.task_def else None
        self._task = jnp.int32(self.task_def.index if self.task_def else -1)
        self.mission = self.task_def.goal if self.task_def else ""
        self._prog = program(self.num_envs, reset_ratio)
        self._max_steps = jnp.int32(self.max_steps)
        self._seed = int(seed)
        self.single_observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0.0, 1.0, (len(SEMANTIC_NAMES), tx.VIEW_H, tx.VIEW_W), np.float32),
            "vector": gym.spaces.Box(0.0, 1.0, (VECTOR_DIM,), np.float32),
        })
        self.single_action_space = gym.spaces.Discrete(len(ACTION_STRINGS) if self.text_actions else N_ACTIONS)
        if self.text_actions:
            self.action_strings = list(ACTION_STRINGS)
        self._facing = np.zeros(self.num_envs, np.int64)  # semantic class each env faces now
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.text = tx.TextCache()
        self._carry = None

    # --- gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seed = int(seed)
        self._carry, view = self._prog.reset(jax.random.PRNGKey(self._seed))
        self._seed += 1  # a later reset() without a seed draws other worlds
        view = jax.device_get(view)
        n = self.num_envs
        zeros = np.zeros((n, len(ACHIEVEMENTS)), np.int32)
        self._facing = _facing(view)
        infos = self._infos(view, np.zeros(n, np.int64), zeros, np.zeros(n, bool), np.zeros((n, 4), np.uint32))
        if self.text_actions:
            infos.update(action_text=_objects([""] * n), action_success=np.zeros(n, bool),
                         eval_success=np.zeros(n, bool))
        return self._obs(view), infos

    def step(self, actions):
        if self._carry is None:
            raise RuntimeError("call reset() before step()")
        acts = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        text, runs = acts, None
        if self.text_actions:
            acts, runs = primitive_actions(text, self._facing)
        self._carry, out = self._prog.step(self._carry, jnp.asarray(acts, jnp.int32), self._task, self._max_steps)
        out = jax.device_get(out)
        terminated, truncated = out["terminated"], out["truncated"]
        done = terminated | truncated
        zeros = np.zeros_like(out["counts"])
        counts_now = np.where(done[:, None], zeros, out["counts"])
        infos = self._infos(out["view"], np.where(done, 0, out["bits"]), counts_now, np.zeros_like(done),
                            np.where(done[:, None], np.uint32(0), out["messages"]))
        flags = {}
        if self.text_actions:
            flags = action_flags(text, runs, self._facing, out["final"]["inv"], out["bits"], out["effects"])
            infos.update(flags)
        self._facing = _facing(out["view"])
        if done.any():
            infos["final_info"] = {**self._infos(out["final"], out["bits"], out["counts"], out["success"],
                                                 out["messages"]), **flags}
            infos["_final_info"] = done
            final_obs = np.empty(self.num_envs, dtype=object)
            fo = self._obs(out["final"])
            for i in np.flatnonzero(done):
                final_obs[i] = {k: v[i] for k, v in fo.items()}
            infos["final_obs"], infos["_final_obs"] = final_obs, done
        return (self._obs(out["view"]), out["reward"], terminated, truncated, infos)

    def close(self, **kwargs: Any) -> None:
        self._carry = None

    # --- host side ----------------------------------------------------------------------
    @staticmethod
    def _obs(view: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # one host copy: arrays handed out by JAX are read-only and torch wants writable ones
        return {"image": np.array(view["image"]), "vector": np.array(view["vector"])}

    def _infos(self, view: dict, bits: np.ndarray, counts: np.ndarray, success: np.ndarray,
               messages: np.ndarray) -> dict:
        text = self.text.lookup(view["key"])
        n = self.num_envs
        events = [self.text.event_list(int(b)) for b in bits.tolist()]
        infos: dict[str, Any] = {
            "caption": _objects([t[0] for t in text]),
            "events": _objects(events),
            "message": _objects(self.text.message_list(messages)),
            "mission": _objects([self.mission] * n),
            "achievements": {name: counts[:, j] for j, name in enumerate(ACHIEVEMENTS)},
            "inventory": {name: view["inv"][:, j] for j, name in enumerate(ITEMS)},
            "visible": _objects([list(t[1]) for t in text]),
            "facing": _objects([t[2] for t in text]),
            "sleeping": np.asarray(view["sleeping"], bool),
        }
        if self.task is not None:
            infos["success"] = np.asarray(success, bool)
        return infos


def _facing(view: dict[str, np.ndarray]) -> np.ndarray:
    """The semantic class each env faces, read from its caption key (bits 4-8 of word 2)."""
    return ((np.asarray(view["key"][:, 2], np.int64) >> 4) & 31)


def _single(value: Any, i: int) -> Any:
    if isinstance(value, dict):
        return {k: _single(v, i) for k, v in value.items()}
    item = value[i]
    return item.item() if isinstance(item, np.generic) else item


class CraftaxText(gym.Env):
    """One Craftax-Classic env (a 1-env :class:`CraftaxVectorEnv`) with Crafter's text infos."""

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int | None = None, task: str | None = None, seed: int | None = None,
                 actions: str = "primitive"):
        self._vec = CraftaxVectorEnv(1, max_steps=max_steps, task=task, seed=0 if seed is None else seed,
                                     actions=actions,
                                     reset_ratio=1)
        self.task = self._vec.task
        self.observation_space = self._vec.single_observation_space
        self.action_space = self._vec.single_action_space
        # the action strings of the action space (Crafter's 17 primitive names: same order as Craftax's enum)
        self.action_strings = list(getattr(self._vec, "action_strings", None) or CrafterText.action_strings)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, infos = self._vec.reset(seed=seed)
        return {k: v[0] for k, v in obs.items()}, _single(infos, 0)

    def step(self, action: int):
        obs, reward, terminated, truncated, infos = self._vec.step(np.array([int(action)]))
        if terminated[0] or truncated[0]:
            ob, info = infos["final_obs"][0], _single(infos["final_info"], 0)
        else:
            ob, info = {k: v[0] for k, v in obs.items()}, _single(infos, 0)
        return ob, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info


# --- oracle ----------------------------------------------------------------------------------------
def _craftax_requirements() -> dict[str, tuple[dict[str, int], list[str]]]:
    """Crafter's requirements with Craftax-Classic's differences (read from its game logic)."""
    req = dict(CrafterOracle.requirements)
    req["place furnace"] = ({"stone": 1}, [])
    for tool in ("iron pickaxe", "iron sword"):
        items, near = req[f"make {tool}"]
        req[f"make {tool}"] = ({**items, "stone": 1}, near)
    return req


class CraftaxOracle(CrafterOracle):
    """Crafter's 22 goals and caption grammar with Craftax-Classic's recipe costs."""

    family = "craftax"
    goals = GOALS
    requirements = _craftax_requirements()
    prerequisites = {g: sorted(set(p) | ({"collect stone"} if g.startswith("make iron") else set()))
                     for g, p in CrafterOracle.prerequisites.items()}


def make_oracle(actions: str = "primitive") -> Any:
    """Craftax-Classic's goal oracle; with ``actions="text"`` ELLM's action vocabulary over Crafter's rules."""
    if actions == "text":
        from llmguide.envs.crafter.actions import CrafterActionOracle

        return CrafterActionOracle(CraftaxOracle())   # ELLM's action strings, Craftax-Classic's recipe costs
    return CraftaxOracle()


def make_craftax(env_cfg: Any, seed: int | None = None) -> CraftaxText:
    """One env from an ``env`` config (keys task, max_steps); obs is always symbolic."""
    _check_obs(env_cfg)
    env = CraftaxText(max_steps=_max_steps(env_cfg), task=cfg_get(env_cfg, "task"),
                      actions=str(cfg_get(env_cfg, "actions", "primitive")), seed=seed)
    return seen_map.wrap_env(env, env_cfg)


def make_craftax_vector(env_cfg: Any, num_envs: int, seed: int) -> CraftaxVectorEnv:
    """The batched env (keys task, max_steps, reset_ratio)."""
    _check_obs(env_cfg)
    return CraftaxVectorEnv(int(num_envs), max_steps=_max_steps(env_cfg),
                            actions=str(cfg_get(env_cfg, "actions", "primitive")),
                            task=cfg_get(env_cfg, "task"), seed=int(seed),
                            reset_ratio=int(cfg_get(env_cfg, "reset_ratio", 16)))


def _max_steps(env_cfg: Any) -> int | None:
    value = cfg_get(env_cfg, "max_steps")
    return None if value is None else int(value)


def _check_obs(env_cfg: Any) -> None:
    if cfg_get(env_cfg, "obs", "symbolic") != "symbolic":
        raise ValueError("env.obs: env=craftax has only the symbolic observation (Crafter's semantic view)")
    if lenient_rules(env_cfg):
        raise ValueError("env.lenient_rules: the lenient rules patch Crafter's Python game logic; "
                         "env=craftax has Craftax-Classic's rules only")


__all__ = ["SCORE_NAME", "CraftaxOracle", "CraftaxText", "CraftaxVectorEnv", "make_craftax",
           "make_craftax_vector"]
