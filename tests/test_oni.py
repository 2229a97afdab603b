"""ONI: online annotation (dedup, persistence, non-blocking), label parsing, the three reward variants.

Every LM answer comes from the real embedded Gemma 3 270M model; ``CountingLM`` only passes calls
through to it, counting the prompts that really reach the model, and can hold them behind a gate
(a slow server) so the test controls when labels arrive.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from llmguide.llm.base import LanguageModel  # noqa: E402
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import LLMCache  # noqa: E402
from llmguide.llm.service.core import LLMService  # noqa: E402
from llmguide.methods.oni.annotator import (  # noqa: E402
    MessageAnnotator,
    PairAnnotator,
    canonicalize_message,
    parse_label,
)
from llmguide.methods.oni.ranking import ONIRanking, normalize_threshold  # noqa: E402
from llmguide.methods.oni.reward import EpisodicCounter, ONIClassification, ONIRetrieval  # noqa: E402
from llmguide.rewards.base import TransitionBatch  # noqa: E402

KILL, GOLD, WALL, DOOR = "You kill the newt!", "You see here 7 gold pieces.", "It's solid stone.", "This door is locked."


class CountingLM(LanguageModel):
    """Pass-through to a real LM that counts the prompts it receives; ``gate`` holds calls until set."""

    def __init__(self, inner: LanguageModel):
        self.inner = inner
        self.backend, self.model_id = inner.backend, inner.model_id
        self.gate = threading.Event()
        self.gate.set()
        self.prompts: Counter[str] = Counter()

    def generate(self, prompts, **kw):
        self.gate.wait(120)
        self.prompts.update(prompts)
        return self.inner.generate(prompts, **kw)

    def score(self, contexts, candidates, *, normalize=False):
        self.gate.wait(120)
        self.prompts.update(contexts)
        return self.inner.score(contexts, candidates, normalize=normalize)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def embedded():
    from llmguide.llm.backends.embedded import EmbeddedLM

    lm = EmbeddedLM()
    yield lm
    lm.close()


@pytest.fixture
def stack(embedded, tmp_path):
    """(counting LM, cached LM, service) over a fresh SQLite cache file."""
    counting = CountingLM(embedded)
    cached = CachedLM(counting, LLMCache(tmp_path / "cache.sqlite"))
    service = LLMService(cached, max_batch=8)
    yield counting, cached, service
    counting.gate.set()
    service.close()


def make_batch(messages: list[list[str]], dones: list[list[bool]] | None = None) -> TransitionBatch:
    T, N = len(messages), len(messages[0])
    d = np.zeros((T, N), bool) if dones is None else np.array(dones, bool)
    infos = [[{"caption": m, "events": [], "mission": ""} for m in row] for row in messages]
    z = np.zeros((T, N), np.float32)
    return TransitionBatch(obs={}, actions=np.zeros((T, N), np.int64), next_obs={}, rewards=z, terminated=d, infos=infos)


def test_same_message_from_many_envs_is_one_request_and_learner_never_blocks(stack):
    counting, _, service = stack
    counting.gate.clear()  # the "server" is busy: labels cannot arrive yet
    module = ONIRetrieval(MessageAnnotator(service), num_envs=4, beta=0.0, pending_default=0.25)
    batch = make_batch([[KILL, KILL, GOLD, ""], [KILL, GOLD, KILL, KILL]])
    for _ in range(5):  # five minibatches while pending: compute returns at once with the default
        r = module.compute(batch)
        assert r.tolist() == [[0.25, 0.25, 0.25, 0.0], [0.25, 0.25, 0.25, 0.25]]
    assert module.annotator.counts["requests"] == 2 and module.annotator.counts["duplicate_requests"] == 0
    counting.gate.set()
    assert module.annotator.wait(120)
    for _ in range(3):  # labelled messages are never sent again
        r = module.compute(batch)
    label = {m: module.annotator.get(m) for m in (KILL, GOLD)}
    assert set(label.values()) <= {0.0, 1.0}
    assert r[0].tolist() == [label[KILL], label[KILL], label[GOLD], 0.0]
    prompts = module.annotator.template.render
    assert counting.prompts[prompts(message=KILL)] == 1 and counting.prompts[prompts(message=GOLD)] == 1
    assert sum(counting.prompts.values()) == 2
    assert service.lm_metrics()["lm/requests"] == 2
    assert "" not in module.annotator.labels  # the empty message is never annotated


def test_labels_persist_in_the_sqlite_cache_for_a_new_annotator_and_a_new_process(stack, embedded, tmp_path):
    counting, cached, service = stack
    first = MessageAnnotator(service)
    first.submit([KILL, WALL, DOOR])
    assert first.wait(120)
    labels = {m: first.get(m) for m in (KILL, WALL, DOOR)}
    assert sum(counting.prompts.values()) == 3

    # a new object over the same file: labels are there at once, no LM call at all
    counting2 = CountingLM(embedded)
    with LLMService(CachedLM(counting2, LLMCache(tmp_path / "cache.sqlite")), max_batch=8) as service2:
        second = MessageAnnotator(service2)
        assert second.submit([KILL, WALL, DOOR]) == 0
        assert {m: second.get(m) for m in labels} == labels
        assert second.counts["cache_reused"] == 3
        assert sum(counting2.prompts.values()) == 0 and service2.lm_metrics()["lm/requests"] == 0

    # a new process (another run / seed) sharing the cache file
    code = f"""
import json
from llmguide.llm.cache.store import LLMCache
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.backends.embedded import EmbeddedLM
from llmguide.llm.service.core import LLMService
from llmguide.methods.oni.annotator import MessageAnnotator
lm = CachedLM(EmbeddedLM(), LLMCache({str(tmp_path / "cache.sqlite")!r}))
with LLMService(lm) as svc:
    a = MessageAnnotator(svc)
    sent = a.submit({[KILL, WALL, DOOR]!r})
    print(json.dumps({{"sent": sent, "labels": [a.get(m) for m in {[KILL, WALL, DOOR]!r}],
                      "backend_calls": lm.stats["backend_calls"], "submitted": svc.lm_metrics()["lm/requests"]}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"sent": 0, "labels": [labels[KILL], labels[WALL], labels[DOOR]], "backend_calls": 0,
                      "submitted": 0}


def test_canonicaliser_merges_messages_that_differ_in_numbers(stack):
    counting, _, service = stack
    assert canonicalize_message("You see here 12 gold pieces.  ") == "You see here <N> gold pieces."
    module = ONIRetrieval(MessageAnnotator(service), num_envs=2, beta=0.0, canonicalize=True)
    module.compute(make_batch([[GOLD, "You see here 12 gold pieces."]]))
    assert module.annotator.wait(120)
    r = module.compute(make_batch([["You see here 3 gold pieces.", GOLD]]))
    assert sum(counting.prompts.values()) == 1
    assert r[0, 0] == r[0, 1] == module.annotator.get("You see here <N> gold pieces.")


def test_label_is_parsed_from_its_tag_only():
    assert parse_label("no</answer>") == 0.0  # completion right after the prompt's opening <answer>
    assert parse_label("The newt mentions yes twice, yes. <answer>no</answer>") == 0.0
    assert parse_label("Killing gives yes... <answer>yes</answer> but not no") == 1.0
    assert parse_label("yes, this message is clearly helpful for the goal of the game") is None
    assert parse_label("<answer>maybe</answer> yes") is None
    from llmguide.llm.parsing import ParseStats

    stats = ParseStats()
    parse_label("I would say yes, because the door opened and that is progress", stats=stats)
    assert sum(stats.malformed.values()) == 1


def test_generate_mode_reads_the_tagged_answer_from_the_real_model(stack):
    _, _, service = stack
    annot = MessageAnnotator(service, mode="generate")
    annot.submit([KILL])
    assert annot.wait(120)
    completion_label = annot.get(KILL)
    assert completion_label in (0.0, 1.0, None)
    assert annot.counts["labelled"] == 1
    assert annot.counts["unparseable"] == (1 if completion_label is None else 0)


def test_episodic_count_division():
    counter = EpisodicCounter(num_envs=2)
    msgs = [["a", "b"], ["a", "b"], ["a", "a"], ["a", "a"]]
    dones = [[False, False], [False, True], [True, False], [False, False]]
    counts = np.stack([counter.step(m, d) for m, d in zip(msgs, dones, strict=True)])
    assert counts.tolist() == [[1, 1], [2, 2], [3, 1], [1, 2]]
    assert counter.step(["a", "a"], [False, False]).tolist() == [2, 3]  # episodes span batches


def test_retrieval_reward_is_label_over_count_to_the_beta(stack):
    _, _, service = stack
    module = ONIRetrieval(MessageAnnotator(service), num_envs=1, beta=2.0)
    module.compute(make_batch([[KILL]], [[True]]))
    assert module.annotator.wait(120)
    y = module.annotator.get(KILL)
    r = module.compute(make_batch([[KILL], [KILL], [KILL], [KILL]], [[False], [False], [True], [False]]))
    assert r[:, 0].tolist() == pytest.approx([y, y / 4, y / 9, y])


def test_classifier_is_not_used_before_it_has_seen_labels(stack):
    counting, _, service = stack
    counting.gate.clear()
    module = ONIClassification(MessageAnnotator(service), num_envs=3, beta=0.0, pending_default=0.25,
                               background=False, seed=0)
    batch = make_batch([[KILL, GOLD, WALL], [DOOR, KILL, WALL]])
    # an untrained classifier can only say 0 or 1; the module must answer the pending default instead
    assert not module.ready
    assert np.all(module.compute(batch) == 0.25)
    counting.gate.set()
    assert module.annotator.wait(120)
    labels = {m: module.annotator.get(m) for m in (KILL, GOLD, WALL, DOOR)}
    r = module.compute(batch)  # labels known, classifier not trained yet: the label table answers
    assert r[0].tolist() == [labels[KILL], labels[GOLD], labels[WALL]] and not module.ready
    module.update(batch)
    module.trainer.train_round(steps=80)
    assert module.ready and module.trainer.current()[1] == 4
    r = module.compute(batch)
    assert set(np.unique(r)) <= {0.0, 1.0}
    assert r[0].tolist() == [labels[KILL], labels[GOLD], labels[WALL]]  # it fits its 4 labels
    module.close()


def test_ranking_normalisation_and_threshold_reach_the_learner(stack):
    _, _, service = stack
    module = ONIRanking(PairAnnotator(service), num_envs=2, beta=1.0, threshold=0.0, pairs_per_batch=6,
                        background=False, seed=0)
    msgs = [[KILL, GOLD], [WALL, KILL], [KILL, ""]]
    batch = make_batch(msgs)
    r0 = module.compute(batch)
    assert np.all(r0 == 0.0)  # no reward model yet: pending default
    assert module.annotator.counts["requests"] == 3  # the 3 distinct pairs of the 3 messages, none identical
    assert module.annotator.wait(240)
    module.update(batch)
    module.trainer.train_round(steps=20)
    assert module.ready

    before = module.normalizer.state_dict()
    raw_net = module.trainer.current()[0].rewards([KILL, GOLD, WALL])
    r = module.compute(make_batch(msgs))
    # the expected value, computed independently: normaliser updated with the raw outputs of the
    # non-empty transitions, z-scored, thresholded, then divided by the episodic counts (env 0 saw
    # KILL, WALL, KILL in the first batch; env 1 saw GOLD, KILL)
    raw = {KILL: raw_net[0], GOLD: raw_net[1], WALL: raw_net[2]}
    flat = np.array([raw[KILL], raw[GOLD], raw[WALL], raw[KILL], raw[KILL]])
    n = before["count"] + len(flat)
    delta = flat.mean() - before["mean"]
    mean = before["mean"] + delta * len(flat) / n
    var = (before["var"] * before["count"] + flat.var() * len(flat) + delta**2 * before["count"] * len(flat) / n) / n
    z = (flat - mean) / np.sqrt(var + 1e-8)
    shaped = np.where(z > 0.0, z, 0.0)
    expected = [[shaped[0] / 3, shaped[1] / 2], [shaped[2] / 2, shaped[3] / 2], [shaped[4] / 4, 0.0]]
    np.testing.assert_allclose(r, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(r[:2], [[raw[KILL] / 3, raw[GOLD] / 2], [raw[WALL] / 2, raw[KILL] / 2]])
    assert np.all(r >= 0.0)  # the threshold (0.0) removed every negative z
    module.close()


def test_normalize_threshold_zeroes_below_threshold():
    from llmguide.rewards.normalization import RunningMeanStd

    rms = RunningMeanStd()
    out = normalize_threshold(np.array([0.0, 1.0, 2.0, 3.0]), rms, threshold=0.5)
    z = (np.array([0.0, 1.0, 2.0, 3.0]) - rms.mean) / np.sqrt(rms.var + 1e-8)
    assert out.tolist() == pytest.approx(np.where(z > 0.5, z, 0.0).tolist())
    assert out[0] == 0.0 and out[1] == 0.0 and out[3] > 1.0


def test_ellm_bow_rewards_messages_that_share_words_with_the_goal():
    from llmguide.methods.oni.bow import ELLMBoW

    module = ELLMBoW(num_envs=2, goal="kill monsters, collect gold, go down the stairs", threshold=0.1, beta=1.0)
    sim = module.similarity(["You kill the newt! You collect 5 gold.", "It's solid stone.", ""])
    assert sim[0] > 0.1 and sim[1] == 0.0 and sim[2] == 0.0
    r = module.compute(make_batch([["You kill the newt! You collect 5 gold.", "It's solid stone."],
                                   ["You kill the newt! You collect 5 gold.", "It's solid stone."]]))
    assert r[:, 0].tolist() == pytest.approx([sim[0], sim[0] / 2]) and np.all(r[:, 1] == 0)


CRAFTAX_MESSAGES = [
    "Nothing happens.", "You hit a zombie.", "You collect wood.", "You place a table.", "You make a stone pickaxe.",
    "You drink water.", "You eat a cow.", "You defeat a zombie.", "You get 1 wood pickaxe.", "You lose 1 wood.",
    "You fall asleep.", "You wake up.", "You are hit by a zombie.", "You are burnt by lava.",
    "You suffer from hunger.", "You are hurt.", "You feel hungry.", "You are starving.", "You are next to water.",
    "You are next to lava.", "You see a cow, a tree and water.", "You feel thirsty.", "You collect coal.",
    "You collect a diamond.", "You collect iron.", "You collect a sapling.", "You collect stone.",
    "You defeat a skeleton.", "You eat a plant.", "You make an iron pickaxe.", "You make a wood sword.",
    "You place a furnace.",
]


def test_a_label_rate_makes_the_lm_rank_messages_at_that_rate(stack):
    """Gemma 270M says "no" to every Craftax message at the default margin (ONI's Craftax runs: yes-rate 0), so
    its labels carry nothing; with ``yes_rate`` the messages it scores highest are "yes" at about that rate,
    and those labels sit under their own cache key (not the margin rule's)."""
    counting, cached, service = stack
    margin = MessageAnnotator(service, template="crafter_label_short")
    ranked = MessageAnnotator(service, template="crafter_label_short", yes_rate=0.25)
    margin.submit(CRAFTAX_MESSAGES)
    assert margin.wait(300)
    # in a random order (a run meets its messages so): the first labels are decided on fewer margins, so
    # over 32 messages the rate runs above 0.25 (about 0.36 expected); over a run's hundreds it is ~0.25
    ranked.submit([CRAFTAX_MESSAGES[i] for i in np.random.default_rng(0).permutation(len(CRAFTAX_MESSAGES))])
    assert ranked.wait(300)
    assert sum(counting.prompts.values()) == len(CRAFTAX_MESSAGES)   # the second asks the LM cache, not the LM
    assert {margin.get(m) for m in CRAFTAX_MESSAGES} == {0.0}   # margin 1: "no" to every message
    assert ranked._key(KILL) != margin._key(KILL)
    yes = np.array([ranked.get(m) for m in CRAFTAX_MESSAGES])
    assert set(yes.tolist()) == {0.0, 1.0} and 0.1 <= yes.mean() <= 0.55
    scores = cached.score([ranked.prompt(m) for m in CRAFTAX_MESSAGES], [[" yes", " no"]] * len(CRAFTAX_MESSAGES))
    margins = np.array([a - b for a, b in scores])
    assert margins[yes == 1.0].mean() > margins[yes == 0.0].mean()
    with pytest.raises(ValueError, match="yes_rate"):
        MessageAnnotator(service, yes_rate=1.0)


def test_asking_both_orders_cancels_the_small_lms_position_bias(stack):
    """Gemma 270M answers "A > B" to every Craftax pair asked once (2000 of 2000 in the Motif label step), so the
    label only says which message sorts first; asked both ways round, the same pairs split."""
    counting, cached, service = stack
    rng = np.random.default_rng(0)
    pairs = sorted({PairAnnotator.make_pair(*rng.choice(CRAFTAX_MESSAGES, 2, replace=False)) for _ in range(12)})
    once = PairAnnotator(service, template="crafter_pref")
    both = PairAnnotator(service, template="crafter_pref", both_orders=True)
    for annot in (once, both):
        annot.submit(pairs)
        assert annot.wait(300)
    assert {once.get(p) for p in pairs} == {1.0}
    labels = [both.get(p) for p in pairs]
    assert None not in labels and len(set(labels)) > 1
    assert sum(counting.prompts.values()) == 2 * len(pairs)   # the first order's prompts come from the cache
