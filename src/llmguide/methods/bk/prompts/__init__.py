"""BK's prompts: BK-Code's write / fix / improve loop (``bk_code_write``: the paper's task-agnostic prompt;
``bk_code_write_task``: told the mission, ``method.tell_task=true``), BK-Pref's ranking of two segments
(``bk_pref``) and BK-Goal's goal list (``bk_goal``)."""

from __future__ import annotations

from pathlib import Path

from llmguide.llm.prompts import PromptTemplate, list_templates, load_template

PROMPTS = Path(__file__).parent


def names() -> list[str]:
    return list_templates(PROMPTS)


def template(name: str) -> PromptTemplate:
    """BK's prompt ``name`` (or a template file of your own, by path)."""
    return load_template(name, PROMPTS)
