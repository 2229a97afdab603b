"""Model files checked by size and hash, answer tables (build, resume, read, misses), ELLM's seeded tie-breaks."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from llmguide.llm.assets import ModelFileError, PartedGGUF, assemble, parted_gguf_path, verify_file
from llmguide.llm.table import (
    AnswerTable,
    AnswerTableError,
    Query,
    TableLM,
    build_table,
    coverage_curve,
    is_miss,
    shuffle_table,
)

CAPTIONS = ["You see grass, tree. You face tree. You have nothing."] * 5 + \
           ["You see grass, water. You face water. You have 2 wood. You feel thirsty."] * 3 + \
           ["You see stone, table, tree. You face table. You have 4 wood."] * 2 + \
           ["You see cow, grass. You face cow. You have 1 sapling."]


# --- model files ----------------------------------------------------------------------------------
def _fake_parts(root: Path, name: str, blobs: list[bytes]) -> None:
    """Installed part packages as pip lays them out: ``<name><n>/data/partNN.bin`` on sys.path."""
    for n, blob in enumerate(blobs, 1):
        pkg = root / f"{name}{n}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a part package must never be imported')\n")
        (pkg / "data" / f"part{n:02d}.bin").write_bytes(blob)


def _model(name: str, blobs: list[bytes], parts: int | None = None) -> PartedGGUF:
    whole = b"".join(blobs)
    return PartedGGUF(name="fake-model", filename="fake.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                      package=name + "{n}", parts=parts or len(blobs), part_file="data/part{n:02d}.bin",
                      install="make fake", chat=True)


def test_a_tampered_model_file_is_refused_with_one_line(tmp_path):
    blob = bytes(range(256)) * 40
    path = tmp_path / "m.gguf"
    path.write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    assert verify_file(path, len(blob), digest, "m") == path
    flipped = bytearray(blob)
    flipped[5000] ^= 0x01   # one flipped bit, same size
    path.write_bytes(bytes(flipped))
    with pytest.raises(ModelFileError, match="sha256 .* expected .*refusing to load") as err:
        verify_file(path, len(blob), digest, "m")
    assert "\n" not in str(err.value)
    path.write_bytes(blob[:-1])
    with pytest.raises(ModelFileError, match="10,239 bytes, expected 10,240"):
        verify_file(path, len(blob), digest, "m")


def test_parts_assemble_into_the_cache_once_and_missing_parts_say_how_to_install(tmp_path, monkeypatch):
    blobs = [b"GGUF" + bytes([n]) * 1000 for n in range(3)]
    site = tmp_path / "site"
    _fake_parts(site, "llmguide_fakepart", blobs[:2])   # part 3 not installed
    monkeypatch.syspath_prepend(str(site))
    model = _model("llmguide_fakepart", blobs)
    with pytest.raises(ModelFileError, match=r"parts 3 of 3 parts missing\): run make fake"):
        parted_gguf_path(model, tmp_path / "cache")
    with pytest.raises(ModelFileError, match="all 3 parts missing"):
        parted_gguf_path(_model("llmguide_nosuchpart", blobs), tmp_path / "cache")
    _fake_parts(site / "more", "llmguide_fakepart", blobs)
    monkeypatch.syspath_prepend(str(site / "more"))
    path = parted_gguf_path(model, tmp_path / "cache")
    assert path.read_bytes() == b"".join(blobs)
    assert not any(m.startswith("llmguide_fakepart") for m in sys.modules)   # located, never imported
    # once assembled it is checked at every load: a changed byte is refused
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    with pytest.raises(ModelFileError, match="refusing to load"):
        parted_gguf_path(model, tmp_path / "cache")


def test_parts_that_do_not_add_up_are_never_assembled(tmp_path):
    parts = []
    for n in range(2):
        parts.append(tmp_path / f"p{n}")
        parts[-1].write_bytes(b"x" * 10)
    dest = tmp_path / "out" / "m.gguf"
    with pytest.raises(ModelFileError, match="refusing to assemble"):
        assemble(parts, dest, 20, "0" * 64, "m")
    assert not dest.exists() and not list(dest.parent.iterdir())   # no file, no temp file left behind


def test_qwen_is_a_config_option_that_names_its_install_step_when_missing(monkeypatch, tmp_path):
    """Without the parts, llm=qwen fails with one line that says how to install them (no traceback, no download)."""
    from llmguide.llm import assets

    monkeypatch.setattr(assets, "QWEN", PartedGGUF(**{**assets.QWEN.__dict__, "package": "llmguide_absent_qwen{n}"}))
    monkeypatch.setitem(assets.MODELS, assets.QWEN.name, assets.QWEN)
    with pytest.raises(ModelFileError, match=r"\(all 22 parts missing\): run make qwen"):
        assets.model_gguf_path(assets.QWEN.name)
    from llmguide.core.errors import ConfigError

    with pytest.raises(ConfigError, match="llm.model"):
        assets.model_gguf_path("gpt-17")


# --- answer tables --------------------------------------------------------------------------------
def _ellm_cfg(*overrides: str):
    from llmguide.pipelines import load_config

    return load_config(["env=crafter", "env.actions=text", "method=ellm", "method.vocabulary=actions", "llm=oracle",
                        *overrides])


def _oracle_lm():
    from llmguide.llm.factory import make_backend

    return make_backend({"backend": "oracle"}, "crafter", actions="text")


class CountingLM:
    """Wraps a real backend and counts the requests it answers."""

    def __init__(self, lm):
        self.lm, self.n = lm, 0

    def score(self, contexts, candidates, normalize=False):
        self.n += len(contexts)
        return self.lm.score(contexts, candidates, normalize=normalize)


def test_ellm_queries_are_one_per_signature_weighted_by_steps():
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    queries = answer_queries(_ellm_cfg(), CAPTIONS)
    assert [q.weight for q in queries] == [5, 3, 2, 1]
    assert all(q.kind == "score" and len(q.payload["candidates"]) == 139 for q in queries)
    assert coverage_curve(queries, (0.4, 0.5, 0.8, 1.0)) == {"40%": 1, "50%": 2, "80%": 3, "100%": 4}
    # the same caption facing something else has the same signature: one query
    assert len(answer_queries(_ellm_cfg(), [*CAPTIONS, "You see tree, grass. You face grass. You have nothing."])) == 4


def test_a_table_builds_resumes_and_answers_exactly_what_the_lm_said(tmp_path):
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    queries = answer_queries(_ellm_cfg(), CAPTIONS)
    oracle, out = _oracle_lm(), tmp_path / "t.sqlite"
    lm = CountingLM(oracle)
    meta = {"lm": "oracle", "method": "ellm", "prompt_sha256": "p"}
    first = build_table(lm, queries, out, meta=meta, coverage=0.7, progress=False)
    assert lm.n == 2 and first["answered"] == 2 and first["coverage_of_data_steps"] == pytest.approx(8 / 11)
    again = build_table(lm, queries, out, meta=meta, max_queries=3, progress=False)   # resumed: only the third
    assert lm.n == 3 and again["answered"] == 3
    build_table(lm, queries, out, meta=meta, progress=False)
    assert lm.n == 4 and len(AnswerTable(out)) == 4
    with pytest.raises(AnswerTableError, match="built with lm='oracle'"):
        build_table(lm, queries, out, meta={**meta, "lm": "embedded:qwen"}, progress=False)

    table_lm = TableLM(AnswerTable(out))
    q = queries[1]
    row = table_lm.score([q.payload["context"]], [q.payload["candidates"]], normalize=q.payload["normalize"])[0]
    assert row == oracle.score([q.payload["context"]], [q.payload["candidates"]])[0] and not is_miss(row)
    miss = table_lm.score(["Caption: You see diamond."], [q.payload["candidates"]])[0]
    assert is_miss(miss) and len(miss) == 139
    assert table_lm.io_stats() == {"table_hits": 1.0, "table_misses": 1.0, "table_online": 0.0, "table_nearest": 0.0}
    gen = table_lm.generate(["not asked"])[0]
    assert gen.text == "" and is_miss(gen) and gen.error is None
    # with an online LM a miss is asked of it (counted), never answered as nothing
    online = TableLM(AnswerTable(out), online=oracle)
    assert not is_miss(online.score(["Caption: You see diamond."], [q.payload["candidates"]])[0])
    assert online.io_stats()["table_online"] == 1


def test_the_nearest_fallback_answers_a_miss_with_the_most_similar_states_answer(tmp_path):
    """llm.table_fallback=nearest: a request the table lacks gets the table's answer for the state most like it
    (counted apart from the hits); a request of another width or kind it cannot match stays a miss."""
    from llmguide.llm.table import is_nearest
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    queries = answer_queries(_ellm_cfg(), CAPTIONS)
    out = tmp_path / "t.sqlite"
    build_table(_oracle_lm(), queries, out, meta={"lm": "oracle", "method": "ellm", "prompt_sha256": "p"},
                progress=False)
    lm = TableLM(AnswerTable(out), fallback="nearest")
    cands = queries[0].payload["candidates"]
    by_caption = {q.label: lm.score([q.payload["context"]], [cands])[0] for q in queries}
    near = "You see cow, grass, tree. You face cow. You have 1 sapling."   # most like the cow state (4 of 6 words)
    context = queries[0].payload["context"].replace(queries[0].label, near)
    row = lm.score([context], [cands])[0]
    cow = [c for c in by_caption if c.startswith("You see cow")][0]
    assert is_nearest(row) and not is_miss(row) and list(row) == list(by_caption[cow])
    assert is_miss(lm.score([context], [cands[:5]])[0])   # no state of that width: a miss
    assert lm.io_stats() == {"table_hits": 4.0, "table_misses": 1.0, "table_online": 0.0, "table_nearest": 1.0}
    plain = TableLM(AnswerTable(out))
    assert is_miss(plain.score([context], [cands])[0])   # the default fallback: a miss, as before
    with pytest.raises(ValueError, match="fallback"):
        TableLM(AnswerTable(out), fallback="closest")


def test_a_shuffled_table_keeps_the_requests_and_the_answers_but_not_their_pairing(tmp_path):
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    captions = [f"You see grass, tree. You face tree. You have {n} wood." for n in range(1, 10)] + CAPTIONS
    queries = answer_queries(_ellm_cfg(), captions)
    source, out = tmp_path / "t.sqlite", tmp_path / "s.sqlite"
    build_table(_oracle_lm(), queries, source, meta={"lm": "oracle", "method": "ellm", "prompt_sha256": "p"},
                progress=False)
    # a generate row of another kind stays among its own kind
    table = AnswerTable(source, readonly=False)
    table.put(Query("generate", {"prompt": "p", "max_tokens": 8, "temperature": 0.0, "stop": None}, 1.0, "g"),
              {"text": "- eat cow"}, 0.5)
    table.close()
    done = shuffle_table(source, out, seed=1)
    a, b = AnswerTable(source), AnswerTable(out)
    assert done["rows"] == len(a) == len(b) and a.keys() == b.keys()
    assert sorted(map(str, (r[2] for r in a.rows()))) == sorted(map(str, (r[2] for r in b.rows())))
    by_key = {k: (a.get(k), b.get(k)) for k in a.keys()}
    assert sum(x != y for x, y in by_key.values()) == done["moved"] > len(a) // 2
    assert all(x[0] == y[0] for x, y in by_key.values())          # kinds never mixed
    gen = [y for x, y in by_key.values() if x[0] == "generate"]
    assert gen == [("generate", {"text": "- eat cow"})]
    meta = b.meta()
    assert meta["lm"] == "oracle" and meta["shuffle_seed"] == 1 and meta["shuffled_from"] == str(source)
    # the same seed draws the same permutation, another seed another one
    shuffle_table(source, tmp_path / "s1.sqlite", seed=1)
    shuffle_table(source, tmp_path / "s2.sqlite", seed=2)
    again, other = AnswerTable(tmp_path / "s1.sqlite"), AnswerTable(tmp_path / "s2.sqlite")
    assert all(again.get(k) == b.get(k) for k in a.keys())
    assert any(other.get(k) != b.get(k) for k in a.keys())
    with pytest.raises(AnswerTableError, match="does not exist"):
        shuffle_table(tmp_path / "none.sqlite", tmp_path / "x.sqlite", seed=0)


def test_a_file_that_is_not_a_table_is_refused(tmp_path):
    with pytest.raises(AnswerTableError, match="does not exist"):
        AnswerTable(tmp_path / "none.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(AnswerTableError, match="not an answer table"):
        AnswerTable(junk)


def test_the_suggester_reads_the_table_and_counts_misses_as_not_fresh(tmp_path):
    from llmguide.llm.service.core import LLMService
    from llmguide.methods.ellm.recipe import prompt_template
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries
    from llmguide.methods.ellm.suggester import GoalSuggester

    cfg = _ellm_cfg()
    queries = answer_queries(cfg, CAPTIONS[:8])   # the tree and water states only
    out = tmp_path / "t.sqlite"
    build_table(_oracle_lm(), queries, out, meta={"lm": "oracle"}, progress=False)
    from llmguide.envs.crafter.actions import ACTION_STRINGS

    with LLMService(TableLM(AnswerTable(out))) as service:
        sug = GoalSuggester("score", 3, ACTION_STRINGS, service=service, template=prompt_template(cfg.method), top_k=5,
                             normalize_scores=bool(cfg.method.normalize_scores))
        for i, caption in enumerate([CAPTIONS[0], CAPTIONS[5], CAPTIONS[10]]):   # tree, water: in; cow: not
            sug.observe(i, {"caption": caption})
        deadline = time.monotonic() + 10
        while sug.pending() and time.monotonic() < deadline:
            sug.poll()
            time.sleep(0.01)
        sug.poll()
        assert "chop tree" in sug.goals(0) and "drink water" in sug.goals(1) and sug.goals(2) == []
        assert sug.account_step() == 2 and sug.stats.table_misses == 1
        m = service.lm_metrics()
        assert m["lm/table_coverage"] == pytest.approx(2 / 3) and m["lm/table_misses"] == 1


def test_a_suggester_reading_a_table_waits_for_each_answer_so_its_goals_never_depend_on_timing(tmp_path):
    """With ``wait`` (a run with ``llm.table``) an env's goals are its state's answer the step it arrives, however
    slowly the service answers; without it the env keeps its earlier goals until the answer comes (stale): the
    goals a step used then depend on the threads' timing, and a rerun of the same seed differs."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.llm.service.core import LLMService
    from llmguide.methods.ellm.recipe import prompt_template
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries
    from llmguide.methods.ellm.suggester import GoalSuggester

    cfg = _ellm_cfg()
    out = tmp_path / "t.sqlite"
    build_table(_oracle_lm(), answer_queries(cfg, CAPTIONS[:8]), out, meta={"lm": "oracle"}, progress=False)

    class Slow(TableLM):   # an answer table behind a slow service: the answer comes 0.2 s after it is asked
        def score(self, *args, **kwargs):
            time.sleep(0.2)
            return super().score(*args, **kwargs)

    seen = {}
    for wait in (True, False):
        with LLMService(Slow(AnswerTable(out))) as service:
            sug = GoalSuggester("score", 1, ACTION_STRINGS, service=service, template=prompt_template(cfg.method),
                                top_k=5, normalize_scores=bool(cfg.method.normalize_scores), wait=wait,
                                warm_start=False)
            sug.observe(0, {"caption": CAPTIONS[0]})          # the tree state
            sug.poll()
            tree = sug.goals(0)
            sug.observe(0, {"caption": CAPTIONS[5]})          # the water state
            sug.poll()
            seen[wait] = (tree, sug.goals(0), sug.stats.stale_steps)
            sug.close(wait=True)
    assert "chop tree" in seen[True][0] and "drink water" in seen[True][1] and seen[True][2] == 0
    assert seen[False][0] == [] and "drink water" not in seen[False][1]   # not yet answered: no goals, then none


def test_score_ties_are_broken_at_random_seeded_by_run_and_state():
    """An oracle row with more feasible goals than top_k keeps a random top_k, not the first in list order."""
    from llmguide.methods.ellm.suggester import top_order

    scores = np.array([0.0] * 6 + [-1e9] * 4)
    kept = [frozenset(top_order(scores, seed, "state")[:5].tolist()) for seed in range(40)]
    assert all(k <= set(range(6)) and len(k) == 5 for k in kept)
    dropped = {next(iter(set(range(6)) - k)) for k in kept}
    assert len(dropped) >= 4    # list order would always drop index 5
    assert frozenset(top_order(scores, 3, "state")[:5].tolist()) == kept[3]   # reproducible
    assert top_order(np.array([1.0, 3.0, 2.0]), 0, "s").tolist() == [1, 2, 0]   # real scores keep their order


def test_answers_verb_builds_a_table_from_a_collection_and_a_run_reads_only_it(tmp_path, capfd):
    """collect (random play) -> `llmguide answers` (oracle) -> train with llm.table: no LM is built, and the
    run's coverage and misses are logged; a second build resumes with nothing to do."""
    import json

    from llmguide.cli import main
    from llmguide.pipelines import load_config
    from llmguide.pipelines.collect import Collection, explore

    crafter = ["env=crafter", "env.actions=text", "env.max_steps=40", "num_envs=2", "progress=false"]
    explore(load_config([*crafter, "method=bk_code", f"run.dir={tmp_path}", "run.name=data"]),
            Collection(steps=160, policy="random"))
    ellm = [*crafter, "method=ellm", "method.vocabulary=actions"]
    table = tmp_path / "oracle.sqlite"
    args = ["answers", *ellm, "llm=oracle", f"answers.data={tmp_path / 'data'}", f"answers.out={table}"]
    assert main(args) == 0
    meta = AnswerTable(table).meta()
    assert meta["lm"] == "oracle" and meta["data_steps"] == 160 and meta["build_summary"]["coverage_of_data_steps"] == 1
    assert main(args) == 0   # resumed: every query already answered
    # the table belongs to the oracle: a build with another LM into it is refused with one line (exit 1)
    assert main(["answers", *ellm, "llm=random", f"answers.data={tmp_path / 'data'}", f"answers.out={table}"]) == 1
    run = tmp_path / "runs"
    assert main(["train", *ellm, "llm=oracle", f"llm.table={table}", "agent.num_steps=32", "agent.hidden=32",
                 "total_steps=128", "eval.episodes=0", "log_every=64", f"run.dir={run}", "run.name=t"]) == 0
    rows = [json.loads(line) for line in (run / "t" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "lm/table_coverage" in r][-1]
    assert 0 < last["lm/table_coverage"] <= 1 and last["lm/table_hits"] > 0
    assert last["ellm/table_exact_fraction"] == pytest.approx(last["lm/table_coverage"])   # no fallback: the same
    # the nearest fallback: another seed meets states the table lacks; every step is answered, the exact share less
    assert main(["train", *ellm, "llm=oracle", f"llm.table={table}", "llm.table_fallback=nearest", "seed=5",
                 "env.max_steps=200", "agent.num_steps=32", "agent.hidden=32", "total_steps=256", "eval.episodes=0",
                 "log_every=64", f"run.dir={run}", "run.name=near"]) == 0
    rows = [json.loads(line) for line in (run / "near" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "lm/table_coverage" in r][-1]
    assert last["lm/table_nearest"] > 0 and last["lm/table_coverage"] > 0.9   # less only the answers in flight
    assert 0 < last["ellm/table_exact_fraction"] < last["lm/table_coverage"]
    out = capfd.readouterr()
    assert "LM: loading" not in out.err   # no LM was loaded: the table answered
    assert "answer table covered" in out.out and "WARNING" not in out.out   # the summary line says so
    # answers.shuffle_of: the verb writes the permuted copy without an LM; a missing or identical out is exit 2
    shuffled = tmp_path / "shuffled.sqlite"
    assert main(["answers", *ellm, "llm=oracle", f"answers.shuffle_of={table}", f"answers.out={shuffled}",
                 "seed=4"]) == 0
    assert AnswerTable(shuffled).keys() == AnswerTable(table).keys()
    assert "permuted among its requests (seed 4" in capfd.readouterr().out
    assert main(["answers", *ellm, f"answers.shuffle_of={table}"]) == 2
    assert main(["answers", *ellm, f"answers.shuffle_of={table}", f"answers.out={table}"]) == 2
    assert "answers.out" in capfd.readouterr().err


def test_oni_labels_come_from_a_table_built_over_the_collected_message_line(tmp_path):
    """The collector records Crafter's message line; ONI's label requests over it are tabled by the oracle, and
    the annotator reads labels from the table (a message not in it gets no label and is not asked again)."""
    from llmguide.cli import main
    from llmguide.data import EpisodeDataset
    from llmguide.llm.service.core import LLMService
    from llmguide.methods.oni.annotator import MessageAnnotator
    from llmguide.methods.oni.recipe import answer_queries, family_templates
    from llmguide.pipelines import load_config
    from llmguide.pipelines.collect import Collection, explore

    crafter = ["env=crafter", "env.max_steps=60", "num_envs=2", "progress=false"]
    explore(load_config([*crafter, "method=bk_code", f"run.dir={tmp_path}", "run.name=data"]),
            Collection(steps=240, policy="random"))
    episodes = list(EpisodeDataset(tmp_path / "data"))
    assert all(len(e.messages) == len(e) for e in episodes) and any(m for e in episodes for m in e.messages)
    oni = [*crafter, "method=oni_retrieval", "method.label_mode=score"]
    queries = answer_queries(load_config(oni), EpisodeDataset(tmp_path / "data"))
    assert queries and sum(q.weight for q in queries) == sum(bool(m) for e in episodes for m in e.messages)
    table = tmp_path / "oni.sqlite"
    assert main(["answers", *oni, "llm=oracle", f"answers.data={tmp_path / 'data'}", f"answers.out={table}"]) == 0
    score_t, _, _ = family_templates("crafter")
    with LLMService(TableLM(AnswerTable(table))) as service:
        annot = MessageAnnotator(service, template=score_t, mode="score")
        known, unknown = queries[0].label, "You find a unicorn."
        annot.submit([known, unknown])
        assert annot.wait(10)
        annot.poll()
        assert annot.get(known) in (0.0, 1.0) and annot.get(unknown) is None
        assert annot.counts["table_misses"] == 1 and annot.submit([unknown]) == 0   # not asked again



def test_a_run_refuses_a_table_built_for_another_lm_method_or_prompt(tmp_path, capfd):
    """A table is read only by a run configured as it was built (#70): another LM (a random table read as Gemma),
    another request kind (a generate table read by ELLM score) are one line each, exit 2; misses never count as
    answers of the LM."""
    from llmguide.cli import main
    from llmguide.pipelines import load_config
    from llmguide.pipelines.collect import Collection, explore

    crafter = ["env=crafter", "env.actions=text", "env.max_steps=40", "num_envs=2", "progress=false"]
    explore(load_config([*crafter, "method=bk_code", f"run.dir={tmp_path}", "run.name=data"]),
            Collection(steps=80, policy="random"))
    ellm = [*crafter, "method=ellm", "method.vocabulary=actions"]
    gen = [*ellm, "method.suggester=generate", "method.prompt=ellm_actions_listed"]
    random_t, gen_t = tmp_path / "random.sqlite", tmp_path / "gen.sqlite"
    assert main(["answers", *ellm, "llm=random", f"answers.data={tmp_path / 'data'}", f"answers.out={random_t}"]) == 0
    assert main(["answers", *gen, "llm=oracle", f"answers.data={tmp_path / 'data'}", f"answers.out={gen_t}"]) == 0
    capfd.readouterr()
    train = ["train", "total_steps=64", "agent.num_steps=32", "eval.episodes=0", f"run.dir={tmp_path / 'runs'}"]
    assert main([*train, *ellm, "llm=embedded", f"llm.table={random_t}", "run.name=a"]) == 2
    err = capfd.readouterr().err
    assert "config error at 'llm'" in err and "'random'" in err and "'embedded:" in err and "Traceback" not in err
    assert main([*train, *ellm, "llm=oracle", f"llm.table={gen_t}", "run.name=b"]) == 2   # score run, generate table
    err = capfd.readouterr().err
    assert "config error at 'method.prompt'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "a").exists() and not (tmp_path / "runs" / "b").exists()
    assert main([*train, *gen, "llm=oracle", f"llm.table={gen_t}", "run.name=c"]) == 0   # as built: trains


def test_table_misses_are_not_counted_as_answers(tmp_path):
    """Through the real service: 2 of 4 requests in the table; the LM 'answered' 2, not 4."""
    from llmguide.llm.service.core import LLMService
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    queries = answer_queries(_ellm_cfg(), CAPTIONS)
    out = tmp_path / "t.sqlite"
    build_table(_oracle_lm(), queries, out, meta={"lm": "oracle"}, max_queries=2, progress=False)
    with LLMService(TableLM(AnswerTable(out))) as service:
        futures = [service.submit_score(q.payload["context"], q.payload["candidates"]) for q in queries]
        rows = [f.result(timeout=30) for f in futures]
        metrics = service.lm_metrics()
    assert [is_miss(r) for r in rows] == [False, False, True, True]
    assert metrics["lm/completed"] == 2 and metrics["lm/answered_fraction"] == 0.5
    assert metrics["lm/table_misses"] == 2
