"""``llmguide cache export`` writes what the LM was asked beside each answer (issue 32 point 9): the prompt of
a generation, the context and candidates of a score; entries stored before prompts were kept export nulls."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from llmguide.cli import main
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import LLMCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_llm_cache import NGramLM  # noqa: E402


def _export(path: Path, dest: Path, capsys) -> list[dict]:
    assert main(["cache", "export", str(dest), "--path", str(path)]) == 0
    assert f"to {dest}" in capsys.readouterr().out
    return [json.loads(line) for line in dest.read_text().splitlines()]


def test_export_writes_the_prompt_or_the_candidates_beside_each_answer(tmp_path, capsys):
    path = tmp_path / "c.sqlite"
    cached = CachedLM(NGramLM(), LLMCache(path), template_version="ellm_goals@1")
    cached.generate(["Caption: a tree.\nGoals:", "Caption: water.\nGoals:"], max_tokens=3)
    cached.generate(["Caption: a tree.\nGoals:"], max_tokens=3)    # a hit stores nothing new
    cached.score(["Caption: a cow. Goal:"], [[" eat cow", " drink water"]])
    cached.cache.close()
    rows = _export(path, tmp_path / "dump.jsonl", capsys)
    generated = {r["prompt"]: r for r in rows if r["kind"] == "generate"}
    assert set(generated) == {"Caption: a tree.\nGoals:", "Caption: water.\nGoals:"}
    assert all("text" in r["value"] and "request" not in r["meta"] for r in generated.values())
    (scored,) = [r for r in rows if r["kind"] == "score"]
    assert scored["context"] == "Caption: a cow. Goal:" and scored["candidates"] == [" eat cow", " drink water"]
    assert len(scored["value"]["scores"]) == 2
    keys = list(scored)    # what was asked comes before the answer
    assert keys.index("context") < keys.index("candidates") < keys.index("value")


def test_entries_stored_before_prompts_were_kept_export_nulls(tmp_path, capsys):
    path = tmp_path / "old.sqlite"
    LLMCache(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO entries (key, value, backend, model_id, template_version, kind, meta, created, size, "
                    "accessed) VALUES ('k', '{\"text\": \"x\"}', 'b', 'm', 'v', 'generate', '{}', 0, 10, 0)")
    (row,) = _export(path, tmp_path / "dump.jsonl", capsys)
    assert row["prompt"] is None and row["value"] == {"text": "x"}


def test_oni_labels_export_the_message_prompt_they_answer(tmp_path, capsys):
    """ONI's annotators store each label with the question that produced it (score: the prompt and the
    " yes"/" no" candidates; a pair: both messages in the prompt), so an exported label is auditable."""
    from llmguide.llm.service.core import LLMService
    from llmguide.methods.oni.annotator import MessageAnnotator, PairAnnotator

    path = tmp_path / "c.sqlite"
    lm = CachedLM(NGramLM(), LLMCache(path))
    with LLMService(lm, max_batch=4) as service:
        label, pair = MessageAnnotator(service), PairAnnotator(service)
        label.submit(["You collect wood."])
        pair.submit([PairAnnotator.make_pair("You collect wood.", "It's a wall.")])
        for annotator in (label, pair):
            assert annotator.wait(timeout=30)
    lm.cache.close()
    rows = {r["kind"]: r for r in _export(path, tmp_path / "dump.jsonl", capsys) if ":" in r["kind"]}
    labelled, preferred = rows["oni_label:score"], rows["motif_pref:score"]
    assert "You collect wood." in labelled["context"] and labelled["candidates"] == [" yes", " no"]
    assert labelled["value"]["label"] in (0.0, 1.0) and "request" not in labelled["meta"]
    assert "You collect wood." in preferred["context"] and "It's a wall." in preferred["context"]
    assert preferred["candidates"] == ["A > B", "B > A", "A = B"]
