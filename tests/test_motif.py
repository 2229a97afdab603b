"""Motif offline pipeline: real MiniHack messages → resumable LM annotation → reward model → reward."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("minihack")

from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import LLMCache  # noqa: E402
from llmguide.llm.service.core import LLMService  # noqa: E402
from llmguide.methods.oni.annotator import PairAnnotator  # noqa: E402
from llmguide.methods.oni.motif import MotifReward, PairsDB, annotate_pairs, sample_pairs, train_reward_model  # noqa: E402
from llmguide.pipelines import load_config  # noqa: E402
from llmguide.rewards.base import TransitionBatch  # noqa: E402
from test_oni import CountingLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def embedded():
    from llmguide.llm.backends.embedded import EmbeddedLM

    lm = EmbeddedLM()
    yield lm
    lm.close()


def motif_cfg(tmp_path, *extra: str):
    return load_config(["env=minihack", "env.id=MiniHack-KeyRoom-S5-v0", "method=motif", "num_envs=2",
                        f"method.data_dir={tmp_path / 'motif'}", "method.collect_steps=300", "method.num_pairs=5",
                        f"run.dir={tmp_path / 'runs'}", "run.name=motif-test", *extra])


def test_collect_then_resumable_annotation_labels_every_pair_exactly_once(embedded, tmp_path):
    from llmguide.methods.oni.motif_recipe import collect

    cfg = motif_cfg(tmp_path)
    assert collect(cfg) == 0
    db = PairsDB(tmp_path / "motif" / "pairs.sqlite")
    messages = db.messages()
    assert sum(messages.values()) >= 300 and len(messages) >= 3  # real env messages, e.g. "It's a wall."
    total = db.count()
    assert total == min(5, len(messages) * (len(messages) - 1) // 2)
    assert all(a < b for a, b, in db.conn.execute("SELECT a, b FROM pairs"))  # unordered, never identical

    counting = CountingLM(embedded)
    cache = LLMCache(tmp_path / "cache.sqlite")
    with LLMService(CachedLM(counting, cache), max_batch=8) as service:  # first run: stopped after one batch
        first = annotate_pairs(db, PairAnnotator(service), batch_size=2, max_batches=1)
    assert first["batches"] == 1 and first["done"] + first["unparseable"] == 2 and first["todo"] == total - 2

    db2 = PairsDB(tmp_path / "motif" / "pairs.sqlite")  # rerun: a new process would see the same file
    with LLMService(CachedLM(counting, LLMCache(tmp_path / "cache.sqlite")), max_batch=8) as service:
        second = annotate_pairs(db2, PairAnnotator(service), batch_size=2)
    assert second["todo"] == 0 and second["done"] + second["unparseable"] == total  # none lost
    rows = db2.conn.execute("SELECT annotations, status, label FROM pairs").fetchall()
    assert all(n == 1 for n, _, _ in rows)  # none labelled twice
    assert all(y in (0.0, 0.5, 1.0) for _, s, y in rows if s == "done")
    assert sum(counting.prompts.values()) == total and max(counting.prompts.values()) == 1  # one LM request each


def test_a_labelling_stopped_early_holds_an_even_sample_of_the_pairs_and_copies_label_the_same_ones(tmp_path):
    """The pairs are stored sorted by message: labelled in id order, a budget of batches would label only the
    pairs of the first messages (on Craftax, every pair with the empty message). The order is scrambled, fixed,
    and a copy for another labeller (a knowledge control) is labelled in the same order."""
    from collections import Counter

    letters = [chr(c) * 3 for c in range(ord("a"), ord("z") + 1)]
    db = PairsDB(tmp_path / "d" / "pairs.sqlite")
    db.add_messages(Counter(letters))
    db.add_pairs(sample_pairs(Counter(letters), 200, seed=0))
    first = [row[0] for row in db.todo(40)]
    assert len(first) == 40 == len(set(first))
    assert max(first) > 160 and min(first) < 40   # spread over the sorted pairs
    ordered = [row[0] for row in db.conn.execute("SELECT id FROM pairs ORDER BY id LIMIT 40")]
    assert len(set(first) & set(ordered)) < 20   # in id order they would be these 40, the first messages' pairs
    copy = db.copy_unlabelled(tmp_path / "c" / "pairs.sqlite")
    assert copy.todo(40) == db.todo(40)
    db.write_labels([(i, 1.0) for i in first[:10]])
    assert [row[0] for row in db.todo(30)] == first[10:]   # the next batch goes on in the same order
    assert db.count("todo") == 190 and len(copy.todo(1000)) == 200
    copy.close()
    db.close()


def test_reward_model_threshold_and_count_division(tmp_path):
    db = PairsDB(tmp_path / "pairs.sqlite")
    good = ["You kill the newt!", "You see here 5 gold pieces.", "There is a staircase down here."]
    bad = ["It's a wall.", "It's solid stone.", "Never mind."]
    db.add_pairs(sample_pairs(__import__("collections").Counter(good + bad), 100))
    # preferences from a known rule (good beats bad, ties otherwise) to check the training itself
    rows = db.todo(100)
    db.write_labels([(i, 0.5 if (a in good) == (b in good) else (1.0 if a in good else 0.0)) for i, a, b in rows])
    ckpt, metrics = train_reward_model(db, epochs=60, lr=1e-3, threshold_quantile=0.5, seed=0)
    assert metrics["pairs"] == 15
    module = MotifReward(ckpt, num_envs=1, beta=1.0)
    shaped = module.shaped(good + bad)
    assert shaped[:3].min() > 0 and np.all(shaped[3:] == 0)  # bad messages fall under the median threshold
    infos = [[{"caption": good[0]}], [{"caption": good[0]}], [{"caption": bad[0]}]]
    batch = TransitionBatch(obs={}, actions=np.zeros((3, 1)), next_obs={}, rewards=np.zeros((3, 1)),
                            terminated=np.zeros((3, 1), bool), infos=infos)
    r = module.compute(batch)[:, 0]
    assert r.tolist() == pytest.approx([shaped[0], shaped[0] / 2, 0.0])


def test_runs_started_together_fit_the_shared_reward_model_once_with_its_own_seed(tmp_path, monkeypatch):
    """Seeds launched in parallel on one data set must not each fit (and overwrite) the shared model."""
    import threading
    import time

    import torch

    from llmguide.methods.oni import motif_recipe as pipeline

    fits: list[int] = []

    def slow_fit(db, *, seed, **kwargs):
        fits.append(seed)
        time.sleep(0.3)  # long enough for the other run to arrive while this one fits
        return {"quantiles": [0.0], "seed": seed}, {"val_acc": 1.0}

    class NoDB:
        def __init__(self, path):
            pass

        def close(self):
            pass

    monkeypatch.setattr(pipeline, "train_reward_model", slow_fit)
    monkeypatch.setattr(pipeline, "PairsDB", NoDB)
    (tmp_path / "data").mkdir()
    cfgs = [load_config(["env=minihack", "method=motif", f"method.data_dir={tmp_path / 'data'}", f"seed={s}"])
            for s in (3, 4)]
    paths: list = []
    threads = [threading.Thread(target=lambda c=c: paths.append(pipeline.fit_reward_model(c))) for c in cfgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fits == [0]  # once, with method.reward_model_seed, not a run's seed
    assert len(set(paths)) == 1 and torch.load(paths[0], weights_only=False)["seed"] == 0
