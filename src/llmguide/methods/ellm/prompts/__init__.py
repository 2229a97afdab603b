"""ELLM's prompts (``method.prompt`` picks one by name; the default follows ``method.suggester``):

* ``ellm_goal_score``: the completion-style scoring context for a base model (Gemma 3 270M); each
  candidate goal is scored as its continuation.
* ``ellm_goals``: the reference's few-shot bullet prompt over the 22 achievement goals (generate).
* ``ellm_actions_listed``: for an instruct model over the open vocabulary (all action strings, listed in
  the prompt as ``${vocabulary}``), as in the paper: the valid actions, three worked examples
  (caption -> actions), then the state (generate; parsed as bullets and matched to the vocabulary).
* ``ellm_actions_zeroshot``: the same without the worked examples (generate; the knowledge probe's
  zero-shot row).
* ``ellm_actions_offdomain``: the same with three worked examples from another game (a space-trading game),
  which teach the answer's format and name no action or object of Crafter (generate).
* ``ellm_actions_score_listed``: the same instructions and list, asking for one action; each candidate is
  scored as the assistant's answer (score).

What a prompt's examples tell is the prompt's knowledge: ``llm=prompt_only`` answers from them alone
(:mod:`llmguide.llm.backends.prompt_only`).  Every prompt ends its state with a line ``Caption: ...`` (the oracle backend reads the caption there).
"""

from __future__ import annotations

from pathlib import Path

from llmguide.llm.prompts import PromptTemplate, list_templates, load_template

PROMPTS = Path(__file__).parent


def names() -> list[str]:
    return list_templates(PROMPTS)


def template(name: str) -> PromptTemplate:
    """ELLM's prompt ``name`` (or a template file of your own, by path)."""
    return load_template(name, PROMPTS)
