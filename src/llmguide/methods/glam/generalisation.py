"""GLAM's post-training generalisation tests (its ``post-training_tests.py``) for any text policy.

A test changes what a trained policy reads, never its weights: it rewrites every prompt (whole-word
replacement; GLAM used plain substring replacement), swaps the action strings, or moves to a level
whose instructions never occurred in training.  Works with anything :func:`evaluate_policy` accepts
(:class:`~llmguide.methods.glam.learner.LMPolicy`, the DRRN policy).

    results = run_tests(policy, env_cfg, ["unmodified", "oov_nouns", "synonym_actions"], episodes=20, seed=10_000)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llmguide.methods.glam.learner import evaluate_policy

OOV_NOUNS = {"key": "chair", "ball": "table", "box": "car"}
INVENTED_NOUNS = {"key": "dax", "ball": "xolo", "box": "afze"}
INVENTED_COLOURS = {"red": "faze", "green": "jatu", "blue": "croh", "purple": "vurst", "yellow": "gakul",
                    "grey": "sil"}
SYNONYM_ACTIONS = ("rotate_left", "rotate_right", "move_ahead", "take", "release", "switch")


def word_rewrite(mapping: dict[str, str]) -> Callable[[str], str]:
    """A function replacing each whole word of ``mapping`` (case-sensitive) in a text."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
    return lambda text: pattern.sub(lambda m: mapping[m.group(1)], text)


@dataclass(frozen=True)
class GeneralisationTest:
    """What a test changes: the level (None: the training level), the prompt text, the action strings."""

    description: str
    task: str | None = None
    words: dict[str, str] | None = None
    action_strings: tuple[str, ...] | None = None

    def rewrite(self) -> Callable[[str], str] | None:
        return word_rewrite(self.words) if self.words else None


TESTS: dict[str, GeneralisationTest] = {
    "unmodified": GeneralisationTest("training level, prompts as in training"),
    "oov_nouns": GeneralisationTest("key/ball/box -> chair/table/car", words=OOV_NOUNS),
    "invented_nouns": GeneralisationTest("key/ball/box -> dax/xolo/afze", words=INVENTED_NOUNS),
    "invented_words": GeneralisationTest("invented nouns and colour words", words={**INVENTED_NOUNS,
                                                                                  **INVENTED_COLOURS}),
    "goal_prefix": GeneralisationTest("'Goal of the agent' -> 'I would like the agent to'",
                                      words={"Goal of the agent": "I would like the agent to"}),
    "synonym_actions": GeneralisationTest("actions renamed rotate_left, ..., switch",
                                          action_strings=SYNONYM_ACTIONS),
    "new_composition": GeneralisationTest("'pick up A then pick up B' (PickupPickupLocal)", task="PickupPickupLocal"),
    "heldout_objects": GeneralisationTest("MixedTestLocal: held-out colour/object combinations", task="MixedTestLocal"),
}


@contextmanager
def swapped_actions(policy: Any, action_strings: Sequence[str] | None) -> Iterator[None]:
    """Temporarily give ``policy`` other action strings (same order, same env actions)."""
    if action_strings is None:
        yield
        return
    if len(action_strings) != len(policy.action_strings):
        raise ValueError(f"need {len(policy.action_strings)} action strings, got {len(action_strings)}")
    saved = list(policy.action_strings)
    policy.action_strings = list(action_strings)
    try:
        yield
    finally:
        policy.action_strings = saved


def run_tests(policy: Any, env_cfg: Any, names: Sequence[str], episodes: int, seed: int, k_history: int = 3,
              greedy: bool = True) -> dict[str, dict[str, Any]]:
    """Evaluate ``policy`` under each named test on the same episode seeds; test name -> metrics."""
    unknown = [n for n in names if n not in TESTS]
    if unknown:
        raise ValueError(f"unknown generalisation test(s) {unknown}; choose from {sorted(TESTS)}")
    results = {}
    for name in names:
        test = TESTS[name]
        cfg = dict(env_cfg) if test.task is None else {**dict(env_cfg), "task": test.task}
        with swapped_actions(policy, test.action_strings):
            metrics = evaluate_policy(policy, cfg, episodes, seed, k_history, greedy=greedy, rewrite=test.rewrite())
        results[name] = {"description": test.description, "task": cfg.get("task"), **metrics}
    return results
