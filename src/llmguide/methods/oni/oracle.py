"""ONI's and Motif's questions answered by the env's ground truth (``llm=oracle``).

A label prompt (``oni_label*``) has a ``Message:`` line, a pair prompt (``motif_pref``) ``A:`` / ``B:``
lines (quotes stripped); a ``Goal:`` line (the ``*_goal`` templates) conditions the answer on that
goal, as it conditions an LM's.  The env oracle must know messages: ``message_progress(message, goal=...)``,
how much progress towards the goal a message reports (NetHack / MiniHack, from the message events; Crafter /
Craftax-Classic, from the achievements their message line reports and the requirement tree).  ONI's label is
:func:`helpful` (some progress), Motif's and ONI-Ranking's preference :func:`prefer` (more progress).
``generate`` answers in the ``<answer>`` tag; ``score`` gives 0.0 to the true answer and ``MISS_SCORE`` to the
others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmguide.llm.backends.oracle import MISS_SCORE, last_line


def helpful(env_oracle: Any, message: str, goal: str | None = None) -> bool:
    """ONI's yes/no label from ground truth: ``message`` reports progress towards ``goal`` (without a goal, any
    progress).  On NetHack with the reference's Score goal ("maximize the score ... killing monsters, collecting
    gold or going down the stairs") that is a kill, a level gain, gold picked up or heard ("You hear someone
    counting money.", one of the reference prompt's FOO examples), a staircase down; a door opened or an item
    picked up is not (the reference prompt calls neutral messages BAR).  On Crafter: an achievement on the
    goal's requirement path."""
    return env_oracle.message_progress(message, goal) > 0


def prefer(env_oracle: Any, a: str, b: str, goal: str | None = None) -> str:
    """Motif / ONI-Ranking preference from ground truth: ``"A"``, ``"B"`` or ``"="`` by progress towards ``goal``."""
    pa, pb = env_oracle.message_progress(a, goal), env_oracle.message_progress(b, goal)
    return "=" if pa == pb else ("A" if pa > pb else "B")


class ONIOracleAnswers:
    """Ground-truth message labels and pair preferences from ``env_oracle`` (an :class:`~llmguide.llm.backends.oracle.Answerer`)."""

    name = "oni"

    def __init__(self, env_oracle: Any, goal: str | None = None):
        self.oracle = env_oracle
        self.goal = goal   # llm.target: answer for this goal whatever the prompt's Goal: line says (wrong knowledge)

    def answer(self, prompt: str) -> str | None:
        """``"yes"``/``"no"`` for a label prompt, ``"A > B"``/``"B > A"``/``"A = B"`` for a pair prompt,
        None if ``prompt`` is neither or the env oracle has no message ground truth."""
        if not hasattr(self.oracle, "message_progress"):
            return None
        a, b = last_line(prompt, "A:"), last_line(prompt, "B:")
        goal = self.goal or last_line(prompt, "Goal:")
        by_goal = {"goal": goal} if goal else {}  # no Goal: line: the oracle's task-agnostic answer
        if a is not None and b is not None:
            return {"A": "A > B", "B": "B > A", "=": "A = B"}[prefer(self.oracle, a, b, **by_goal)]
        message = last_line(prompt, "Message:")
        if message is not None:
            return "yes" if helpful(self.oracle, message, **by_goal) else "no"
        return None

    def generate(self, prompt: str) -> str | None:
        answer = self.answer(prompt)
        return None if answer is None else f"<answer>{answer}</answer>"

    def score(self, prompt: str, candidates: Sequence[str]) -> list[float] | None:
        answer = self.answer(prompt)
        if answer is None:
            return None
        return [0.0 if _norm_answer(c) == _norm_answer(answer) else MISS_SCORE for c in candidates]


def _norm_answer(candidate: str) -> str:
    """A score candidate in the form of :meth:`ONIOracleAnswers.answer` (" yes" → "yes", "A>B" → "a>b")."""
    return candidate.strip().lower().replace(" ", "")
