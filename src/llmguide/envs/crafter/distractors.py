"""A noisy TV for the message line (``env.distractors``, Crafter and Craftax-Classic alike; off by default).

With ``env.distractors.rate`` > 0, the do-nothing action (``noop``; ``"do nothing"`` among the text actions), which
the agent can always take, also shows a harmless sight with that probability: one sentence drawn from a large,
seeded set (``env.distractors.size``, up to :data:`MAX_SIZE`), appended to the step's ``info["message"]``:

    "You look up and see a grey cloud shaped like a rabbit."

The sight changes nothing in the game (state, reward, observation, caption and events are the env's own), and
with thousands of sentences each is new often enough that a count-based message bonus keeps paying for it: the
"noisy TV" of the exploration literature, where novelty misleads and knowledge should not.  No sentence reports an
achievement, so the ground-truth labels (:func:`~llmguide.envs.crafter.messages.message_achievements`) call every
one unhelpful.  Each env's share of steps spent on the distractor action this episode is ``info["distractor_share"]``
(the learners log it per episode as ``charts/distractor_share``).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.core.config import cfg_get
from llmguide.core.errors import ConfigError

COLORS = ["grey", "white", "pink", "golden", "silver", "purple", "orange", "pale", "dark", "bright", "blue", "red",
          "green", "yellow", "brown", "black", "amber", "violet", "copper", "rosy"]
SHAPES = ["a rabbit", "a boat", "a fish", "a hat", "a dragon", "a teapot", "a horse", "a bird", "a key", "a bell",
          "a shoe", "a crown", "a tower", "a snail", "a whale", "a kite", "a star", "a spoon", "a lamp", "a face",
          "a bear", "a cat", "a fox", "an owl", "a frog", "a leaf", "a ladder", "a wheel", "a ship", "a heart"]
SOUNDS = ["a bird", "the wind", "a frog", "a distant bell", "an insect", "running water", "a cricket", "a cuckoo",
          "a woodpecker", "rustling leaves", "a far-off owl", "a lark", "a dove", "a bee", "a gull", "thunder far away",
          "a creaking branch", "a soft rain", "a robin", "a wren"]
MOODS = ["happily", "softly", "far away", "close by", "for a moment", "again", "twice", "slowly", "in the distance",
         "quietly", "loudly", "all around", "above you", "behind you", "briefly", "once more", "faintly", "cheerfully",
         "sleepily", "lazily"]
TEMPLATES = [
    "You look up and see a {color} cloud shaped like {shape}.",
    "A {color} butterfly shaped like {shape} flutters past.",
    "You hear {sound} {mood}.",
    "You notice a {color} pebble that looks like {shape}.",
    "A {color} leaf shaped like {shape} drifts by.",
    "You daydream about {shape} {mood}.",
    "The light turns {color} {mood}.",
    "You hum a tune about {shape}, {mood}.",
]
SLOTS = {"color": COLORS, "shape": SHAPES, "sound": SOUNDS, "mood": MOODS}


def all_sentences() -> list[str]:
    """Every sentence of the grammar, in a fixed order."""
    out = []
    for template in TEMPLATES:
        names = [n for n in SLOTS if "{" + n + "}" in template]
        for values in itertools.product(*(SLOTS[n] for n in names)):
            out.append(template.format(**dict(zip(names, values, strict=True))))
    return out


MAX_SIZE = len(all_sentences())


def sentence_set(size: int, seed: int = 0) -> list[str]:
    """``size`` distinct sentences of the grammar, a seeded sample (the same for every run with that seed)."""
    if not 1 <= size <= MAX_SIZE:
        raise ConfigError("env.distractors.size", f"must be between 1 and {MAX_SIZE} (the grammar's sentences), "
                                                  f"got {size}")
    return random.Random(seed).sample(all_sentences(), size)


def distractor_action(actions: str) -> int:
    """The index of the do-nothing action in the env's action set (``primitive`` or ``text``)."""
    if actions == "text":
        from llmguide.envs.crafter.actions import ACTION_STRINGS

        return ACTION_STRINGS.index("do nothing")
    from crafter import constants

    return list(constants.actions).index("noop")


def settings(env_cfg: Any) -> tuple[float, int] | None:
    """``(rate, size)`` of ``env.distractors``, or None when it is off; a bad value is a ConfigError naming it."""
    block = cfg_get(env_cfg, "distractors")
    rate = float(cfg_get(block, "rate", 0.0) or 0.0) if block is not None else 0.0
    if not 0.0 <= rate <= 1.0:
        raise ConfigError("env.distractors.rate", f"a probability in [0, 1], got {rate}")
    if rate == 0.0:
        return None
    return rate, int(cfg_get(block, "size", 4000))


class DistractorVector(gym.vector.VectorWrapper):
    """A vector env whose do-nothing action shows a distractor sentence with probability ``rate`` (see above)."""

    def __init__(self, envs: gym.vector.VectorEnv, rate: float, size: int, action: int, seed: int = 0):
        super().__init__(envs)
        self.rate, self.action = float(rate), int(action)
        self.sentences = sentence_set(size, seed)
        self._rng = np.random.default_rng(seed)
        self._steps = np.zeros(self.num_envs, np.int64)
        self._on = np.zeros(self.num_envs, np.int64)

    def reset(self, **kwargs: Any):
        obs, infos = self.env.reset(**kwargs)
        self._steps[:] = 0
        self._on[:] = 0
        infos["distractor_share"] = np.zeros(self.num_envs)
        return obs, infos

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        chosen = np.asarray(actions).reshape(self.num_envs) == self.action
        self._steps += 1
        self._on += chosen
        show = chosen & (self._rng.random(self.num_envs) < self.rate)
        share = self._on / self._steps
        done = np.asarray(terminated) | np.asarray(truncated)
        final = infos.get("final_info") if done.any() else None
        messages = _messages(infos, self.num_envs)
        final_messages = _messages(final, self.num_envs) if final is not None else None
        for i in np.flatnonzero(show):
            sight = self.sentences[int(self._rng.integers(len(self.sentences)))]
            # a finished env's step is reported in final_info; its top-level info is the next episode's first
            target = final_messages if final_messages is not None and done[i] else messages
            target[i] = f"{target[i]} {sight}".strip() if target[i] else sight
        infos["message"], infos["_message"] = messages, np.ones(self.num_envs, bool)
        infos["distractor_share"] = np.where(done, 0.0, share)
        if final is not None:
            final["message"], final["_message"] = final_messages, np.asarray(done, bool)
            final["distractor_share"], final["_distractor_share"] = share.astype(float), np.asarray(done, bool)
        self._steps[done] = 0
        self._on[done] = 0
        return obs, rewards, terminated, truncated, infos


def _messages(infos: dict, n: int) -> np.ndarray:
    """The info's message column as an object array of strings ("" where an env has none)."""
    out = np.empty(n, dtype=object)
    values, mask = infos.get("message"), infos.get("_message")
    for i in range(n):
        has = values is not None and (mask is None or bool(np.asarray(mask)[i]))
        out[i] = str(values[i]) if has and values[i] is not None else ""
    return out


def wrap_vector(envs: gym.vector.VectorEnv, env_cfg: Any, seed: int) -> gym.vector.VectorEnv:
    """``envs`` with the noisy TV of ``env.distractors`` (unchanged when it is off)."""
    on = settings(env_cfg)
    if on is None:
        return envs
    rate, size = on
    return DistractorVector(envs, rate, size, distractor_action(str(cfg_get(env_cfg, "actions", "primitive"))), seed)
