"""Robust parsers for LM output: malformed text is counted and logged, never raised into training."""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

_BULLET = re.compile(r"^\s*(?:[-*•‣◦]|\d{1,3}[.)])\s+(?P<item>\S.*)$")
_FENCE = re.compile(r"^\s*(```|\"\"\"|''')")
_TRAILING = ".,;:!?\"'`*_ )]}"
_LEADING = "\"'`*_ ([{"


class ParseStats:
    """Thread-safe counter of parse outcomes per parser; keeps the last few malformed outputs.

    The first ``log_first`` malformed outputs of each parser are logged at WARNING, later ones at
    DEBUG (so a badly behaved model cannot flood the log).
    """

    def __init__(self, keep_examples: int = 20, log_first: int = 10):
        self.ok: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.examples: deque[dict[str, str]] = deque(maxlen=keep_examples)
        self.log_first = log_first
        self._lock = threading.Lock()

    def record_ok(self, parser: str) -> None:
        with self._lock:
            self.ok[parser] += 1

    def record_malformed(self, parser: str, text: str, reason: str) -> None:
        with self._lock:
            self.malformed[parser] += 1
            n = self.malformed[parser]
            self.examples.append({"parser": parser, "reason": reason, "text": text[:500]})
        level = logging.WARNING if n <= self.log_first else logging.DEBUG
        log.log(level, "malformed LM output #%d for %s (%s): %r", n, parser, reason, text[:200])

    @property
    def total(self) -> int:
        return sum(self.ok.values()) + sum(self.malformed.values())

    @property
    def malformed_rate(self) -> float:
        total = self.total
        return sum(self.malformed.values()) / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Flat counters for metrics logging: parse/<parser>/ok, parse/<parser>/malformed, rate."""
        with self._lock:
            out: dict[str, Any] = {}
            for name in sorted(set(self.ok) | set(self.malformed)):
                out[f"parse/{name}/ok"] = self.ok[name]
                out[f"parse/{name}/malformed"] = self.malformed[name]
        out["parse/malformed_rate"] = self.malformed_rate
        return out


def _clean_item(item: str) -> str:
    item = re.sub(r"\s+", " ", item).strip().strip(_LEADING).rstrip(_TRAILING).strip()
    return item.lower()


def parse_bullets(text: str | None, stats: ParseStats | None = None, *, max_items: int = 32) -> list[str]:
    """Items of the first block of bullet lines (``-``, ``*``, ``•``, ``1.``, ``2)``), cleaned.

    Items are stripped, lowercased, de-duplicated (order kept) and lose trailing punctuation.  The
    block ends at the first non-bullet text line after a bullet (small models often continue with
    an invented few-shot example).  No bullet at all -> ``[]``, counted and logged as malformed.
    """
    stats = stats if stats is not None else ParseStats()
    if not isinstance(text, str) or not text.strip():
        stats.record_malformed("bullets", str(text), "empty output")
        return []
    items: list[str] = []
    started = False
    for line in text.splitlines():
        if _FENCE.match(line) or not line.strip():
            continue
        match = _BULLET.match(line)
        if match is None:
            if started:
                break
            continue
        started = True
        item = _clean_item(match.group("item"))
        if item and item not in items:
            items.append(item)
        if len(items) >= max_items:
            break
    if not items:
        stats.record_malformed("bullets", text, "no bullet line")
        return []
    stats.record_ok("bullets")
    return items


def _match_choice(raw: str, choices: Sequence[str]) -> str | None:
    value = _clean_item(raw)
    lowered = {c.lower(): c for c in choices}
    if value in lowered:
        return lowered[value]
    first = value.split(" ", 1)[0].rstrip(_TRAILING) if value else ""
    return lowered.get(first)


def parse_tag(text: str | None, tag: str, choices: Sequence[str], stats: ParseStats | None = None) -> str | None:
    """The answer given in its tag: ``<tag>yes</tag>`` or a line ``Tag: yes`` (last one wins).

    Returns the matching entry of ``choices`` (case-insensitive; the first word of the tag content
    may carry it), or None, counted and logged as malformed.  A choice that only appears elsewhere
    in the text does not count.
    """
    stats = stats if stats is not None else ParseStats()
    parser = f"tag:{tag}"
    if not isinstance(text, str) or not text.strip():
        stats.record_malformed(parser, str(text), "empty output")
        return None
    t = re.escape(tag)
    found = re.findall(rf"<\s*{t}\s*>(.*?)<\s*/\s*{t}\s*>", text, flags=re.IGNORECASE | re.DOTALL)
    if not found:  # an opened tag that the model did not close (e.g. cut by max_tokens)
        found = re.findall(rf"<\s*{t}\s*>\s*([^\s<]+)", text, flags=re.IGNORECASE)
    if not found:  # the prompt ended with the opening tag: the completion is "yes</answer>..."
        found = re.findall(rf"\A\s*([^<\n]{{1,40}}?)\s*<\s*/\s*{t}\s*>", text, flags=re.IGNORECASE)
    if not found:
        found = re.findall(rf"^[\s*#_]*{t}[\s*_]*[:=]\s*(.+?)\s*$", text, flags=re.IGNORECASE | re.MULTILINE)
    if not found:
        stats.record_malformed(parser, text, f"no <{tag}> tag or '{tag}:' line")
        return None
    choice = _match_choice(found[-1], choices)
    if choice is None:
        stats.record_malformed(parser, text, f"{found[-1].strip()!r} is not one of {list(choices)}")
        return None
    stats.record_ok(parser)
    return choice


_PREF_CMP = re.compile(r"(?<![A-Za-z])([AB])\s*(>>?|<<?|=+|≈)\s*([AB])(?![A-Za-z])")
_PREF_WORD = re.compile(r"^[\s*#_]*(?:answer|preference|preferred|better|winner|best)[\s*_]*[:=]\s*(.+?)\s*$",
                        re.IGNORECASE | re.MULTILINE)
_PREF_TAG = re.compile(r"<\s*(?:answer|preference)\s*>(.*?)<\s*/\s*(?:answer|preference)\s*>",
                       re.IGNORECASE | re.DOTALL)
_TIE_WORDS = {"=", "tie", "equal", "same", "none", "neither", "both", "a = b", "b = a", "a=b", "b=a"}


def _pref_from_answer(raw: str) -> str | None:
    value = _clean_item(raw)
    cmp_match = _PREF_CMP.search(value.upper())
    if cmp_match:
        return _pref_from_cmp(*cmp_match.groups())
    if value in _TIE_WORDS or value.split(" ", 1)[0] in _TIE_WORDS:
        return "="
    first = value.split(" ", 1)[0].rstrip(_TRAILING)
    if first in ("a", "b"):
        return first.upper()
    if first in ("1", "2"):
        return "A" if first == "1" else "B"
    return None


def _pref_from_cmp(left: str, op: str, right: str) -> str | None:
    if op.startswith("=") or op == "≈":
        return "=" if left != right else None
    if left == right:
        return None
    winner = left if op.startswith(">") else right
    return winner


def parse_preference(text: str | None, stats: ParseStats | None = None) -> str | None:
    """``"A"``, ``"B"`` or ``"="`` from ``A > B`` / ``B > A`` / ``A < B`` / ``A = B`` (the last one stated),
    an ``<answer>A</answer>`` tag or an ``Answer: B`` / ``Preference: tie`` line; else None, counted.
    """
    stats = stats if stats is not None else ParseStats()
    if not isinstance(text, str) or not text.strip():
        stats.record_malformed("preference", str(text), "empty output")
        return None
    result: str | None = None
    tags = _PREF_TAG.findall(text)
    if tags:
        result = _pref_from_answer(tags[-1])
    if result is None:
        words = _PREF_WORD.findall(text)
        if words:
            result = _pref_from_answer(words[-1])
    if result is None:
        comparisons = _PREF_CMP.findall(text)
        if comparisons:
            result = _pref_from_cmp(*comparisons[-1])
    if result is None:
        stats.record_malformed("preference", text, "no 'A > B', 'B > A', 'A = B' or answer line")
        return None
    stats.record_ok("preference")
    return result


def parse_label(text: str, tag: str = "answer", choices: tuple[str, str] = ("yes", "no"),
                stats: Any = None) -> float | None:
    """1.0 / 0.0 from the answer inside its tag (a choice mentioned elsewhere does not count); else None.

    The label prompt ends with the opening tag, so the completion may start right with the answer
    (``"yes</answer>"``); the generation is stopped at the closing tag, which is put back here.
    """
    text = text or ""
    if f"</{tag}>" not in text and f"<{tag}>" not in text:
        text = f"{text}</{tag}>"
    answer = parse_tag(text, tag, list(choices), stats)
    if answer is None:
        return None
    return 1.0 if answer == choices[0] else 0.0
