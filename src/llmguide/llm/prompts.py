"""Versioned prompt templates stored as files: each method keeps its own in ``methods/<name>/prompts/*.txt``
and loads them with ``load_template(name, folder)`` (the kernel ships none).

File format::

    # version: 2
    # description: one line saying what the prompt is for
    <blank line>
    body with ${placeholders} (string.Template syntax; write $$ for a literal dollar sign)

The header is the run of leading ``# key: value`` lines; ``version`` is required.  The cache key
includes ``PromptTemplate.version`` (e.g. ``"ellm_goals@1"``), so bump the number whenever the
wording changes and old cached answers stop being reused.

Conventions kept by the shipped templates:

- ELLM's prompts: the state caption is the rest of the **last line that starts with ``Caption:``** (the
  oracle backend reads it there).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from llmguide.core.errors import LLMGuideError

_HEADER = re.compile(r"^#\s*([A-Za-z_][\w-]*)\s*:\s*(.*?)\s*$")


class PromptTemplateError(LLMGuideError):
    """A template file is malformed or a render call misses / adds a field."""


@dataclass(frozen=True)
class PromptTemplate:
    """A named, versioned prompt; ``render(**fields)`` fills ``${field}`` placeholders."""

    name: str
    number: int
    body: str
    path: Path | None = None
    header: dict[str, str] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """``"<name>@<number>"``: goes into the LM cache key."""
        return f"{self.name}@{self.number}"

    @property
    def fields(self) -> list[str]:
        """Placeholder names in order of first appearance."""
        seen: list[str] = []
        for name in string.Template(self.body).get_identifiers():
            if name not in seen:
                seen.append(name)
        return seen

    def render(self, **fields: object) -> str:
        """The prompt text; a missing or unknown field raises :class:`PromptTemplateError`."""
        expected = set(self.fields)
        missing = sorted(expected - set(fields))
        unknown = sorted(set(fields) - expected)
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing field(s) {missing}")
            if unknown:
                parts.append(f"unknown field(s) {unknown}")
            raise PromptTemplateError(f"template {self.version}: {', '.join(parts)}; it expects {self.fields}")
        return string.Template(self.body).substitute({k: str(v) for k, v in fields.items()})


def parse_template(name: str, text: str, path: Path | None = None) -> PromptTemplate:
    """Build a :class:`PromptTemplate` from file text (header lines, then the body)."""
    lines = text.splitlines(keepends=True)
    header: dict[str, str] = {}
    i = 0
    while i < len(lines) and (match := _HEADER.match(lines[i].strip())):
        header[match.group(1).lower()] = match.group(2)
        i += 1
    if i < len(lines) and not lines[i].strip():
        i += 1
    where = path or name
    if "version" not in header:
        raise PromptTemplateError(f"prompt template {where}: first line must be '# version: N'")
    try:
        number = int(header["version"])
    except ValueError:
        raise PromptTemplateError(f"prompt template {where}: version {header['version']!r} is not an integer") \
            from None
    body = "".join(lines[i:])
    try:
        string.Template(body).substitute({n: "" for n in string.Template(body).get_identifiers()})
    except ValueError as err:
        raise PromptTemplateError(f"prompt template {where}: bad placeholder ({err}); write $$ for '$'") from None
    return PromptTemplate(name=name, number=number, body=body, path=path, header=header)


def list_templates(folder: str | Path) -> list[str]:
    """Names of the templates in ``folder`` (a method's ``prompts/``)."""
    return sorted(p.stem for p in Path(folder).glob("*.txt"))


@lru_cache(maxsize=128)
def _load(path: Path, mtime: float) -> PromptTemplate:
    return parse_template(path.stem, path.read_text(encoding="utf-8"), path)


def load_template(name: str | Path, folder: str | Path | None = None) -> PromptTemplate:
    """Load the template ``name`` of ``folder`` (``"ellm_goals"`` in ELLM's ``prompts/``), or any template file
    by path (a ``.txt`` file of your own)."""
    path = Path(name)
    if (path.suffix != ".txt" or not path.exists()) and folder is not None:
        path = Path(folder) / f"{name}.txt"
    if not path.exists():
        where = f"; available: {list_templates(folder)}" if folder is not None else " (give a .txt file's path)"
        raise PromptTemplateError(f"no prompt template '{name}'{where}")
    return _load(path.resolve(), path.stat().st_mtime)
