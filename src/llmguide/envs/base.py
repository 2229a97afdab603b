"""Shared pieces of the text environments: the oracle interface and small text helpers."""

from __future__ import annotations

import re

GOOD, ILL_TIMED, IMPOSSIBLE = "good", "ill-timed", "impossible"


def normalize_goal(goal: str) -> str:
    """Canonical form of a goal string: lowercase, underscores to spaces, no punctuation."""
    goal = goal.strip().lower().replace("_", " ")
    goal = re.sub(r"[^a-z0-9 ]+", " ", goal)
    return re.sub(r"\s+", " ", goal).strip()


class Oracle:
    """Ground-truth goal vocabulary of one env family, with prerequisites.

    Subclasses implement :meth:`feasible` (goals achievable now from the real state in ``info``),
    :meth:`feasible_from_caption` and :meth:`achieved` (goals already achieved this episode).
    """

    family: str = ""
    goals: list[str] = []
    prerequisites: dict[str, list[str]] = {}

    def feasible(self, info: dict) -> set[str]:
        raise NotImplementedError

    def feasible_from_caption(self, caption: str) -> set[str]:
        raise NotImplementedError

    def achieved(self, info: dict) -> set[str]:
        return set(info.get("episode_events", ()))

    def suggest(self, info: dict) -> list[str]:
        """Goals achievable right now in this state and not yet achieved this episode."""
        feasible, done = self.feasible(info), self.achieved(info)
        return [g for g in self.goals if g in feasible and g not in done]

    def suggest_from_caption(self, caption: str) -> list[str]:
        """Goals achievable now, judged from the caption text alone."""
        feasible = self.feasible_from_caption(caption)
        return [g for g in self.goals if g in feasible]

    def canonical(self, goal: str) -> str | None:
        """The vocabulary goal that ``goal`` names, or None."""
        norm = normalize_goal(goal)
        return norm if norm in self.goals else None

    def grade(self, goal: str, info: dict) -> str:
        """"good" (achievable now), "ill-timed" (valid, prerequisites unmet now) or "impossible"."""
        name = self.canonical(goal)
        if name is None:
            return IMPOSSIBLE
        return GOOD if name in self.feasible(info) else ILL_TIMED
