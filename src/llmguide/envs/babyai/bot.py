"""The one loop that lets minigrid's ``BabyAIBot`` play :class:`~llmguide.envs.babyai.env.BabyAIText`
episodes: GLAM's behavioural-cloning demonstrations (:func:`~llmguide.envs.babyai.env.bot_demonstrations`)
and PTGM's task-agnostic dataset both read :func:`bot_episodes`."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class BotEpisode:
    """One bot episode: the observations and infos of ``s_0 .. s_T`` and the ``T`` actions and rewards."""

    obs: list[dict[str, Any]]
    infos: list[dict[str, Any]]
    mission: str
    max_steps: int
    seed: int
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    error: str = ""   # why the bot stopped early ("" when the episode ended or the bot said "done")

    @property
    def success(self) -> bool:
        return bool(self.infos[-1]["success"])


class BotTimeout(Exception):
    """``BabyAIBot.replan`` ran past its wall-clock limit."""


def bot_episodes(envs: Sequence[Any], seeds: Iterable[int], timeout: float | None = None) -> Iterator[BotEpisode]:
    """The bot playing ``envs`` round robin (episode ``i`` in ``envs[i % len(envs)]``), one episode per reset seed.

    An episode where the bot raises (it gives up on rare layouts) or, with ``timeout``, replans for more than
    ``timeout`` wall-clock seconds (it can search forever) ends there and is yielded as it stands, ``error``
    naming the failure.  The bot's "done" action (never offered to agents) ends the episode too."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    for i, seed in enumerate(seeds):
        env = envs[i % len(envs)]
        obs, info = env.reset(seed=seed)
        bot = BabyAIBot(env.level)
        episode = BotEpisode([obs], [info], str(env.level.mission), int(env.level.max_steps), int(seed))
        while not (episode.terminated or episode.truncated):
            try:
                action = _replan(bot, timeout)
            except Exception as err:  # the bot gives up (or loops): keep the partial episode
                episode.error = f"{type(err).__name__}: {err}"
                log.warning("BabyAIBot failed on the episode of seed %d: %s", seed, episode.error)
                break
            if action >= len(env.action_strings):
                break
            obs, reward, episode.terminated, episode.truncated, info = env.step(action)
            episode.obs.append(obs)
            episode.infos.append(info)
            episode.actions.append(action)
            episode.rewards.append(float(reward))
        yield episode


def _replan(bot: Any, timeout: float | None) -> int:
    """``bot.replan()``, with a wall-clock limit (SIGALRM: main thread only) when ``timeout`` is given."""
    if not timeout:
        return int(bot.replan())

    def stop(signum, frame):
        raise BotTimeout(f"BabyAIBot.replan took more than {timeout}s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return int(bot.replan())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
