"""What a prompt tells: its worked examples, read from the prompt's own text.

A few-shot prompt carries answers.  Whatever an LM arm gains by repeating them is the prompt's knowledge, not
the LM's, so every prompt with examples gets a prompt-only control (:mod:`llmguide.llm.backends.prompt_only`) that
answers from them alone.  This module finds them in any prompt, a user's own included, by the layout that
few-shot prompts share (no list of known prompts, no method's vocabulary):

* **Question and answer blocks.**  Blocks are separated by blank lines.  The prompt's last block is the query; its
  first line starts with a label such as ``Caption:`` or ``Message:``.  Every earlier block whose first line
  starts with the same label and which has more lines is a worked example: that first line is its query, the
  lines after it its answer (``- chop tree`` bullets, ``<answer>yes</answer>``).  A prompt whose last block has
  no label, or whose label no earlier block repeats, has no such examples.
* **Example programs.**  A fenced code block (three backticks) whose introducing line, the last non-empty line
  before it, says "example" is an example program (BK-Code's "Example of a valid program ...").  A skeleton to
  complete ("Complete this skeleton") is not one.

``worked_examples(prompt)`` returns both; :attr:`WorkedExamples.items` are the answers' bullet items, the strings
a prompt-only suggester may name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_LABEL = re.compile(r"^([A-Za-z][\w ]{0,40}?):")          # "Caption:", "Message:", "Segment A:"
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.+?)\s*$")  # "- chop tree", "* eat cow", "2. mine stone"
_BLANK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class WorkedExample:
    """One worked example of a prompt: its query line and its answer as written."""

    query: str
    answer: str

    @property
    def items(self) -> list[str]:
        """The answer's bullet items, in order (empty when the answer is not a list)."""
        return [m.group(1) for line in self.answer.splitlines() if (m := _BULLET.match(line))]


@dataclass(frozen=True)
class WorkedExamples:
    """The worked examples of one prompt: question-and-answer ``examples`` (after a ``label``) and ``programs``."""

    examples: tuple[WorkedExample, ...] = ()
    programs: tuple[str, ...] = ()
    label: str | None = None

    def __bool__(self) -> bool:
        return bool(self.examples or self.programs)

    @property
    def items(self) -> list[str]:
        """Every example answer's bullet items, each once, in order of first appearance."""
        seen: dict[str, None] = {}
        for example in self.examples:
            for item in example.items:
                seen.setdefault(item, None)
        return list(seen)

    @property
    def answers(self) -> list[str]:
        """The example answers as written."""
        return [e.answer for e in self.examples]


def _programs(prompt: str) -> tuple[str, ...]:
    found = []
    for match in _FENCE.finditer(prompt):
        before = [ln for ln in prompt[: match.start()].splitlines() if ln.strip()]
        if before and "example" in before[-1].lower():
            found.append(match.group(1).strip() + "\n")
    return tuple(found)


def _qa_examples(prompt: str) -> tuple[tuple[WorkedExample, ...], str | None]:
    text = _FENCE.sub("", prompt.replace("\r\n", "\n"))   # a program's lines are not question-and-answer blocks
    blocks = [b.strip("\n") for b in _BLANK.split(text) if b.strip()]
    if len(blocks) < 2:
        return (), None
    label = _LABEL.match(blocks[-1].lstrip())
    if label is None:
        return (), None
    prefix = label.group(1) + ":"
    examples = []
    for block in blocks[:-1]:
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if len(lines) >= 2 and lines[0].lstrip().startswith(prefix):
            examples.append(WorkedExample(query=lines[0].strip(), answer="\n".join(ln.rstrip() for ln in lines[1:])))
    return tuple(examples), (prefix if examples else None)


@lru_cache(maxsize=256)
def worked_examples(prompt: str) -> WorkedExamples:
    """The worked examples of ``prompt`` (see the module docstring); an empty (false) result when it has none."""
    examples, label = _qa_examples(prompt)
    return WorkedExamples(examples=examples, programs=_programs(prompt), label=label)


def describe(prompt: str) -> str:
    """One line saying what a prompt's examples tell (for logs and errors)."""
    found = worked_examples(prompt)
    if not found:
        return "no worked examples (zero-shot)"
    parts = []
    if found.examples:
        parts.append(f"{len(found.examples)} worked example(s) after {found.label!r}"
                     + (f" naming {len(found.items)} answer(s)" if found.items else ""))
    if found.programs:
        parts.append(f"{len(found.programs)} example program(s)")
    return ", ".join(parts)
