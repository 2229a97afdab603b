"""Check that the README and docs quote only numbers their cited studies hold.

A *claim* is one table row or one sentence of README.md or docs/*.md that cites a study result under
``benchmarks/results/`` by a Markdown link (to its ``report.md``, its folder, its ``result.json`` or another
JSON file of its folder). A sentence without a link of its own cites the links of its paragraph (a list item
is a paragraph), and a table row without one cites the links of the paragraph just above its table.

A study's numbers come from the per-seed values of its ``result.json``: each arm's mean, min and max, and one
*comparison* per ordered pair of arms (the paired difference over the seeds both ran: its mean, min, max, t
95 % interval and t-test p-value); the smallest detectable differences of its ``paired`` entries; and every
other number of the JSON files (arms, ``paired``, curves and per-seed values left out). Every number a claim
quotes must be one of them, to the precision printed:

- a signed number (``+0.111``, ``−0.001``) is a difference: the mean of a comparison **between two arms the
  claim names**. An interval that follows it (``range [+0.011, +0.231]``) and a p-value (``p 0.087``,
  ``p < 0.001``) must belong to the same comparison, unless an unsigned number comes between them;
- an unsigned number (``0.419``) is an arm's mean, min or max, or another number of the JSON files;
- a *bare* p-value (no difference before it, or an unsigned number between) must be the p-value of a comparison
  between two arms the claim names: quote the difference it belongs to, or name both arms.

**Which arms a claim names** (:class:`Naming`): a sentence, or a table row with its table's header row, names
an arm of a cited study when it holds the arm's name (``oni_retrieval-constant``, in a code span too) or its key
words that tell it from the other arm of the comparison: the words of its name (split at ``-`` and ``_``,
without the words most of the study's arms share, such as the method's ``oni_retrieval``, and without words with
digits, such as ``coef10``) that the other arm's name lacks, each written as itself, as a word's start
(``shuffled`` -> ``shuffle``, ``oracle's``) or as a synonym of :data:`SYNONYMS` (``constant``: "every message
helpful"; ``matched``: "at its rate"; ``phi``: Φ, "potential"; ``code``: "program"; ``embedded``: Gemma). A
sentence's naming text is the sentence and the ones before it in its paragraph ("It is +0.111 over random Φ").
One side may go unnamed when it is the study's control (the arm its paired differences are against; in a
two-arm study, either arm) and the claim names no third arm: "Constant +0.075" in a study against
random-matched. So "the oracle beats random labels at its rate by +0.141" fails when +0.141 is oracle − constant
(random labels are a third arm), and passes as "oracle − every-message-helpful +0.141". The paired differences a study stores in its ``details`` (per
measure) are named by their measure, not by arms: their arms are not checked.

Not checked: integers (seed counts, steps), numbers followed by a unit (``%``, ``s``, ``×``, ``GB`` ...),
numbers in code spans, and claims that cite no study.

``python benchmarks/analyses/check_claims.py [FILE ...]`` (default: README.md and docs/*.md) prints each claim whose
numbers are not found and exits 1; ``tests/test_docs.py`` runs the check in ``make test``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`]*`")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[*`_])")
_NUM = r"[+\-−]?\d+\.\d+"
_UNIT = r"(?:%|×|x\b|s\b|ms\b|min\b|h\b|[KMG]i?B\b|tokens?\b|bits?\b|nats?\b|candidates\b|steps\b|seeds?\b)"
TOKEN = re.compile(
    rf"\bp\s*(?:=\s*)?(?P<bound><|≤)?\s*(?P<p>\d*\.\d+(?:e-?\d+)?|\d+e-\d+)(?!\d)"  # a p-value
    rf"|\[\s*(?P<low>{_NUM})\s*,\s*(?P<high>{_NUM})\s*\]"  # an interval
    rf"|(?<![\w.])(?P<sign>[+\-−]?)(?P<number>\d+\.\d+)(?!\d|\.\d|[A-Za-z_])(?!\s*{_UNIT})",  # a number
    re.I,
)
SKIP = {"arms", "paired", "curve", "values", "seeds", "differences"}  # arms and paired: as comparisons


# words a claim writes for an arm's key word (a regular expression each, matched at a word's start, any case)
SYNONYMS = {
    "constant": [r"constant", r"every[- ]message[- ]helpful", r"always[- ]helpful", r"all[- ]helpful"],
    "matched": [r"match", r"(?:at|with) (?:the oracle'?s?|its|their|the same|a matched) (?:positive )?rate",
                r"rate[- ]matched"],
    "phi": [r"phi", r"Φ", r"φ", r"potential"],
    "code": [r"code", r"program"],
    "embedded": [r"embedd", r"gemma"],
    "no": [r"no\b", r"without", r"none\b"],
}


@dataclass(frozen=True)
class Comparison:
    """One paired difference between two arms of a study: ``a`` − ``b`` (both "" for a stored per-measure one)."""

    mean: float
    low: float
    high: float
    t_low: float
    t_high: float
    p: float | None
    a: str = ""
    b: str = ""
    study: str = ""

    def label(self) -> str:
        return f"{self.a} − {self.b}" if self.a else "a stored per-measure difference"


@dataclass(frozen=True)
class Arms:
    """The arms of one cited study and its control."""

    names: tuple[str, ...]
    control: str | None


@dataclass
class Numbers:
    values: list[float] = field(default_factory=list)
    pvalues: list[float] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    arms: dict[str, Arms] = field(default_factory=dict)   # study (its result.json) -> its arms

    def add(self, other: Numbers) -> None:
        self.values += other.values
        self.pvalues += other.pvalues
        self.comparisons += other.comparisons
        self.arms |= other.arms


@dataclass
class Claim:
    file: Path
    line: int
    text: str
    links: list[str]
    context: str = ""   # text that names arms for it: a row's table header, a sentence's paragraph before it


@dataclass
class Quoted:
    """A number as printed: its value and the half-width of its last printed digit."""

    text: str
    value: float
    tol: float

    @classmethod
    def parse(cls, sign: str, digits: str) -> Quoted:
        mantissa, _, exponent = digits.lower().partition("e")
        decimals = len(mantissa.partition(".")[2])
        tol = 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0)) + 1e-12
        value = float(digits) * (-1.0 if sign in ("-", "−") else 1.0)
        return cls(f"{sign}{digits}", value, tol)

    def matches(self, x: float | None) -> bool:
        return x is not None and abs(x - self.value) <= self.tol


def _leaves(obj, key: str, out: Numbers) -> None:
    """Every finite number of a JSON value but those under SKIP; those under ``p``/``*_p`` are p-values too."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in SKIP:
                _leaves(v, str(k), out)
    elif isinstance(obj, list):
        for v in obj:
            _leaves(v, key, out)
    elif isinstance(obj, int | float) and not isinstance(obj, bool) and math.isfinite(obj):
        out.values.append(float(obj))
        if key == "p" or key.endswith("_p") or key.startswith("p_"):
            out.pvalues.append(float(obj))


def _stored(obj, out: Numbers) -> None:
    """The paired differences a study stored beyond its main metric (``details``: per-achievement or other
    measures, each as :func:`llmguide.stats.paired`'s JSON: ``mean``, ``low``/``high``, ``t_low``/``t_high``,
    ``p``) are comparisons too."""
    if isinstance(obj, dict):
        if isinstance(obj.get("mean"), int | float) and "p" in obj and ("low" in obj or "t_low" in obj):
            def num(key: str) -> float:
                v = obj.get(key)
                return float(v) if isinstance(v, int | float) else math.nan

            out.comparisons.append(Comparison(float(obj["mean"]), num("low"), num("high"), num("t_low"),
                                              num("t_high"), obj["p"] if isinstance(obj["p"], int | float) else None))
        for v in obj.values():
            _stored(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _stored(v, out)


def _comparison(treatment: dict, control: dict, names: tuple[str, str] = ("", ""), study: str = "") -> Comparison | None:
    seeds = sorted(set(treatment) & set(control))
    if len(seeds) < 2:
        return None
    d = np.array([treatment[s] - control[s] for s in seeds], dtype=float)
    mean, p, half = float(d.mean()), None, 0.0
    if d.std() > 0:
        p = float(stats.ttest_1samp(d, 0.0).pvalue)
        half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return Comparison(mean, float(d.min()), float(d.max()), mean - half, mean + half, p, *names, study)


@cache
def study_numbers(path: Path) -> Numbers:
    """The numbers of a ``result.json`` or of any other JSON file (see the module docstring)."""
    data = json.loads(path.read_text())
    out = Numbers()
    _leaves(data, "", out)
    _stored({k: v for k, v in data.items() if k not in SKIP} if isinstance(data, dict) else data, out)
    arms = data.get("arms") if isinstance(data, dict) else None
    if not isinstance(arms, dict):
        return out
    for entry in (data.get("paired") or {}).values():  # "5 seeds detect 0.06"
        if isinstance(entry, dict) and isinstance(entry.get("detectable_difference"), int | float):
            out.values.append(float(entry["detectable_difference"]))
    per_seed = {}
    for name, arm in arms.items():
        if isinstance(arm, dict) and arm.get("values"):
            values = [float(v) for v in arm["values"]]
            out.values += [float(np.mean(values)), min(values), max(values)]
            per_seed[name] = dict(zip(arm.get("seeds", range(len(values))), values, strict=False))
    for a, b in itertools.permutations(per_seed, 2):
        if (c := _comparison(per_seed[a], per_seed[b], (a, b), str(path))) is not None:
            out.comparisons.append(c)
    control = data.get("control")
    out.arms[str(path)] = Arms(tuple(arms), control if isinstance(control, str) else None)
    return out


# --- which arms a claim names -------------------------------------------------------------------------
def _words(arm: str) -> list[str]:
    return [w for w in re.split(r"[-_]", arm.lower()) if w]


def key_words(arms: tuple[str, ...]) -> dict[str, list[str]]:
    """Each arm's key words: its name's words without those most of the study's arms share (the method's) and
    without words holding digits (``coef10``, ``s0``); all its words when that leaves none."""
    words = {a: _words(a) for a in arms}
    shared = {w for w in {w for ws in words.values() for w in ws} if 2 * sum(w in ws for ws in words.values()) > len(arms)}
    out = {}
    for arm, ws in words.items():
        key = [w for w in ws if w not in shared and not re.search(r"\d", w)]
        out[arm] = key or [w for w in ws if not re.search(r"\d", w)] or ws
    return out


@cache
def _word_pattern(word: str) -> re.Pattern[str]:
    own = re.escape(word[:6]) if len(word) > 6 else re.escape(word) + (r"\b" if len(word) <= 3 else "")
    forms = [*SYNONYMS.get(word, []), own]
    return re.compile(r"(?<![\w])(?:" + "|".join(forms) + ")", re.I)


@dataclass
class Naming:
    """Which arms of one study a claim's text names (module docstring)."""

    arms: Arms
    key: dict[str, list[str]]
    words: set[str]          # the key words the text names
    text: str

    @classmethod
    def of(cls, arms: Arms, text: str) -> Naming:
        key = key_words(arms.names)
        return cls(arms, key, {w for ws in key.values() for w in ws if _word_pattern(w).search(text)}, text.lower())

    def _by(self, arm: str, unlike: tuple[str, ...]) -> bool:
        """The text holds ``arm``'s name, or a key word of it that none of ``unlike`` has."""
        own = [w for w in self.key.get(arm, []) if not any(w in self.key.get(u, []) for u in unlike)]
        whole = re.search(rf"(?<![\w-]){re.escape(arm.lower())}(?![\w-])", self.text)   # "ppo", not "support"
        return bool(whole) or any(w in self.words for w in own or self.key.get(arm, []))

    def side(self, arm: str, other: str) -> bool:
        """``arm`` is named as one side of a comparison with ``other``: by a word that tells it from ``other``
        (``shuffled`` for qwen-shuffled against qwen), or left unnamed as the study's control (in a two-arm study:
        the other arm) while the text names no third arm."""
        if self._by(arm, (other,)):
            return True
        unnamed_ok = len(self.arms.names) == 2 or arm == self.arms.control
        return unnamed_ok and not any(self._by(c, (arm, other)) for c in self.arms.names if c not in (arm, other))

    def pair(self, a: str, b: str) -> bool:
        return self.side(a, b) and self.side(b, a)


def sources(link: str, doc: Path) -> list[Path] | None:
    """The JSON files a link into ``benchmarks/results`` cites; None for a link elsewhere."""
    target = link.split("#")[0]
    if not target or re.match(r"[a-z]+:", target):
        return None
    path = (doc.parent / target).resolve()
    if not path.is_relative_to(RESULTS):
        return None
    folder = path if path.is_dir() else path.parent
    found = [folder / "result.json"] if (folder / "result.json").is_file() else []
    if path.suffix == ".json" and path.name != "result.json" and path.is_file():
        found.append(path)
    return found


def claims(doc: Path) -> list[Claim]:
    """The table rows and sentences of a Markdown file, each with the links it cites (fenced code skipped)."""
    out: list[Claim] = []
    paragraph: list[tuple[int, str]] = []
    caption: list[str] = []  # the links of the last paragraph, for a table below it
    header: str | None = None  # the header row of the table being read
    fenced = False

    def flush() -> None:
        nonlocal caption
        if not paragraph:
            return
        text = " ".join(t for _, t in paragraph)
        caption = [m.group(2) for m in LINK.finditer(text)]
        before = ""   # the sentences before it: "it" in "It is +0.111 over random Φ" is named there
        for sentence in SENTENCE_END.split(text):
            own = [m.group(2) for m in LINK.finditer(sentence)]
            out.append(Claim(doc, paragraph[0][0], sentence, own or caption, before))
            before += " " + sentence
        paragraph.clear()

    for number, line in enumerate(doc.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith("|"):
            header = None
        if stripped.startswith("```"):
            flush()
            fenced = not fenced
        elif fenced:
            continue
        elif stripped.startswith("|"):
            flush()
            header = stripped if header is None else header
            out.append(Claim(doc, number, stripped, [m.group(2) for m in LINK.finditer(stripped)] or caption,
                             "" if header == stripped else header))
        elif not stripped or stripped.startswith("#"):
            flush()
            if stripped:
                caption = []
        else:
            if re.match(r"([-*]|\d+\.)\s", stripped):
                flush()
            paragraph.append((number, stripped))
    flush()
    return out


@dataclass
class _Record:
    """A difference and the interval and p-value quoted after it."""

    diff: Quoted
    interval: tuple[Quoted, Quoted] | None = None
    p: tuple[str | None, Quoted] | None = None

    def size(self) -> int:
        return 1 + 2 * (self.interval is not None) + (self.p is not None)

    def text(self) -> str:
        parts = [self.diff.text]
        if self.interval:
            parts.append(f"[{self.interval[0].text}, {self.interval[1].text}]")
        if self.p:
            parts.append(f"p {self.p[0] or ''}{self.p[1].text}")
        return " ".join(parts)


def _p_ok(bound: str | None, q: Quoted, p: float | None) -> bool:
    return p is not None and (p < q.value if bound else q.matches(p))


def _names(c: Comparison, named: dict[str, Naming]) -> bool:
    """Whether the claim names both arms of ``c`` (a stored per-measure difference: named by its measure)."""
    return not c.a or c.study in named and named[c.study].pair(c.a, c.b)


def _record_matches(r: _Record, c: Comparison) -> bool:
    if not r.diff.matches(c.mean):
        return False
    if r.interval and not any(
        r.interval[0].matches(lo) and r.interval[1].matches(hi)
        for lo, hi in ((c.low, c.high), (c.t_low, c.t_high))
    ):
        return False
    return not r.p or _p_ok(*r.p, c.p)


def _record_problem(r: _Record, numbers: Numbers, named: dict[str, Naming]) -> str | None:
    """None when a comparison between two arms the claim names has the record's numbers, else the problem."""
    matching = [c for c in numbers.comparisons if _record_matches(r, c)]
    if any(_names(c, named) for c in matching):
        return None
    if matching:
        return (f"{r.text()}: no comparison between arms this claim names has these numbers; they are "
                f"{' or '.join(sorted({c.label() for c in matching}))} (name both arms)")
    if numbers.comparisons or not _values_ok(r, numbers):
        return f"{r.text()}: no comparison of the cited study has these numbers"
    return None


def _values_ok(r: _Record, numbers: Numbers) -> bool:
    # a JSON file without arms: each number on its own
    ends = r.interval or ()
    return all(any(q.matches(v) for v in numbers.values) for q in (r.diff, *ends)) and (
        r.p is None or any(_p_ok(*r.p, p) for p in numbers.pvalues)
    )


def _bare_p_problem(bound: str | None, q: Quoted, numbers: Numbers, named: dict[str, Naming]) -> str | None:
    """A p-value with no difference before it: a comparison's between two arms the claim names (in a JSON file
    without arms: any p-value of it)."""
    text = f"p {bound or ''}{q.text}"
    if not numbers.comparisons:
        return None if any(_p_ok(bound, q, p) for p in numbers.pvalues) else f"{text} is not a p-value of the cited study"
    matching = [c for c in numbers.comparisons if _p_ok(bound, q, c.p)]
    if any(_names(c, named) for c in matching):
        return None
    if matching:
        return (f"{text} follows no difference, and no comparison between arms this claim names has it: quote "
                "the difference it belongs to, or name both arms")
    return f"{text} is not a p-value of the cited study"


def check_claim(claim: Claim) -> tuple[int, list[str]]:
    """(numbers checked, problems) for one claim."""
    numbers, problems, cited = Numbers(), [], False
    for link in claim.links:
        files = sources(link, claim.file)
        if files is None:
            continue
        cited = True
        if not files and not (claim.file.parent / link.split("#")[0]).exists():
            problems.append(f"link to a missing result: {link}")
        for f in files or []:
            numbers.add(study_numbers(f))
    if not cited or not (numbers.values or numbers.comparisons):
        return 0, problems

    checked = 0
    record: _Record | None = None
    unsigned_since = False  # an unsigned number came after the record's difference

    def close() -> None:
        nonlocal checked
        if record is not None:
            checked += record.size()
            if (problem := _record_problem(record, numbers, named)) is not None:
                problems.append(problem)

    naming = LINK.sub(lambda m: m.group(1), f"{claim.text} {claim.context}")
    named = {study: Naming.of(arms, naming) for study, arms in numbers.arms.items()}
    text = LINK.sub(lambda m: m.group(1), CODE.sub(" ", claim.text))
    for m in TOKEN.finditer(text):
        if m["p"]:
            q = Quoted.parse("", m["p"])
            if record is not None and record.p is None and not unsigned_since:
                record.p = (m["bound"], q)
            else:
                checked += 1
                if (problem := _bare_p_problem(m["bound"], q, numbers, named)) is not None:
                    problems.append(problem)
        elif m["low"]:
            ends = tuple(Quoted.parse(*re.match(r"([+\-−]?)(.*)", e).groups()) for e in (m["low"], m["high"]))
            if record is not None and record.interval is None and record.p is None and not unsigned_since:
                record.interval = ends
            else:
                for q in ends:
                    checked += 1
                    if not any(q.matches(v) for v in numbers.values):
                        problems.append(
                            f"[{q.text}] is not an arm's range end or a number of the cited study"
                        )
        elif m["sign"]:
            close()
            record, unsigned_since = _Record(Quoted.parse(m["sign"], m["number"])), False
        else:
            q = Quoted.parse("", m["number"])
            checked += 1
            unsigned_since = True
            if not any(q.matches(v) for v in numbers.values):
                problems.append(f"{q.text} is not an arm's mean, min or max or a number of the cited study")
    close()
    return checked, problems


def check(files: list[Path]) -> tuple[int, list[str]]:
    """(numbers checked, one line per problem: ``file:line: problem | claim``)."""
    total, problems = 0, []
    for doc in files:
        for claim in claims(doc):
            n, found = check_claim(claim)
            total += n
            where = claim.file.relative_to(ROOT) if claim.file.is_relative_to(ROOT) else claim.file
            problems += [f"{where}:{claim.line}: {p} | {claim.text[:160]}" for p in found]
    return total, problems


def default_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md, docs/*.md)")
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.files] or default_files()
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        print(f"check_claims: no such Markdown file: {', '.join(missing)}", file=sys.stderr)
        return 2
    total, problems = check(files)
    for line in problems:
        print(line)
    print(f"check_claims: {total} numbers checked in {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
