"""LLMCache (SQLite WAL, kill -9 safe, shared by processes), CachedLM and the `llmguide cache` verb."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from llmguide.cli import main
from llmguide.llm.base import Completion, LanguageModel
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.cli import cache_command
from llmguide.llm.cache.store import LLMCache

CORPUS = (
    "you see a tree. collect wood. you see water. collect drink. you see a cow. eat cow. "
    "place table near the tree. make wood pickaxe at the table. collect stone with the pickaxe. "
)


class NGramLM(LanguageModel):
    """A real, tiny, deterministic language model: character bigrams with add-one smoothing.

    One token = one character.  Greedy decoding at temperature 0, seeded sampling otherwise.
    It counts its own calls so tests can check what reached the backend.  ``gate`` (an Event), when
    set up, makes every call wait for it: a slow server under the tester's control.
    """

    backend = "ngram"
    model_id = "char-bigram-v1"

    def __init__(self, corpus: str = CORPUS):
        self.alphabet = sorted(set(corpus) | set("abcdefghijklmnopqrstuvwxyz .,!?-\n"))
        pairs = Counter(zip(corpus, corpus[1:], strict=False))
        firsts = Counter(corpus[:-1])
        v = len(self.alphabet)
        self.logp = {a: {b: math.log((pairs[(a, b)] + 1) / (firsts[a] + v)) for b in self.alphabet}
                     for a in self.alphabet}
        self.calls = 0
        self.prompts_seen: list[str] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def _enter(self, prompts: Sequence[str]) -> None:
        with self._lock:
            self.calls += 1
            self.prompts_seen.extend(prompts)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)

    def _cond(self, prev: str) -> dict[str, float]:
        return self.logp.get(prev.lower(), self.logp[" "])

    def generate(self, prompts, *, max_tokens=48, temperature=0.0, stop=None, seed=None):
        import random

        self._enter(prompts)
        out = []
        for prompt in prompts:
            if not prompt:
                out.append(Completion(text="", error="empty prompt"))
                continue
            rng = random.Random(seed)
            prev, text = prompt[-1], ""
            for _ in range(max_tokens):
                dist = self._cond(prev)
                if temperature <= 0:
                    prev = max(dist, key=lambda c: (dist[c], c))
                else:
                    weights = [math.exp(lp / temperature) for lp in dist.values()]
                    prev = rng.choices(list(dist), weights)[0]
                text += prev
                if stop and any(s in text for s in stop):
                    text = text[: min(text.index(s) for s in stop if s in text)]
                    break
            out.append(Completion(text=text, prompt_tokens=len(prompt), completion_tokens=len(text),
                                  finish_reason="length"))
        return out

    def score(self, contexts, candidates, *, normalize=False):
        self._enter(contexts)
        result = []
        for context, cands in zip(contexts, candidates, strict=True):
            row = []
            for cand in cands:
                prev, total = (context[-1] if context else " "), 0.0
                for ch in cand:
                    total += self._cond(prev).get(ch.lower(), math.log(1e-6))
                    prev = ch
                row.append(total / max(1, len(cand)) if normalize else total)
            result.append(row)
        return result


# ---------------------------------------------------------------- keys, WAL, persistence


def test_key_changes_with_each_component_and_is_canonical():
    base = dict(backend="http", model_id="gemma", template_version="ellm_goals@1", kind="generate",
                payload={"prompt": "Caption: x", "max_tokens": 48, "temperature": 0.0, "stop": ["\n\n"], "seed": None})
    k0 = LLMCache.key(**base)
    variants = [
        {"backend": "embedded"}, {"model_id": "gemma-2"}, {"template_version": "ellm_goals@2"}, {"kind": "score"},
        {"payload": {**base["payload"], "prompt": "Caption: y"}},
        {"payload": {**base["payload"], "max_tokens": 49}},
        {"payload": {**base["payload"], "temperature": 0.1}},
        {"payload": {**base["payload"], "stop": ["\n"]}},
        {"payload": {**base["payload"], "seed": 1}},
    ]
    keys = {LLMCache.key(**{**base, **v}) for v in variants}
    assert len(keys) == len(variants) and k0 not in keys
    # canonical: dict order, tuples vs lists and 0 vs 0.0 do not matter
    same = {"seed": None, "stop": ("\n\n",), "temperature": 0, "max_tokens": 48.0, "prompt": "Caption: x"}
    assert LLMCache.key(**{**base, "payload": same}) == k0
    assert len(k0) == 64


def test_wal_roundtrip_stats_and_reopen(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = LLMCache(path)
    assert cache.journal_mode == "wal"
    k = cache.key("ngram", "m1", "v0", "generate", {"prompt": "p"})
    assert cache.get(k) is None
    cache.put(k, {"text": "héllo", "n": 1}, {"backend": "ngram", "model_id": "m1", "kind": "generate"})
    assert cache.get(k) == {"text": "héllo", "n": 1}
    cache.put(cache.key("ngram", "m2", "v0", "score", {"c": 1}), {"scores": [-1.5]},
              {"backend": "ngram", "model_id": "m2", "kind": "score"})
    s = cache.stats()
    assert s["entries"] == 2 and s["hits"] == 1 and s["misses"] == 1 and s["hit_rate"] == 0.5
    assert s["per_model"] == {"ngram/m1": 1, "ngram/m2": 1} and s["per_kind"] == {"generate": 1, "score": 1}
    assert s["size_bytes"] > 0
    cache.close()
    again = LLMCache(path)  # a later run: entries and persistent counters are still there
    assert again.get(k) == {"text": "héllo", "n": 1}
    s2 = again.stats()
    assert s2["hits"] == 2 and s2["misses"] == 1 and s2["process_hits"] == 1 and s2["process_misses"] == 0
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()


def test_bad_values_are_rejected_before_writing(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    with pytest.raises(ValueError):
        cache.put("k", {"scores": [float("nan")]})
    assert len(cache) == 0


WRITER = textwrap.dedent("""
    import sys
    from llmguide.llm.cache.store import LLMCache
    cache = LLMCache(sys.argv[1])
    tag = sys.argv[2]
    limit = int(sys.argv[3])
    i = 0
    while limit < 0 or i < limit:
        cache.put(f"{tag}-{i}", {"i": i, "tag": tag, "text": "x" * (i % 97)}, {"backend": tag, "model_id": "m"})
        print(i, flush=True)   # printed only after put() returned, i.e. committed
        i += 1
""")


def _spawn_writer(path: Path, tag: str, limit: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(limit)],
                            stdout=subprocess.PIPE, text=True)


def test_survives_kill_9_mid_write(tmp_path):
    path = tmp_path / "kill.sqlite"
    proc = _spawn_writer(path, "w", -1)
    committed = []
    for line in proc.stdout:  # type: ignore[union-attr]
        committed.append(int(line))
        if len(committed) >= 300:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    cache = LLMCache(path)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for i in committed:  # every committed entry reads back intact
        assert cache.get(f"w-{i}") == {"i": i, "tag": "w", "text": "x" * (i % 97)}
    assert len(cache) >= len(committed)
    cache.put("after", {"ok": True})  # and the file is writable again
    assert cache.get("after") == {"ok": True}
    cache.close()


def test_two_processes_share_one_file(tmp_path):
    path = tmp_path / "shared.sqlite"
    parent = LLMCache(path)
    parent.put("from-parent", {"v": 42})
    procs = [_spawn_writer(path, tag, 150) for tag in ("a", "b")]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and out.split()[-1] == "149"
    assert len(parent) == 301
    assert parent.get("a-149") == {"i": 149, "tag": "a", "text": "x" * (149 % 97)}
    assert parent.stats()["per_model"] == {"a/m": 150, "b/m": 150, "/": 1}
    reader = subprocess.run([sys.executable, "-c",
                             "import sys, json; from llmguide.llm.cache.store import LLMCache;"
                             "print(json.dumps(LLMCache(sys.argv[1]).get('from-parent')))", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert json.loads(reader.stdout) == {"v": 42}
    parent.close()


def test_threads_share_one_cache(tmp_path):
    cache = LLMCache(tmp_path / "t.sqlite")
    errors = []

    def work(t):
        try:
            for i in range(50):
                cache.put(f"{t}-{i}", {"i": i})
                assert cache.get(f"{t}-{i}") == {"i": i}
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 200


# ---------------------------------------------------------------- CachedLM


def test_cached_lm_calls_backend_only_for_misses(tmp_path):
    lm = NGramLM()
    cached = CachedLM(lm, LLMCache(tmp_path / "c.sqlite"), template_version="t@1")
    first = cached.generate(["you see a ", "eat ", "you see a "], max_tokens=6)
    assert lm.calls == 1 and lm.prompts_seen == ["you see a ", "eat "]  # batched, duplicate sent once
    assert [c.cached for c in first] == [False, False, False]
    direct = NGramLM().generate(["you see a ", "eat "], max_tokens=6)
    assert [c.text for c in first] == [direct[0].text, direct[1].text, direct[0].text]

    second = cached.generate(["eat ", "you see a "], max_tokens=6)
    assert lm.calls == 1  # no backend call on hits
    assert all(c.cached for c in second) and [c.text for c in second] == [direct[1].text, direct[0].text]
    assert second[0].completion_tokens == direct[1].completion_tokens

    cached.generate(["eat "], max_tokens=7)  # other sampling params -> miss
    assert lm.calls == 2
    s = cached.stats
    assert (s["hits"], s["misses"], s["calls"], s["backend_calls"]) == (2, 4, 3, 2)
    assert s["hit_rate"] == pytest.approx(2 / 6) and s["tokens"] > 0 and s["tokens_saved"] > 0

    # a new run (new objects, same file) reuses the answers; a new template version does not
    lm2 = NGramLM()
    again = CachedLM(lm2, LLMCache(tmp_path / "c.sqlite"), template_version="t@1")
    assert again.generate(["eat "], max_tokens=6)[0].text == direct[1].text and lm2.calls == 0
    CachedLM(lm2, LLMCache(tmp_path / "c.sqlite"), template_version="t@2").generate(["eat "], max_tokens=6)
    assert lm2.calls == 1


def test_cached_lm_never_stores_fallbacks(tmp_path):
    lm = NGramLM()
    cached = CachedLM(lm, LLMCache(tmp_path / "c.sqlite"))
    out = cached.generate(["", "eat "], max_tokens=3)
    assert out[0].error == "empty prompt" and out[1].error is None
    assert cached.stats["uncached_errors"] == 1
    out2 = cached.generate(["", "eat "], max_tokens=3)
    assert lm.calls == 2 and lm.prompts_seen[-1] == ""  # the error was asked again, the good one was not
    assert out2[1].cached and not out2[0].cached


def test_cached_lm_score(tmp_path):
    lm = NGramLM()
    cached = CachedLM(lm, LLMCache(tmp_path / "c.sqlite"))
    ctx, cands = ["you see a tree. ", "you see water. "], [[" collect wood", " eat cow"], [" collect drink"]]
    first = cached.score(ctx, cands)
    assert first == NGramLM().score(ctx, cands) and len(first[0]) == 2
    assert cached.score(ctx, cands) == first and lm.calls == 1
    assert cached.score(ctx[:1], cands[:1], normalize=True) != [first[0]] and lm.calls == 2


def test_cached_lm_with_real_embedded_backend(tmp_path):
    embedded = pytest.importorskip("llmguide.llm.backends.embedded")
    pytest.importorskip("llama_cpp")

    class Counting(LanguageModel):
        def __init__(self, inner):
            self.inner, self.calls = inner, 0
            self.backend, self.model_id = inner.backend, inner.model_id

        def generate(self, prompts, **kw):
            self.calls += 1
            return self.inner.generate(prompts, **kw)

        def score(self, contexts, candidates, **kw):
            self.calls += 1
            return self.inner.score(contexts, candidates, **kw)

    lm = Counting(embedded.EmbeddedLM())
    cached = CachedLM(lm, LLMCache(tmp_path / "c.sqlite"), template_version="ellm_goals@1")
    prompt = "Caption: You see tree.\n- collect wood\n\nCaption: You see water.\n"
    a = cached.generate([prompt], max_tokens=4)[0]
    b = cached.generate([prompt], max_tokens=4)[0]
    assert lm.calls == 1 and not a.cached and b.cached and a.text == b.text and a.error is None
    sa = cached.score(["Is water wet? Answer:"], [[" yes", " no"]])
    assert cached.score(["Is water wet? Answer:"], [[" yes", " no"]]) == sa and lm.calls == 2


def test_seen_ledger_records_inputs_per_namespace_survives_reopen_and_is_cleared(tmp_path):
    path = tmp_path / "seen.sqlite"
    with LLMCache(path) as cache:
        cache.add_seen("ellm/v1", ["tree", "water", "tree"])
        cache.add_seen("ellm/v2", ["cow"])
        cache.add_seen("ellm/v1", [])
    with LLMCache(path) as cache:   # another run
        assert sorted(cache.seen("ellm/v1")) == ["tree", "water"] and cache.seen("ellm/v2") == ["cow"]
        assert len(cache.seen("ellm/v1", limit=1)) == 1 and cache.seen("nobody") == []
        assert len(cache) == 0 and cache.stats()["bytes"] == 0     # not entries, not counted in bytes
        cache.clear()
        assert cache.seen("ellm/v1") == [] and cache.seen("ellm/v2") == []


# ---------------------------------------------------------------- CLI


def test_cache_cli_stats_export_clear(tmp_path, capsys):
    path = tmp_path / "cli.sqlite"
    cached = CachedLM(NGramLM(), LLMCache(path))
    cached.generate(["a ", "b ", "c "], max_tokens=2)
    cached.generate(["a "], max_tokens=2)
    cached.cache.close()
    assert main(["cache", "stats", "--path", str(path)]) == 0
    out = capsys.readouterr().out
    assert "entries    3" in out and "ngram/char-bigram-v1" in out and "hits 1, misses 3" in out

    dest = tmp_path / "out" / "dump.jsonl"
    assert main(["cache", "export", str(dest), "--path", str(path)]) == 0
    rows = [json.loads(line) for line in dest.read_text().splitlines()]
    assert len(rows) == 3 and {r["backend"] for r in rows} == {"ngram"} and all("text" in r["value"] for r in rows)

    assert main(["cache", "export", "--path", str(path)]) == 1  # no FILE: clear error, no crash
    assert "needs an output file" in capsys.readouterr().err
    assert main(["cache", "clear", "--path", str(path)]) == 0
    assert "cleared 3 entries" in capsys.readouterr().out
    assert LLMCache(path).stats()["entries"] == 0


def test_cache_cli_default_path_honours_env(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cdir"))
    assert cache_command("stats", None, None) == 0
    assert "no file yet" in capsys.readouterr().out
    cache = LLMCache(tmp_path / "cdir" / "llm_cache.sqlite")
    cache.put("k", {"v": 1}, {"backend": "x", "model_id": "y"})
    cache.close()
    assert main(["cache", "stats"]) == 0
    assert "entries    1" in capsys.readouterr().out


def test_locked_cache_does_not_break_generation(tmp_path, caplog):
    """Another process holding the write lock longer than the busy timeout: answer used, not stored, counted."""
    path = tmp_path / "locked.sqlite"
    lm = NGramLM()
    cached = CachedLM(lm, LLMCache(path, busy_timeout=0.1))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        out = cached.generate(["eat "], max_tokens=3)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert out[0].error is None and out[0].text == NGramLM().generate(["eat "], max_tokens=3)[0].text
    assert cached.stats["cache_errors"] >= 1 and "write failed" in caplog.text
    assert not cached.generate(["eat "], max_tokens=3)[0].cached and lm.calls == 2  # was not stored; now it is
    assert cached.generate(["eat "], max_tokens=3)[0].cached
