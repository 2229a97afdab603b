"""Oracle backend: answers from an env family's ground-truth goal oracle (no language model).

Prompt convention (shared with the prompt templates in ``llmguide/llm/prompts``): the state caption
is the rest of the **last line that starts with** ``Caption:``.  A prompt without such a line is used
whole as the caption; that fallback is counted in ``stats["no_caption"]`` and logged.

BK labelling prompts (``llm/prompts/bk_*.txt``) get ground-truth answers when the env family's oracle
has BK knowledge (``bk_program``, ``bk_progress``, ``bk_goals``; BabyAI, Crafter and Craftax have): BK-Code gets the
oracle program, BK-Pref ranks the two segments by ground-truth progress towards the target of
``task_mission`` (e.g. "go to the red ball"), BK-Goal gets the oracle goal library for it.
The BK pipeline sets ``task_mission`` from the env's task; the LM arms never see it.

ONI / Motif labelling prompts (``oni_label*``, ``motif_pref``) get ground-truth answers when the oracle
has ``helpful(message)`` and ``prefer(a, b)`` (NetHack/MiniHack has: a message is helpful when it
reports progress, from the env's message events).  The message is the last ``Message:`` line, the pair
the last ``A:`` / ``B:`` lines (quotes stripped); a ``Goal:`` line (the ``*_goal`` templates) conditions
the answer on that goal, as it conditions an LM's (``helpful(message, goal=...)``).  Both label modes work: ``score`` gives 0.0 to the true
answer and -1e9 to the others, ``generate`` returns the answer in its ``<answer>`` tag, so the oracle
goes through exactly the code path of an LM labeller.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Sequence

from llmguide.llm.base import Completion, LanguageModel, check_score_args

log = logging.getLogger(__name__)

CAPTION_PREFIX = "Caption:"
MISS_SCORE = -1e9


def extract_caption(prompt: str) -> str | None:
    """The rest of the last line of ``prompt`` starting with ``Caption:`` (stripped), or None."""
    for line in reversed(prompt.splitlines()):
        if line.lstrip().startswith(CAPTION_PREFIX):
            return line.lstrip()[len(CAPTION_PREFIX):].strip()
    return None


class OracleLM(LanguageModel):
    """Ground-truth goals of ``env_family`` (``llmguide.envs.get_oracle``) behind the LM interface."""

    backend = "oracle"

    def __init__(self, env_family: str):
        from llmguide.envs import get_oracle

        self.env_family = env_family
        self.model_id = f"oracle-{env_family}"
        self.oracle = get_oracle(env_family)
        self.stats = {"no_caption": 0, "bk_answers": 0}
        self.task_mission: str | None = None     # BK-Pref / BK-Goal: the downstream task's mission

    def __repr__(self) -> str:
        return f"OracleLM(env_family={self.env_family!r})"

    def _suggest(self, prompt: str) -> list[str]:
        caption = extract_caption(prompt)
        if caption is None:
            self.stats["no_caption"] += 1
            log.warning("oracle LM: prompt has no line starting with %r; using the whole prompt as caption",
                        CAPTION_PREFIX)
            caption = prompt
        return list(self.oracle.suggest_from_caption(caption))

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """Bullets ``- goal``, one per line, for the goals the oracle suggests from each prompt's caption."""
        out = []
        for prompt in prompts:
            oni = self._oni_answer(prompt)
            if oni is not None:
                self.stats["oni_answers"] = self.stats.get("oni_answers", 0) + 1
                out.append(Completion(text=f"<answer>{oni}</answer>", finish_reason="stop", meta={"oni": True}))
                continue
            bk = self._bk_answer(prompt)
            if bk is not None:
                self.stats["bk_answers"] += 1
                out.append(Completion(text=bk, finish_reason="stop", meta={"bk": True}))
                continue
            goals = self._suggest(prompt)
            out.append(Completion(text="\n".join(f"- {g}" for g in goals), finish_reason="stop",
                                  meta={"goals": goals}))
        return out

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """0.0 for candidates the oracle suggests from the context's caption, -1e9 for the others."""
        check_score_args(contexts, candidates)
        rows = []
        for context, cands in zip(contexts, candidates, strict=True):
            oni = self._oni_answer(context)
            if oni is not None:
                self.stats["oni_answers"] = self.stats.get("oni_answers", 0) + 1
                rows.append([0.0 if _norm_answer(c) == _norm_answer(oni) else MISS_SCORE for c in cands])
                continue
            good = set(self._suggest(context))
            rows.append([0.0 if self.oracle.canonical(c) in good else MISS_SCORE for c in cands])
        return rows

    # --- ONI / Motif labelling prompts -------------------------------------------------------------
    def _oni_answer(self, prompt: str) -> str | None:
        """``"yes"``/``"no"`` for an ONI label prompt, ``"A > B"``/``"B > A"``/``"A = B"`` for a pair prompt,
        None if ``prompt`` is neither (or the oracle has no message ground truth)."""
        if not hasattr(self.oracle, "helpful"):
            return None
        a, b = _last_line(prompt, "A:"), _last_line(prompt, "B:")
        goal = _last_line(prompt, "Goal:")
        by_goal = {"goal": goal} if goal else {}  # no Goal: line: the oracle's task-agnostic answer
        if a is not None and b is not None and hasattr(self.oracle, "prefer"):
            return {"A": "A > B", "B": "B > A", "=": "A = B"}[self.oracle.prefer(a, b, **by_goal)]
        message = _last_line(prompt, "Message:")
        if message is not None:
            return "yes" if self.oracle.helpful(message, **by_goal) else "no"
        return None

    # --- BK labelling prompts ---------------------------------------------------------------------
    def _bk_answer(self, prompt: str) -> str | None:
        """Ground-truth answer to a BK labelling prompt, or None if ``prompt`` is not one."""
        if "def potential(obs, caption)" in prompt and hasattr(self.oracle, "bk_program"):
            return f"```python\n{self._bk_program()}```"
        if "Segment A:" in prompt and "Segment B:" in prompt and hasattr(self.oracle, "bk_progress"):
            head, _, tail = prompt.partition("Segment B:")
            a, b = (self.oracle.bk_progress(_window_captions(part), self.task_mission or "")
                    for part in (head.partition("Segment A:")[2], tail))
            rank = "A = B" if abs(a - b) < 1e-9 else ("A > B" if a > b else "B > A")
            return f"Progress towards the target: A {a:+.3f}, B {b:+.3f}.\n[Rank] {rank}"
        if "Current goal list:" in prompt and hasattr(self.oracle, "bk_goals"):
            return "\n".join(f"- {g}" for g in self.oracle.bk_goals(self.task_mission or ""))
        return None

    def _bk_program(self) -> str:
        """The oracle's BK-Code program; an oracle whose ``bk_program`` takes the mission (Crafter's: the
        program is written for the task) is given ``task_mission``."""
        takes_mission = bool(inspect.signature(self.oracle.bk_program).parameters)
        return self.oracle.bk_program(self.task_mission or "") if takes_mission else self.oracle.bk_program()


_STEP = re.compile(r"^(?:Step \d+|Current observation): (.*?)(?:\. You choose the action: .*)?\.?$")


def _window_captions(text: str) -> list[str]:
    """The captions of a BK window text (``Step i: <caption>. You choose ...``, ``Current observation: ...``)."""
    out = []
    for line in text.splitlines():
        m = _STEP.match(line.strip())
        if m:
            out.append(m.group(1))
    return out


def _last_line(prompt: str, prefix: str) -> str | None:
    """The rest of the last line starting with ``prefix`` (stripped, surrounding quotes removed), or None."""
    for line in reversed(prompt.splitlines()):
        if line.startswith(prefix):
            text = line[len(prefix):].strip()
            if len(text) >= 2 and text[0] == text[-1] == '"':
                text = text[1:-1]
            return text
    return None


def _norm_answer(candidate: str) -> str:
    """A score candidate in the form of :meth:`OracleLM._oni_answer` (" yes" → "yes", "A>B" → "a>b")."""
    return candidate.strip().lower().replace(" ", "")
