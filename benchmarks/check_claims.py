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

- a signed number (``+0.111``, ``−0.001``) is a difference: the mean of a comparison. An interval that follows
  it (``range [+0.011, +0.231]``) and a p-value (``p 0.087``, ``p < 0.001``) must belong to the same
  comparison, unless an unsigned number comes between them;
- an unsigned number (``0.419``) is an arm's mean, min or max, or another number of the JSON files;
- a p-value with no difference before it is any comparison's p-value.

Not checked: integers (seed counts, steps), numbers followed by a unit (``%``, ``s``, ``×``, ``GB`` ...),
numbers in code spans, and claims that cite no study. So the check says that a claim's numbers are its study's
(and its differences, intervals and p-values one comparison's), not that they belong to the arms it names.

``python benchmarks/check_claims.py [FILE ...]`` (default: README.md and docs/*.md) prints each claim whose
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

ROOT = Path(__file__).resolve().parents[1]
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


@dataclass(frozen=True)
class Comparison:
    """One paired difference between two arms of a study."""

    mean: float
    low: float
    high: float
    t_low: float
    t_high: float
    p: float | None


@dataclass
class Numbers:
    values: list[float] = field(default_factory=list)
    pvalues: list[float] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    def add(self, other: Numbers) -> None:
        self.values += other.values
        self.pvalues += other.pvalues
        self.comparisons += other.comparisons


@dataclass
class Claim:
    file: Path
    line: int
    text: str
    links: list[str]


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


def _comparison(treatment: dict, control: dict) -> Comparison | None:
    seeds = sorted(set(treatment) & set(control))
    if len(seeds) < 2:
        return None
    d = np.array([treatment[s] - control[s] for s in seeds], dtype=float)
    mean, p, half = float(d.mean()), None, 0.0
    if d.std() > 0:
        p = float(stats.ttest_1samp(d, 0.0).pvalue)
        half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return Comparison(mean, float(d.min()), float(d.max()), mean - half, mean + half, p)


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
        if (c := _comparison(per_seed[a], per_seed[b])) is not None:
            out.comparisons.append(c)
    return out


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
    fenced = False

    def flush() -> None:
        nonlocal caption
        if not paragraph:
            return
        text = " ".join(t for _, t in paragraph)
        caption = [m.group(2) for m in LINK.finditer(text)]
        for sentence in SENTENCE_END.split(text):
            own = [m.group(2) for m in LINK.finditer(sentence)]
            out.append(Claim(doc, paragraph[0][0], sentence, own or caption))
        paragraph.clear()

    for number, line in enumerate(doc.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fenced = not fenced
        elif fenced:
            continue
        elif stripped.startswith("|"):
            flush()
            out.append(Claim(doc, number, stripped, [m.group(2) for m in LINK.finditer(stripped)] or caption))
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


def _record_ok(r: _Record, numbers: Numbers) -> bool:
    for c in numbers.comparisons:
        if not r.diff.matches(c.mean):
            continue
        if r.interval and not any(
            r.interval[0].matches(lo) and r.interval[1].matches(hi)
            for lo, hi in ((c.low, c.high), (c.t_low, c.t_high))
        ):
            continue
        if r.p and not _p_ok(*r.p, c.p):
            continue
        return True
    if numbers.comparisons:
        return False
    # a JSON file without arms: each number on its own
    ends = r.interval or ()
    return all(any(q.matches(v) for v in numbers.values) for q in (r.diff, *ends)) and (
        r.p is None or any(_p_ok(*r.p, p) for p in numbers.pvalues)
    )


def _any_p(bound: str | None, q: Quoted, numbers: Numbers) -> bool:
    return any(_p_ok(bound, q, p) for p in [*numbers.pvalues, *(c.p for c in numbers.comparisons)])


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
            if not _record_ok(record, numbers):
                problems.append(f"{record.text()}: no comparison of the cited study has these numbers")

    text = LINK.sub(lambda m: m.group(1), CODE.sub(" ", claim.text))
    for m in TOKEN.finditer(text):
        if m["p"]:
            q = Quoted.parse("", m["p"])
            if record is not None and record.p is None and not unsigned_since:
                record.p = (m["bound"], q)
            else:
                checked += 1
                if not _any_p(m["bound"], q, numbers):
                    problems.append(f"p {m['bound'] or ''}{m['p']} is not a p-value of the cited study")
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
    total, problems = check(files)
    for line in problems:
        print(line)
    print(f"check_claims: {total} numbers checked in {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
