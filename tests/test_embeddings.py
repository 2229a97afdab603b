"""Sentence embeddings (all-MiniLM-L6-v2 from its PyPI package, offline) and the bag-of-words embedder."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from llmguide.core.errors import LLMGuideError
from llmguide.llm.embeddings import BowEmbedder, SentenceEmbedder, make_embedder


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    pytest.importorskip("sentence_transformers")
    return SentenceEmbedder()


def test_minilm_shape_norm_and_paraphrases(minilm):
    assert minilm.dim == 384
    e = minilm.embed(["collect wood", "chop a tree to get wood"])
    assert e.shape == (2, 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    pairs = [("collect wood", "gather wood from a tree"), ("eat cow", "eat the cow for food"),
             ("drink water", "collect drink from the lake"), ("place table", "put down a crafting table")]
    sim = minilm.similarity([a for a, _ in pairs], [b for _, b in pairs])
    for i in range(len(pairs)):  # each paraphrase is closer than every unrelated sentence
        assert sim[i, i] > np.delete(sim[i], i).max()
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_per_string_cache(minilm):
    texts = ["defeat zombie", "wake up", "defeat zombie"]
    misses0, hits0 = minilm.misses, minilm.hits
    first = minilm.embed(texts)
    assert minilm.misses - misses0 == 2  # the duplicate is encoded once
    calls = []
    original = minilm._encode
    minilm._encode = lambda batch: calls.append(batch) or original(batch)
    try:
        second = minilm.embed(["wake up", "defeat zombie"])
    finally:
        minilm._encode = original
    assert calls == [] and minilm.hits - hits0 == 1 + 2
    np.testing.assert_array_equal(second, first[[1, 0]])
    with pytest.raises(TypeError):
        minilm.embed("one string")


def test_lru_bound():
    bow = BowEmbedder(cache_size=2)
    bow.embed(["a", "b", "c"])
    assert bow.cache_stats["entries"] == 2
    assert bow.embed(["a"]).shape == (1, 384)


def test_bow_hashing_interface_and_stability():
    bow = make_embedder("bow")
    e = bow.embed(["Collect wood!", "wood collect", "eat cow", "!!!"])
    assert e.shape == (4, 384)
    np.testing.assert_allclose(e[0], e[1])  # order and case do not matter
    assert abs(float(e[0] @ e[2])) < 0.5 and not e[3].any()  # no words -> zero row
    np.testing.assert_allclose(np.linalg.norm(e[:3], axis=1), 1.0, atol=1e-6)
    code = ("from llmguide.llm.embeddings import BowEmbedder; import numpy as np;"
            "print(int(np.argmax(np.abs(BowEmbedder().embed(['diamond'])[0]))))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == int(np.argmax(np.abs(bow.embed(["diamond"])[0])))  # stable across processes


def test_bow_fixed_vocabulary():
    bow = BowEmbedder(vocabulary=["collect wood", "eat cow", "wood"])
    assert bow.dim == 4  # collect, wood, eat, cow
    sim = bow.similarity(["collect the wood"], ["collect wood", "eat cow"])
    assert sim[0, 0] == pytest.approx(1.0) and sim[0, 1] == 0.0
    with pytest.raises(LLMGuideError):
        BowEmbedder(vocabulary=["!!"])


def test_make_embedder_kinds(minilm):
    assert isinstance(make_embedder("bow", dim=64), BowEmbedder) and make_embedder("bow", dim=64).dim == 64
    with pytest.raises(LLMGuideError, match="unknown embedder kind"):
        make_embedder("word2vec")
