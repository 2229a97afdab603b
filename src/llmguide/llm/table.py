"""Answer tables: every question a study's LM will be asked, answered once offline, read by every arm.

A slow LM (Qwen 1.5B answers a few queries a second on this CPU) cannot keep up with a learner: online,
its arm acts on stale answers while the oracle and the knowledge controls are always fresh, and seeds
that run later start from the cache of earlier ones.  A table removes that confound.  It is built from a
data source (a collection run's captions or messages, sampled pairs) by ``llmguide answers``:

1. the method turns the data into the distinct requests it will send (kind ``generate`` or ``score``,
   exactly the payload its code submits), each weighted by how many of the data's steps ask it;
2. the requests are answered most frequent first, by any backend (Qwen, Gemma, the oracle, a knowledge
   control), until ``answers.coverage`` of the steps or ``answers.max_queries`` is reached; the build is
   resumable (answers are committed as they come) and shows a progress bar with an ETA;
3. a run with ``llm.table=PATH`` reads answers only from the table.  A request not in it is a counted
   miss, answered as "nothing" (an empty completion, a score row of :data:`MISS_SCORE`), unless
   ``llm.table_online=true`` asks the configured LM instead, or ``llm.table_fallback=nearest`` answers it with the
   table's own answer to the most similar state it holds (below).

**Equal coverage.**  An arm whose agent learns leaves the collection's states, so with misses answered as
"nothing" the better an LM's answers, the less it is asked (coverage in training fell to 0.38-0.55 for Qwen and
the oracle against 0.62-0.68 for random).  ``llm.table_fallback=nearest`` gives every arm the same declared
fallback: a request the table lacks gets the answer the table holds for the most similar state of the same kind
(word-set Jaccard similarity of the state, read after the request's last ``Caption:`` or else its whole text, to
each row's state; ties to the heavier row).  Each arm so answers every step from *its own* answers, and its
knowledge still decides what it says; ``lm/table_nearest`` counts the fallback answers apart from the exact hits,
so a report shows both coverages.

So every arm of a study reads a table built the same way from the same data: freshness is equal by
construction, seeds are independent, and a study reruns on new seeds without the LM.  The table is one
SQLite file (``meta`` and ``answers``); its meta says which LM answered, with which prompts (hash), from
which data and by which command.  A request's key is the SHA-256 of its canonical JSON, without the model:
the table belongs to one LM.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmguide.core.errors import LLMGuideError
from llmguide.llm.backends.oracle import MISS_SCORE, extract_caption
from llmguide.llm.base import Completion, LanguageModel, canonical_json, check_score_args

FORMAT = "llmguide-answer-table/1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, query TEXT NOT NULL, answer TEXT NOT NULL,
    weight REAL NOT NULL, seconds REAL NOT NULL);
"""


def shown_path(path: str | Path) -> str:
    """A path as a table's meta records it: relative to the working directory when it lies under it (a committed
    table must name no folder of the machine that built it), else as given."""
    path = Path(path).expanduser()
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) if path.is_absolute() else str(path)
    except ValueError:
        return str(path)


def shown_command(words: Sequence[str]) -> str:
    """A command line as a table's meta records it: every ``key=/abs/path`` under the working directory relative."""
    import shlex

    out = []
    for word in words:
        key, sep, value = word.partition("=")
        out.append(f"{key}={shown_path(value)}" if sep and value.startswith("/") else
                   (shown_path(word) if word.startswith("/") else word))
    return " ".join(shlex.quote(w) for w in out)


class AnswerTableError(LLMGuideError):
    """A table file is missing, not a table, or built for other requests."""


@dataclass(frozen=True)
class Query:
    """One distinct request a method will send: ``kind`` and its ``payload`` (what the method submits),
    ``weight`` (the data's steps that ask it) and ``label`` (a short human-readable form: a caption)."""

    kind: str
    payload: dict[str, Any]
    weight: float
    label: str

    @property
    def key(self) -> str:
        return request_key(self.kind, self.payload)


def request_key(kind: str, payload: dict[str, Any]) -> str:
    """The table key of a request: SHA-256 of its canonical JSON (generate: prompt, max_tokens, temperature,
    stop; score: context, candidates, normalize)."""
    if kind == "generate":
        fields = {k: payload.get(k) for k in ("prompt", "max_tokens", "temperature", "stop")}
        fields["stop"] = list(fields["stop"] or [])
    elif kind == "score":
        fields = {"context": payload["context"], "candidates": list(payload["candidates"]),
                  "normalize": bool(payload.get("normalize", False))}
    else:
        raise ValueError(f"unknown request kind {kind!r}")
    return hashlib.sha256(canonical_json({"kind": kind, **fields}).encode()).hexdigest()


class MissRow(list):
    """A score row for a request not in the table (every candidate :data:`MISS_SCORE`); ``is_miss`` tells."""

    table_miss = True


def is_miss(answer: Any) -> bool:
    """True for the answer :class:`TableLM` gives to a request that is not in its table."""
    if isinstance(answer, Completion):
        return bool(answer.meta.get("table_miss"))
    return bool(getattr(answer, "table_miss", False))


# --- the file ----------------------------------------------------------------------------------
class AnswerTable:
    """The SQLite file of a table.  ``readonly``: opened read-only (a run); else created / resumed (a build)."""

    def __init__(self, path: str | Path, readonly: bool = True):
        self.path = Path(path).expanduser()
        self.readonly = readonly
        if readonly:
            if not self.path.is_file():
                raise AnswerTableError(f"answer table {self.path} does not exist (build it with `llmguide answers`)")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.executescript(_SCHEMA)
        try:
            fmt = self.meta().get("format")
        except sqlite3.DatabaseError as err:
            raise AnswerTableError(f"{self.path} is not an answer table ({err})") from None
        if readonly and fmt != FORMAT:
            raise AnswerTableError(f"{self.path} is not an answer table (format {fmt!r}, expected {FORMAT!r})")

    def meta(self) -> dict[str, Any]:
        rows = self._db.execute("SELECT key, value FROM meta").fetchall()
        return {k: json.loads(v) for k, v in rows}

    def set_meta(self, **values: Any) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 [(k, json.dumps(v)) for k, v in values.items()])

    def get(self, key: str) -> tuple[str, Any] | None:
        row = self._db.execute("SELECT kind, answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def keys(self) -> set[str]:
        return {k for (k,) in self._db.execute("SELECT key FROM answers")}

    def put(self, query: Query, answer: Any, seconds: float) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)",
                             (query.key, query.kind, query.label, json.dumps(answer), float(query.weight), seconds))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def seconds(self) -> float:
        """The LM time spent on the table's answers."""
        return float(self._db.execute("SELECT COALESCE(SUM(seconds), 0) FROM answers").fetchone()[0])

    def rows(self) -> list[tuple[str, str, Any, float]]:
        """(kind, query label, answer, weight) of every answer, heaviest first."""
        out = self._db.execute("SELECT kind, query, answer, weight FROM answers ORDER BY weight DESC").fetchall()
        return [(k, q, json.loads(a), w) for k, q, a, w in out]

    def close(self) -> None:
        self._db.close()


def encode_answer(kind: str, value: Any) -> Any:
    """What the table stores of a backend's answer: a completion's text, or a score row (6 significant digits)."""
    if kind == "generate":
        return {"text": value.text}
    return [None if v is None else float(f"{float(v):.6g}") for v in value]


# --- the backend a run reads ---------------------------------------------------------------------
class TableLM(LanguageModel):
    """Answers from an :class:`AnswerTable`; a request not in it is a counted miss (or, with ``online``, asked
    of that LM: a counted online answer)."""

    backend = "table"

    def __init__(self, table: AnswerTable, online: LanguageModel | None = None, fallback: str = "miss"):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        self.table = table
        self.online = online
        meta = table.meta()
        self.model_id = f"table:{meta.get('lm', '?')}"
        self.counts = {"table_hits": 0, "table_misses": 0, "table_online": 0, "table_nearest": 0}
        self.nearest = NearestState(table) if fallback == "nearest" and online is None else None

    def _answers(self, kind: str, payloads: list[dict[str, Any]], ask_online: Any, miss: Any) -> list[Any]:
        """One answer per request ``payloads[i]``: the table's (``decode``d by the caller), else, for every request
        not in it, ``ask_online(indices)`` with an online LM (counted) or ``miss(i)`` (a counted miss)."""
        out: list[Any] = []
        for payload in payloads:
            found = self.table.get(request_key(kind, payload))
            out.append(found[1] if found is not None and found[0] == kind else None)
        missing = [i for i, answer in enumerate(out) if answer is None]
        self.counts["table_hits"] += len(out) - len(missing)
        if missing and self.nearest is not None:
            for i in missing:
                out[i] = self.nearest.answer(kind, payloads[i])
            self.counts["table_nearest"] += sum(out[i] is not None for i in missing)
            missing = [i for i in missing if out[i] is None]
        if missing:
            self.counts["table_online" if self.online is not None else "table_misses"] += len(missing)
            fills = ask_online(missing) if self.online is not None else [miss(i) for i in missing]
            for i, answer in zip(missing, fills, strict=True):
                out[i] = answer
        return out

    def generate(self, prompts: Sequence[str], *, max_tokens: int = 48, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int | None = None) -> list[Completion]:
        payloads = [{"prompt": p, "max_tokens": max_tokens, "temperature": temperature, "stop": stop} for p in prompts]
        answers = self._answers(
            "generate", payloads,
            lambda idx: self.online.generate([prompts[i] for i in idx], max_tokens=max_tokens,
                                             temperature=temperature, stop=stop, seed=seed),
            lambda i: Completion(text="", meta={"table_miss": True}))
        return [Completion(text=a["text"], cached=True, meta={"table": a.get("table", "hit")}) if isinstance(a, dict)
                else a for a in answers]

    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
              normalize: bool = False) -> list[list[float]]:
        check_score_args(contexts, candidates)
        payloads = [{"context": c, "candidates": cands, "normalize": normalize}
                    for c, cands in zip(contexts, candidates, strict=True)]
        return self._answers(
            "score", payloads,
            lambda idx: self.online.score([contexts[i] for i in idx], [candidates[i] for i in idx],
                                          normalize=normalize),
            lambda i: MissRow([MISS_SCORE] * len(candidates[i])))

    def io_stats(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.counts.items()}
        if self.online is not None:
            out.update(self.online.io_stats())
        return out

    def close(self) -> None:
        if self.online is not None:
            self.online.close()
        self.table.close()


FALLBACKS = ("miss", "nearest")   # llm.table_fallback: a request the table lacks
_WORD = re.compile(r"[a-z0-9]+")


def _state_words(text: str) -> frozenset[str]:
    """The words of a request's state: after its last ``Caption:`` line (ELLM's convention), else all of it."""
    return frozenset(_WORD.findall((extract_caption(text) or text).lower()))


class NearestRow(list):
    """A score row answered by the nearest state's (``is_nearest`` tells)."""

    table_nearest = True


def is_nearest(answer: Any) -> bool:
    """True for an answer :class:`TableLM` gave from the nearest state it holds (``llm.table_fallback=nearest``)."""
    if isinstance(answer, Completion):
        return answer.meta.get("table") == "nearest"
    return bool(getattr(answer, "table_nearest", False))


class NearestState:
    """The table's answer to the state most like a request's (see the module docstring), per kind and width."""

    def __init__(self, table: AnswerTable):
        self.rows: dict[tuple[str, int], list[tuple[frozenset[str], Any]]] = {}
        for kind, label, answer, _ in table.rows():   # heaviest first: a tie goes to the heavier state
            width = len(answer) if kind == "score" else 0
            self.rows.setdefault((kind, width), []).append((frozenset(_WORD.findall(str(label).lower())), answer))
        self._memo: dict[tuple[str, frozenset[str], int], Any] = {}

    def answer(self, kind: str, payload: dict[str, Any]) -> Any:
        text = str(payload.get("prompt") if kind == "generate" else payload.get("context"))
        width = len(payload["candidates"]) if kind == "score" else 0
        words = _state_words(text)
        key = (kind, words, width)
        if key not in self._memo:
            best, best_sim = None, -1.0
            for row_words, answer in self.rows.get((kind, width), []):
                sim = len(words & row_words) / len(words | row_words) if words | row_words else 0.0
                if sim > best_sim:
                    best, best_sim = answer, sim
            self._memo[key] = best
        best = self._memo[key]
        if best is None:
            return None
        return {**best, "table": "nearest"} if kind == "generate" else NearestRow(best)


# --- building ---------------------------------------------------------------------------------------
def merge_queries(queries: Iterable[Query]) -> list[Query]:
    """One query per distinct request, weights summed, heaviest first (ties: first seen)."""
    merged: dict[str, Query] = {}
    for q in queries:
        old = merged.get(q.key)
        merged[q.key] = q if old is None else Query(old.kind, old.payload, old.weight + q.weight, old.label)
    return sorted(merged.values(), key=lambda q: -q.weight)


def plan(queries: Sequence[Query], coverage: float = 1.0, max_queries: int | None = None) -> list[Query]:
    """The heaviest queries until they cover ``coverage`` of the total weight, at most ``max_queries``."""
    total = sum(q.weight for q in queries) or 1.0
    out, covered = [], 0.0
    for q in queries:
        if covered / total >= coverage - 1e-12 or (max_queries is not None and len(out) >= max_queries):
            break
        out.append(q)
        covered += q.weight
    return out


def coverage_curve(queries: Sequence[Query], shares: Sequence[float] = (0.5, 0.8, 0.9, 0.95, 0.99)) -> dict[str, int]:
    """How many of the heaviest queries cover each share of the steps (``{"50%": n, ...}``)."""
    total = sum(q.weight for q in queries) or 1.0
    out, covered, n = {}, 0.0, 0
    pending = list(shares)
    for q in queries:
        n += 1
        covered += q.weight
        while pending and covered / total >= pending[0] - 1e-12:
            out[f"{round(pending.pop(0) * 100)}%"] = n
    for share in pending:
        out[f"{round(share * 100)}%"] = n
    return out


def build_table(lm: LanguageModel, queries: Sequence[Query], out: str | Path, *, meta: dict[str, Any],
                coverage: float = 1.0, max_queries: int | None = None, batch: int = 8,
                progress: bool = True) -> dict[str, Any]:
    """Answer the heaviest ``queries`` with ``lm`` into the table at ``out`` (resumed when it exists: answered
    requests are skipped); returns a summary (queries, answered, step coverage of data and table, seconds).

    ``meta`` must name the LM and prompt; a table built for another LM or prompt is refused, not mixed."""
    queries = merge_queries(queries)
    table = AnswerTable(out, readonly=False)
    old = table.meta()
    for field in ("lm", "prompt_sha256", "method"):
        if field in old and field in meta and old[field] != meta[field]:
            table.close()
            raise AnswerTableError(f"{out} was built with {field}={old[field]!r}, not {meta[field]!r}; "
                                   "write another table (answers.out=...)")
    table.set_meta(format=FORMAT, **meta, queries_in_data=len(queries),
                   steps_in_data=sum(q.weight for q in queries), coverage_curve=coverage_curve(queries))
    todo_all = plan(queries, coverage, max_queries)
    done = table.keys()
    todo = [q for q in todo_all if q.key not in done]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo_all), initial=len(todo_all) - len(todo), desc="answers", unit="q")
    started = time.monotonic()
    try:
        for i in range(0, len(todo), batch):
            chunk = todo[i : i + batch]
            t0 = time.monotonic()
            by_kind: dict[str, list[Query]] = {}
            for q in chunk:
                by_kind.setdefault(q.kind, []).append(q)
            for kind, qs in by_kind.items():
                if kind == "generate":
                    p = qs[0].payload
                    res = lm.generate([q.payload["prompt"] for q in qs], max_tokens=int(p["max_tokens"]),
                                      temperature=float(p.get("temperature") or 0.0), stop=p.get("stop"))
                else:
                    res = lm.score([q.payload["context"] for q in qs], [q.payload["candidates"] for q in qs],
                                   normalize=bool(qs[0].payload.get("normalize", False)))
                seconds = (time.monotonic() - t0) / len(qs)
                for q, value in zip(qs, res, strict=True):
                    if kind == "generate" and getattr(value, "error", None):
                        raise AnswerTableError(f"the LM failed on a query ({value.error}); the table keeps "
                                               f"{len(table)} answers, run the command again to resume")
                    table.put(q, encode_answer(kind, value), seconds)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
        answered = table.keys()
        total = sum(q.weight for q in queries) or 1.0
        summary = {"queries_in_data": len(queries), "answered": len(answered),
                   "coverage_of_data_steps": sum(q.weight for q in queries if q.key in answered) / total,
                   "coverage_curve": coverage_curve(queries), "seconds": time.monotonic() - started,
                   "path": shown_path(out)}
        table.set_meta(build_summary=summary)
        table.close()
    return summary


def shuffle_table(source: str | Path, out: str | Path, seed: int) -> dict[str, Any]:
    """A knowledge control from a built table: ``out`` holds the same requests as ``source`` with the answers
    permuted among them (uniformly over rows of the same kind and, for score rows, the same number of candidates;
    ``seed`` draws the permutation).  The answers' marginal distribution (an LM's yes-rate, its favourite goals) is
    kept; their relation to the request is not.  The meta is the source's (the same LM and prompt: a run reads it
    in place of the source) plus ``shuffled_from`` and ``shuffle_seed``.  Returns the rows written and moved."""
    import random

    src = AnswerTable(source)
    try:
        meta = src.meta()
        rows = src._db.execute("SELECT key, kind, query, answer, weight, seconds FROM answers ORDER BY key").fetchall()
    finally:
        src.close()
    groups: dict[tuple[str, int], list[int]] = {}
    for i, (_, kind, _, answer, _, _) in enumerate(rows):
        width = len(json.loads(answer)) if kind == "score" else 0
        groups.setdefault((kind, width), []).append(i)
    rng = random.Random(seed)
    answers = [row[3] for row in rows]
    for members in groups.values():
        drawn = [answers[i] for i in members]
        rng.shuffle(drawn)
        for i, answer in zip(members, drawn, strict=True):
            answers[i] = answer
    out = Path(out).expanduser()
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    table = AnswerTable(tmp, readonly=False)
    try:
        with table._db:
            table._db.executemany("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?)",
                                  [(k, kind, q, a, w, sec) for (k, kind, q, _, w, sec), a in zip(rows, answers, strict=True)])
        table.set_meta(**meta, shuffled_from=shown_path(source), shuffle_seed=int(seed))
    finally:
        table.close()
    tmp.replace(out)
    return {"rows": len(rows), "moved": sum(a != row[3] for a, row in zip(answers, rows, strict=True)), "path": str(out)}


def open_table_lm(path: str | Path, online: LanguageModel | None = None, fallback: str = "miss") -> TableLM:
    """A :class:`TableLM` over the table file ``path`` (read-only); ``fallback``: what a request it lacks gets."""
    return TableLM(AnswerTable(path, readonly=True), online=online, fallback=fallback)
