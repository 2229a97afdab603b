"""BK's labelling prompts answered by ground truth (``llm=oracle``), for the task's mission.

BK-Code gets the oracle program, BK-Pref ranks the two segments by ground-truth progress towards the
task's target (e.g. "go to the red ball"), BK-Goal gets the oracle goal library for it.  The label step
gives the mission to this answerer only; the LM arms never see it.  Knowledge per env family:
BabyAI-Text in :mod:`llmguide.methods.bk.babyai`, Crafter and Craftax-Classic (from the family's
requirement tree, so Craftax answers with its own recipe costs) in :mod:`llmguide.methods.bk.crafter`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llmguide.core.errors import ConfigError
from llmguide.llm.backends.counterfactual import AnswerFormat

_STEP = re.compile(r"^(?:Step \d+|Current observation): (.*?)(?:\. You choose the action: .*)?\.?$")
# BK-Pref's answer, "[Rank] A > B" (prompts/bk_pref.txt): the counterfactual LMs answer in it (llm=shuffled, random)
RANK_FORMAT = AnswerFormat("rank", "preference", re.compile(r"\[Rank\]\s*(A > B|B > A|A = B)"), "[Rank] {}")


class BKOracleAnswers:
    """Ground-truth answers to BK-Code / BK-Pref / BK-Goal prompts (an :class:`~llmguide.llm.backends.oracle.Answerer`)."""

    name = "bk"
    answer_formats = (RANK_FORMAT,)   # how its BK-Pref answers write a preference (BK-Code's program: none)

    def __init__(self, env_oracle: Any, mission: str):
        """``mission``: what the oracle answers for (the run's task's, or another task's under ``llm.target``:
        wrong knowledge)."""
        self.oracle, self.mission = env_oracle, mission
        family = getattr(env_oracle, "family", "")
        if family == "babyai":
            from llmguide.methods.bk import babyai

            target = babyai.mission_target(mission)
            if target is None:
                raise ConfigError("env.task", f"BK's BabyAI oracle knows go-to missions only, not {mission!r}")
            self._program = lambda: babyai.oracle_potential_program(target)
            self._progress = lambda captions: babyai.window_progress(captions, mission)
            self._goals = lambda: babyai.oracle_goals(mission)
        elif family in ("crafter", "craftax"):
            from llmguide.methods.bk import crafter

            self._program = lambda: crafter.oracle_program(mission, env_oracle)
            self._progress = lambda captions: crafter.window_progress(captions, mission, env_oracle)
            self._goals = lambda: crafter.oracle_goals(mission, env_oracle)
        else:
            raise ConfigError("llm", f"BK has no oracle knowledge for env family {family!r} (babyai, crafter, craftax)")

    def generate(self, prompt: str) -> str | None:
        if "def potential(obs, caption)" in prompt:
            return f"```python\n{self._program()}```"
        if "Segment A:" in prompt and "Segment B:" in prompt:
            head, _, tail = prompt.partition("Segment B:")
            a, b = (self._progress(window_captions(part)) for part in (head.partition("Segment A:")[2], tail))
            rank = "A = B" if abs(a - b) < 1e-9 else ("A > B" if a > b else "B > A")
            return f"Progress towards the target: A {a:+.3f}, B {b:+.3f}.\n[Rank] {rank}"
        if "Current goal list:" in prompt:
            return "\n".join(f"- {g}" for g in self._goals())
        return None

    def score(self, prompt: str, candidates: Sequence[str]) -> list[float] | None:
        return None   # BK's prompts are generated, never scored


def window_captions(text: str) -> list[str]:
    """The captions of a BK window text (``Step i: <caption>. You choose ...``, ``Current observation: ...``)."""
    out = []
    for line in text.splitlines():
        m = _STEP.match(line.strip())
        if m:
            out.append(m.group(1))
    return out
