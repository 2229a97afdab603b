"""NetHack (NLE: Score, Staircase, Oracle, ...) and MiniHack tasks with message captions.

``caption`` = the game message (optionally followed by blstats changes, e.g. "HP 14->12."),
``events`` come from messages and real status changes (depth, gold, experience level, HP) and
from the map (a staircase down coming into view).  ``task_goal(env_id)`` is the task's goal in the
ONI/Motif reference's words; the oracle's ONI/Motif labels are conditioned on it (:func:`goal_events`).  With ``oracle_facts`` the info also lists
coarse map facts (``visible``: staircase down, closed door, monster, item) for the oracle; they
cost a scan of the glyph map per step, so they are off by default.  Observation: ``image`` = a (2, crop, crop)
egocentric crop of the character map and its colours (float32, scaled to [0, 1]); ``vector`` =
the 27 blstats, scaled and clipped to [-5, 5]; with ``message_obs`` also ``message`` = the 256 raw
message bytes (uint8; the policy's message encoder reads it, as in the ONI/Motif reference).

Reward: ``clip(reward_scale · r_env, −reward_clip, reward_clip)`` (the ONI/Motif rollout workers' extrinsic
transform; ``info["raw_reward"]`` keeps ``r_env``).  ``penalty_step`` overrides the task's reward for a
"frozen" step (game time not advancing; NLE/MiniHack default −0.01); 0 leaves the task's own reward only.  Seeding: ``reset(seed=s)`` seeds the env's
``np_random``; *every* reset then draws NetHack's core and disp seeds from it (no anti-TAS reseeding),
so two envs made with the same seed give identical observations across all later resets and steps.
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.core.config import cfg_get
from llmguide.envs.nethack.oracle import message_events

BL = {"x": 0, "y": 1, "score": 9, "hp": 10, "hpmax": 11, "depth": 12, "gold": 13, "xp": 18,
      "time": 20, "hunger": 21, "dlevel": 24}
_BL_SCALE = np.array([1 / 79, 1 / 21, 1 / 25, 1 / 125, 1 / 25, 1 / 25, 1 / 25, 1 / 25, 1 / 25,
                      1 / 1000, 1 / 20, 1 / 20, 1 / 10, 1 / 100, 1 / 20, 1 / 20, 1 / 10, 1 / 10,
                      1 / 10, 1 / 1000, 1 / 10000, 1 / 5, 1 / 5, 1 / 10, 1 / 10, 1 / 1000, 1],
                     np.float32)
_DEPTH, _GOLD, _XP, _HP = BL["depth"], BL["gold"], BL["xp"], BL["hp"]
_PLANE_SCALE = np.array([1 / 255, 1 / 15], np.float32)[:, None, None]
_DELTA_KEYS = (("HP", "hp"), ("Dlvl", "depth"), ("Gold", "gold"), ("Xp", "xp"))
OBS_KEYS = ("chars", "colors", "glyphs", "blstats", "message")
MESSAGE_BYTES = 256


def _import_backend(name: str) -> None:
    import nle  # noqa: F401  (registers NetHack*-v0)

    if name == "minihack":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pkg_resources deprecation warning inside minihack
            import minihack  # noqa: F401  (registers MiniHack-*-v0)


def task_ids(family: str) -> list[str]:
    """The registered task ids of ``family`` (MiniHack-*, or NLE's NetHack*)."""
    _import_backend(family)
    prefix = "MiniHack-" if family == "minihack" else "NetHack"
    return sorted(k for k in gym.registry if k.startswith(prefix))


def id_problem(env_id: str, family: str) -> str | None:
    """None when ``env_id`` is a registered task of ``family``; else what is wrong, with examples."""
    known = task_ids(family)
    if env_id in known or (env_id.startswith(("MiniHack-", "NetHack")) and env_id in gym.registry):
        return None
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"e.g. {', '.join(known[:6])}"
    return f"unknown {family} id {env_id!r}; {hint} ({len(known)} ids: llmguide list)"


def extended_actions() -> tuple:
    """NLE's 23 task actions plus cast, quaff, pray, pick up and pay: the ONI/Motif reference's 28
    ``*ExtendedActions-v1`` action set (without its eat-prompt rewrite)."""
    from nle import nethack
    from nle.env.tasks import TASK_ACTIONS

    C = nethack.Command
    return (*TASK_ACTIONS, C.CAST, C.QUAFF, C.PRAY, C.PICKUP, C.PAY)


def decode_message(raw: np.ndarray) -> str:
    """The NLE ``message`` bytes as text (latin-1, NULs stripped)."""
    if not raw[0]:  # most steps have no message
        return ""
    return raw.tobytes().split(b"\0", 1)[0].decode("latin-1").strip()


def _seed_core(env: Any, core: int, disp: int) -> None:
    """Seed NetHack's RNGs for the next reset (no anti-TAS reseeding). MiniHack's MiniGrid-based tasks
    (``MiniGridHack``: MultiRoom, LavaCrossing...) also draw their map from an inner Gymnasium MiniGrid
    env, whose old-Gym ``seed()`` call fails on Gymnasium; that env is seeded through ``reset(seed=)``
    instead, and its later seedless resets continue the same RNG."""
    inner = getattr(env, "minigrid_env", None)
    if inner is None:
        env.seed(core, disp, False)
        return
    from minihack.envs.minigrid import MiniGridHack

    inner.reset(seed=core % 2**32)
    super(MiniGridHack, env).seed(core, disp, False)  # MiniHack's own seed, skipping the failing override


class NetHackText(gym.Env):
    """An NLE or MiniHack env with message captions and events; the task is the gym id."""

    metadata = {"render_modes": []}

    def __init__(self, env_id: str, family: str = "nethack", max_steps: int | None = None,
                 blstats_deltas: bool = False, crop: int = 9, oracle_facts: bool = False,
                 message_obs: bool = False, reward_scale: float = 1.0, reward_clip: float | None = None,
                 actions: str = "task", penalty_step: float | None = None):
        problem = id_problem(env_id, family)
        if problem:
            raise ValueError(f"env.id: {problem}")
        if actions not in ("task", "extended"):
            raise ValueError(f"env.action_set must be 'task' or 'extended', got {actions!r}")
        kwargs: dict[str, Any] = {}
        if actions == "extended" and family == "nethack":  # MiniHack tasks keep their own action sets
            kwargs["actions"] = extended_actions()
        if penalty_step is not None:  # NLE/MiniHack's reward for a "frozen" step (default -0.01)
            kwargs["penalty_step"] = float(penalty_step)
        self._env = gym.make(env_id, observation_keys=OBS_KEYS, **kwargs).unwrapped
        self.max_steps = int(max_steps) if max_steps else None  # None: the task's own limit
        self._t = 0
        self.env_id, self.family = env_id, family
        self.blstats_deltas, self.crop, self.oracle_facts = blstats_deltas, crop, oracle_facts
        self.message_obs = bool(message_obs)
        self.reward_scale = float(reward_scale)
        self.reward_clip = float(reward_clip) if reward_clip else None
        actions = getattr(self._env, "actions", None) or range(self._env.action_space.n)
        self.action_strings = [_action_name(a) for a in actions]
        self.action_space = gym.spaces.Discrete(self._env.action_space.n)
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0.0, 1.0, (2, crop, crop), np.float32),
            "vector": gym.spaces.Box(-5.0, 5.0, (27,), np.float32),
            **({"message": gym.spaces.Box(0, 255, (MESSAGE_BYTES,), np.uint8)} if self.message_obs else {}),
        })
        self._prev_bl = np.zeros(27, np.int64)
        self._stairs_seen = False
        self._facts = 0
        self._pad: np.ndarray | None = None
        self._episode_events: dict[str, None] = {}  # distinct events so far, in order

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        core, disp = (int(x) for x in self.np_random.integers(0, 2**62, size=2))
        _seed_core(self._env, core, disp)  # every reset: the episode's seeds come from np_random
        obs, _ = self._env.reset()
        self._prev_bl = obs["blstats"].copy()
        self._stairs_seen = False
        self._episode_events = {}
        self._t = 0
        self._map_events(obs)  # stairs already in view at the start are not an event
        message = decode_message(obs["message"])
        return self._observation(obs), self._info(obs["blstats"].tolist(), message, message, [], False, 0)

    def step(self, action: int):
        obs, raw_reward, terminated, truncated, core_info = self._env.step(int(action))
        reward = float(raw_reward) * self.reward_scale
        if self.reward_clip is not None:
            reward = min(max(reward, -self.reward_clip), self.reward_clip)
        self._t += 1
        if self.max_steps is not None and self._t >= self.max_steps and not terminated:
            truncated = True
        if obs["blstats"][BL["depth"]] == 0:  # the game is over: NLE zeroes the status line
            obs = dict(obs, blstats=self._prev_bl.copy())
        info = self._text(obs, core_info, terminated)
        info["raw_reward"] = float(raw_reward)
        self._prev_bl = obs["blstats"].copy()
        return self._observation(obs), reward, bool(terminated), bool(truncated), info

    def _text(self, obs: dict, core_info: dict, terminated: bool) -> dict[str, Any]:
        """Caption, events (messages, status changes, map) and oracle facts of one step."""
        message = decode_message(obs["message"])
        events = message_events(message)
        bl, prev = obs["blstats"].tolist(), self._prev_bl.tolist()
        status = int(core_info.get("end_status", 0))
        success = bool(terminated and status == 2)  # StepStatus.TASK_SUCCESSFUL
        if bl[_DEPTH] > prev[_DEPTH] or (success and "Staircase" in self.env_id):
            events.append("descend the stairs")
        if bl[_GOLD] > prev[_GOLD] and "collect gold" not in events:
            events.append("collect gold")
        if bl[_XP] > prev[_XP] and "gain a level" not in events:
            events.append("gain a level")
        if bl[_HP] < prev[_HP]:
            events.append("take damage")
        for event in self._map_events(obs):
            if event not in events:
                events.append(event)
        caption = message
        if self.blstats_deltas:
            deltas = [f"{label} {prev[BL[k]]}->{bl[BL[k]]}." for label, k in _DELTA_KEYS
                      if bl[BL[k]] != prev[BL[k]]]
            caption = " ".join([message, *deltas]).strip()
        return self._info(bl, caption, message, events, success, status)

    def _map_events(self, obs: dict) -> list[str]:
        if self.oracle_facts:
            self._facts = _map_facts(obs)
        if not self._stairs_seen and b">" in obs["chars"].tobytes():
            self._stairs_seen = True
            return ["find the staircase"]
        return []

    def _observation(self, obs: dict) -> dict[str, np.ndarray]:
        bl, r, c = obs["blstats"], self.crop // 2, self.crop
        rows, cols = obs["chars"].shape
        if self._pad is None:  # map planes padded by r: blank space (32) and colour 0 outside the map
            self._pad = np.zeros((2, rows + 2 * r, cols + 2 * r), np.uint8)
            self._pad[0] = 32
        self._pad[0, r:r + rows, r:r + cols] = obs["chars"]
        self._pad[1, r:r + rows, r:r + cols] = obs["colors"]
        x, y = int(bl[BL["x"]]), int(bl[BL["y"]])
        image = self._pad[:, y:y + c, x:x + c] * _PLANE_SCALE
        vector = bl.astype(np.float32)
        vector *= _BL_SCALE
        np.minimum(np.maximum(vector, -5.0, out=vector), 5.0, out=vector)  # np.clip is slow here
        if self.message_obs:
            return {"image": image, "vector": vector, "message": obs["message"].copy()}
        return {"image": image, "vector": vector}

    def _info(self, bl: list[int], caption: str, message: str, events: list[str], success: bool,
              status: int) -> dict[str, Any]:
        for event in events:
            self._episode_events.setdefault(event)
        info = {
            "caption": caption,
            "message": message,
            "events": events,
            "mission": "",
            "success": success,
            "episode_events": list(self._episode_events),
            "depth": bl[_DEPTH],
            "hp": bl[_HP],
            "gold": bl[_GOLD],
            "end_status": status,
        }
        if self.oracle_facts:
            info["visible"] = _visible(self._facts)
        return info

    def close(self) -> None:
        self._env.close()


def _action_name(action: Any) -> str:
    name = getattr(action, "name", str(action))
    return name.lower().replace("_", " ")


_STAIRS, _DOOR, _MONSTER, _ITEM = 1, 2, 4, 8
_FACT_NAMES = ((_STAIRS, "staircase down"), (_DOOR, "closed door"), (_MONSTER, "monster"), (_ITEM, "item"))
_FACT_LUT: np.ndarray | None = None


def _fact_lut() -> np.ndarray:
    """glyph id -> fact bits (staircase down, closed door, hostile monster, object)."""
    global _FACT_LUT
    if _FACT_LUT is None:
        from nle import nethack

        lut = np.zeros(nethack.MAX_GLYPH + 1, np.uint8)
        lut[nethack.GLYPH_MON_OFF:nethack.GLYPH_PET_OFF] = _MONSTER
        lut[nethack.GLYPH_OBJ_OFF:nethack.GLYPH_CMAP_OFF] = _ITEM
        lut[nethack.GLYPH_CMAP_OFF + 15] = lut[nethack.GLYPH_CMAP_OFF + 16] = _DOOR  # S_vcdoor, S_hcdoor
        lut[nethack.GLYPH_CMAP_OFF + 24] = _STAIRS  # S_dnstair
        _FACT_LUT = lut
    return _FACT_LUT


def _map_facts(obs: dict) -> int:
    """Bits of what the map shows now; the hero's own glyph is not a monster."""
    facts = _fact_lut()[obs["glyphs"]]
    facts[int(obs["blstats"][1]), int(obs["blstats"][0])] = 0
    return int(np.bitwise_or.reduce(facts, axis=None))


def _visible(facts: int) -> list[str]:
    """Coarse map facts for the oracle: staircase down, closed door, monster, item in view."""
    return [name for bit, name in _FACT_NAMES if facts & bit]


def make_nethack(env_cfg: Any, seed: int | None = None) -> NetHackText:
    """Build :class:`NetHackText` from an ``env`` config (name nethack|minihack, id, max_steps...)."""
    family = str(cfg_get(env_cfg, "name", "nethack"))
    default = "MiniHack-Room-5x5-v0" if family == "minihack" else "NetHackScore-v0"
    env_id = cfg_get(env_cfg, "id")
    if env_id is None or str(env_id).startswith("llmguide/"):
        env_id = default   # the registered wrapper id: the family's default task
    return NetHackText(str(env_id), family=family,
                       max_steps=cfg_get(env_cfg, "max_steps"),
                       blstats_deltas=bool(cfg_get(env_cfg, "blstats_deltas", False)),
                       crop=int(cfg_get(env_cfg, "crop", 9)),
                       oracle_facts=bool(cfg_get(env_cfg, "oracle_facts", False)),
                       message_obs=bool(cfg_get(env_cfg, "message_obs", False)),
                       reward_scale=float(cfg_get(env_cfg, "reward_scale", 1.0)),
                       reward_clip=cfg_get(env_cfg, "reward_clip"),
                       actions=str(cfg_get(env_cfg, "action_set", "task")),
                       penalty_step=cfg_get(env_cfg, "penalty_step"))
