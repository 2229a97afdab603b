"""GLAM: the LM as policy (real Gemma 3 270M through HFLM), LoRA, value head, PPO update, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from llmguide.envs.babyai.env import ACTION_STRINGS
from llmguide.methods.glam.learner import GLAMPPO
from llmguide.methods.glam.policy import History, LMPolicy, ValueHead, apply_lora, d_model_of, glam_prompt

SHORT = glam_prompt("go to the red ball", ["You see a red ball 1 step forward"], [], ACTION_STRINGS)
OTHER = glam_prompt("pick up the blue key", ["You see a blue key 2 steps left"], [], ACTION_STRINGS)


def _hf_available() -> bool:
    from conftest import embedded_hf_ready

    return embedded_hf_ready()


needs_hf = pytest.mark.skipif(not _hf_available(), reason="embedded Gemma not converted to safetensors yet")


@pytest.fixture(scope="module")
def lora_policy():
    from llmguide.llm.backends.hf import HFLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # on a shared 2-core machine one thread is many times faster
    torch.manual_seed(0)
    lm = HFLM(trainable=False)
    apply_lora(lm, r=4, alpha=8)
    yield LMPolicy(lm, ACTION_STRINGS, ValueHead(d_model_of(lm), 32))
    torch.set_num_threads(threads)


def test_prompt_follows_glam_template_and_history_keeps_last_k():
    text = glam_prompt("go to the red ball", ["a", "b", "c"], ["turn left", "go forward"], ACTION_STRINGS)
    assert text.startswith("Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle")
    assert "\n Goal of the agent: go to the red ball\n Observation 0: a\n Action 0: turn left\n" in text
    assert text.endswith(" Observation 2: c\n Action 2:")   # the candidate " <action>" continues it
    with pytest.raises(ValueError):
        glam_prompt("g", ["a", "b"], [], ACTION_STRINGS)
    hist = History(2, k=2)
    hist.reset(0, "g0", "o0")
    hist.reset(1, "g1", "p0")
    for t in range(1, 4):
        hist.step(0, ACTION_STRINGS[t], f"o{t}")
    prompts = hist.prompts(ACTION_STRINGS)
    assert "Observation 0: o2\n Action 0: pick up\n Observation 1: o3\n Action 1:" in prompts[0]
    assert "o1" not in prompts[0] and prompts[1].endswith("Observation 0: p0\n Action 0:")
    hist.reset(0, "new goal", "fresh")
    assert hist.prompts(ACTION_STRINGS)[0].endswith("Goal of the agent: new goal\n Observation 0: fresh\n Action 0:")


@needs_hf
def test_action_distribution_is_softmax_of_summed_logprobs(lora_policy):
    logp, values = lora_policy([SHORT])
    naive = torch.tensor(lora_policy.lm.naive_score([SHORT], [lora_policy.candidates])[0])
    assert logp.shape == (1, len(ACTION_STRINGS)) and values.shape == (1,)
    torch.testing.assert_close(logp[0].exp(), torch.softmax(naive, 0), atol=2e-3, rtol=1e-3)
    assert abs(float(logp[0].detach().exp().sum()) - 1.0) < 1e-5


@needs_hf
def test_gradients_reach_lora_and_value_head_only(lora_policy):
    lora_policy.zero_grad(set_to_none=True)
    logp, values = lora_policy([SHORT])
    (logp[0, 2] + values.sum()).backward()
    named = dict(lora_policy.named_parameters())
    lora = {n: p for n, p in named.items() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in lora.items() if "lora_B" in n)
    base = [p for n, p in named.items() if "lora_" not in n and not n.startswith("value_head")]
    assert base and all(not p.requires_grad and p.grad is None for p in base)
    assert all(p.grad is not None for p in lora_policy.value_head.parameters())
    # the value head reads the context representation HFLM returns (one row per context)
    with torch.no_grad():
        _, hidden = lora_policy.lm.score_with_hidden([SHORT, OTHER], [lora_policy.candidates] * 2)
        _, v = lora_policy([SHORT, OTHER])
    torch.testing.assert_close(v, lora_policy.value_head(hidden))
    assert hidden.shape == (2, d_model_of(lora_policy.lm)) and not torch.allclose(hidden[0], hidden[1])
    lora_policy.zero_grad(set_to_none=True)


@needs_hf
def test_ppo_update_raises_probability_of_positive_advantage_action(lora_policy):
    from omegaconf import OmegaConf

    from llmguide.envs import make_vector_env

    envs = make_vector_env({"name": "babyai", "task": "GoToRedBall"}, 1, seed=0)
    before_state = lora_policy.trainable_state()
    try:
        cfg = OmegaConf.create({"update_epochs": 1, "num_minibatches": 1, "lr": 5e-3, "ent_coef": 0.0, "vf_coef": 0.0,
                                "clip_coef": 10.0})
        agent = GLAMPPO(envs, lora_policy, cfg, seed=0)
        rewarded, punished = 2, 0   # "go forward" gets +advantage, "turn left" gets -advantage
        with torch.no_grad():
            p_before = lora_policy([SHORT])[0][0].exp()
        old = np.log(p_before.numpy()[[rewarded, punished]])
        metrics = agent.ppo_update([SHORT, SHORT], np.array([rewarded, punished]), old.astype(np.float32),
                                   np.array([1.0, -1.0], np.float32), np.zeros(2, np.float32))
        with torch.no_grad():
            p_after = lora_policy([SHORT])[0][0].exp()
        assert np.isfinite(metrics["losses/policy_loss"]) and abs(metrics["losses/approx_kl"]) < 1e-4
        assert p_after[rewarded] > p_before[rewarded]
        assert p_after[punished] < p_before[punished]
        state = agent.state_dict()
        assert state["algo"] == "glam" and any("lora_B" in n for n in state["policy"])
        assert not any("lora_" not in n and not n.startswith("value_head") for n in state["policy"])
    finally:
        lora_policy.load_trainable_state(before_state)
        envs.close()


@needs_hf
def test_behaviour_cloning_from_bot_demonstrations_raises_demo_action_probability(lora_policy):
    from llmguide.envs.babyai.env import bot_demonstrations
    from llmguide.methods.glam.learner import behaviour_clone, demonstration_samples

    demos = bot_demonstrations({"name": "babyai", "task": "GoToRedBall"}, 1, seed=3)
    prompts, actions = demonstration_samples(demos, ACTION_STRINGS, k_history=2)
    assert len(prompts) == len(demos[0]["actions"]) and actions == demos[0]["actions"]
    assert demos[0]["mission"] in prompts[0] and demos[0]["captions"][0] in prompts[0]
    if len(prompts) > 1:   # the second prompt remembers the first caption and the bot's first action
        assert f"Action 0: {ACTION_STRINGS[actions[0]]}\n" in prompts[1]
    prompts, actions = prompts[:2], actions[:2]
    before_state = lora_policy.trainable_state()
    try:
        with torch.no_grad():
            before = lora_policy(prompts)[0].gather(1, torch.tensor(actions)[:, None]).sum()
        losses = behaviour_clone(lora_policy, prompts, actions, epochs=1, minibatch=2, lr=5e-3)
        with torch.no_grad():
            after = lora_policy(prompts)[0].gather(1, torch.tensor(actions)[:, None]).sum()
        assert len(losses) == 1 and after > before
    finally:
        lora_policy.load_trainable_state(before_state)


@needs_hf
def test_batched_scoring_gives_the_same_ppo_gradients_as_one_prompt_per_forward(lora_policy):
    """``method.score_batch`` > 1 (the GPU setting) trains the same policy: the log-probs, values and the LoRA
    and value-head gradients of a PPO-style loss equal those of one prompt per forward."""
    prompts = [SHORT, OTHER, glam_prompt("open the door", ["You see a door 3 steps right", "You see a wall"],
                                         ["turn right"], ACTION_STRINGS)]
    grads = {}
    for batch in (1, 3):
        lora_policy.score_batch = batch
        logp, values = lora_policy(prompts)
        loss = -(logp[:, 2].sum() + logp[1, 0]) + values.pow(2).sum()
        lora_policy.zero_grad(set_to_none=True)
        loss.backward()
        grads[batch] = ({n: p.grad.clone() for n, p in lora_policy.named_parameters() if p.grad is not None},
                        logp.detach(), values.detach())
    lora_policy.score_batch = 1
    lora_policy.zero_grad(set_to_none=True)
    (g1, logp1, v1), (g3, logp3, v3) = grads[1], grads[3]
    assert torch.allclose(logp1, logp3, atol=1e-4) and torch.allclose(v1, v3, atol=1e-4)
    assert set(g1) == set(g3) and any("lora_" in n for n in g1) and any("value_head" in n for n in g1)
    for name in g1:
        assert torch.allclose(g1[name], g3[name], atol=1e-4, rtol=1e-3), name


@needs_hf
def test_eager_attention_scores_a_left_padded_batch_as_sdpa_does(lora_policy, capsys):
    """``llm.attn_implementation=eager`` (the candidate fix for GLAM's non-finite gradients on a GPU) loads the
    eager kernel and gives the same action log-probs as the default on a left-padded batch; an unknown value is
    one line naming the key, exit 2."""
    from llmguide import cli
    from llmguide.llm.backends.hf import HFLM

    long = glam_prompt("open the door", ["You see a door 3 steps right", "You see a wall 1 step forward",
                                         "You see a grey key 2 steps left"], ["turn right", "go forward"],
                       ACTION_STRINGS)
    prompts = [SHORT, long, OTHER]   # left padding of different widths in one forward
    eager = HFLM(attn_implementation="eager")
    assert eager.model.config._attn_implementation == "eager"
    assert lora_policy.lm.model.config._attn_implementation != "eager"
    with torch.no_grad():
        lora_policy.score_batch = 3
        want, _ = lora_policy.action_logits(prompts)   # LoRA's B starts at zero: the base model's scores
        lora_policy.score_batch = 1
        got, _ = LMPolicy(eager, ACTION_STRINGS, ValueHead(d_model_of(eager), 8), score_batch=3).action_logits(prompts)
    assert torch.allclose(got, want, atol=1e-3), (got - want).abs().max()
    code = cli.main(["train", "env=babyai", "method=glam", "llm=hf", "llm.attn_implementation=flash", "total_steps=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "config error at 'llm.attn_implementation'" in err[-1] and "flash" in err[-1]


@needs_hf
def test_train_cli_end_to_end_writes_metrics_checkpoint_and_eval(tmp_path):
    from llmguide import cli

    threads = torch.get_num_threads()
    code = cli.main(["train", "env=babyai", "method=glam", "llm=hf", "total_steps=2", "num_envs=1",
                     "env.task=GoToRedBall", "env.max_steps=2", "agent.num_steps=2", "agent.num_minibatches=1",
                     "agent.update_epochs=1", "method.k_history=1", "method.value_hidden=16", "eval.episodes=1",
                     "progress=false", f"run.dir={tmp_path}", "run.name=glam"])
    torch.set_num_threads(threads)   # the recipe sets agent.torch_threads
    assert code == 0
    run = tmp_path / "glam"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("losses/policy_loss" in r and np.isfinite(r["losses/policy_loss"]) for r in records)
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["step"] == 2 and ckpt["agent"]["algo"] == "glam"
    assert any("lora_" in n for n in ckpt["agent"]["policy"])
    result = json.loads((run / "eval.json").read_text())
    assert result["episodes"] == 1 and 0.0 <= result["success_rate"] <= 1.0 and result["length_mean"] <= 2


@needs_hf
def test_training_off_a_float32_cpu_refuses_a_precision_whose_action_distribution_breaks(tmp_path, capsys):
    """Gemma 3 in float16 overflows (every action log-prob NaN): the device check stops the run before the first
    rollout with one line naming llm.dtype, instead of training on garbage or dying in a traceback."""
    from llmguide import cli

    threads = torch.get_num_threads()
    code = cli.main(["train", "env=babyai", "method=glam", "llm=hf", "llm.dtype=float16", "total_steps=2",
                     "num_envs=1", "env.task=GoToRedBall", "agent.num_steps=2", "agent.num_minibatches=1",
                     "agent.update_epochs=1", "method.k_history=1", "method.value_hidden=16", "eval.episodes=0",
                     "progress=false", f"run.dir={tmp_path}", "run.name=fp16"])
    torch.set_num_threads(threads)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert "config error at 'llm.dtype'" in err[-1] and "not finite" in err[-1]
    assert (tmp_path / "fp16" / "metrics.jsonl").read_text() == ""   # no rollout ran


@needs_hf
def test_device_check_passes_bfloat16_and_catches_a_distribution_that_differs():
    """bfloat16 on the CPU spreads the action mass as float32 does (passes); a policy whose scores differ from
    its float32 copy (here: a bias on one action's logits, as a broken kernel would give) is caught."""
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.device import parity_error

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    policy = LMPolicy(HFLM(dtype="bfloat16"), ACTION_STRINGS, ValueHead(640, 16))
    prompts = [SHORT, OTHER]
    assert parity_error(policy, prompts) is None

    class Skewed(LMPolicy):   # the device's numbers go wrong, the float32 CPU copy's do not
        def action_logits(self, prompts, lm=None, action_head=None):
            logits, hidden = super().action_logits(prompts, lm, action_head)
            return (logits + 30.0 * torch.nn.functional.one_hot(torch.tensor(0), logits.shape[1]) if lm is None
                    else logits), hidden

    skewed = Skewed(policy.lm, ACTION_STRINGS, policy.value_head)
    reason = parity_error(skewed, prompts)
    torch.set_num_threads(threads)
    assert reason is not None and "differ from float32 on the CPU" in reason and "bfloat16" in reason


@needs_hf
def test_bc_only_run_then_eval_verb_runs_generalisation_tests(tmp_path):
    """GLAM's BC-Bot baseline: cloning on bot episodes, no PPO; ``llmguide eval`` reloads the adapters."""
    from llmguide import cli

    threads = torch.get_num_threads()
    common = ["env=babyai", "method=glam", "llm=hf", "num_envs=1", "env.task=GoToRedBall", "env.max_steps=2",
              "method.k_history=1", "method.value_hidden=16", "eval.episodes=1", "progress=false",
              f"run.dir={tmp_path}", "run.name=bc"]
    code = cli.main(["train", *common, "total_steps=2", "method.ppo=false", "method.bc_episodes=1",
                     "method.bc_minibatch=8", "method.bc_lr=5e-3", "method.post_tests=[oov_nouns,synonym_actions]",
                     "method.post_test_episodes=1"])
    assert code == 0
    run = tmp_path / "bc"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    bc = next(r for r in records if "bc/samples" in r)
    assert bc["bc/samples"] == 2 and bc["bc/loss_first"] > 0   # one bot episode, cut at env.max_steps=2
    assert not any("losses/policy_loss" in r for r in records)   # method.ppo=false: no RL update
    result = json.loads((run / "eval.json").read_text())
    assert result["step"] == 0 and set(result["generalisation"]) == {"oov_nouns", "synonym_actions"}
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["agent"]["policy"]
    (run / "eval.json").unlink()
    assert cli.main(["eval", str(run), "method.post_tests=[invented_words]", "method.post_test_episodes=1"]) == 0
    again = json.loads((run / "eval.json").read_text())
    assert again["episodes"] == again["sampled"]["episodes"] == 1   # the eval verb runs greedy and sampled
    assert set(again["generalisation"]) == {"invented_words"} and again["generalisation"]["invented_words"]["episodes"] == 1
    assert any("lora_B" in n and v.abs().sum() > 0 for n, v in ckpt.items())   # cloning moved the adapters
    torch.set_num_threads(threads)


# --- generalisation tests, NPAE, BC step -----------------------------------------------------------
class RecordingPolicy:
    """A scripted text policy (always action 2): records every prompt it is shown."""

    def __init__(self):
        self.action_strings = list(ACTION_STRINGS)
        self.prompts: list[str] = []

    def act(self, prompts, greedy=False):
        self.prompts += list(prompts)
        return np.array([2] * len(prompts)), np.zeros(len(prompts)), np.zeros(len(prompts))


def test_word_rewrite_replaces_whole_words_only():
    from llmguide.methods.glam.generalisation import word_rewrite

    rewrite = word_rewrite({"box": "afze", "red": "faze"})
    assert rewrite("go to the red box, You see a red boxer") == "go to the faze afze, You see a faze boxer"
    assert rewrite("Goal of the agent: pick up the blue key") == "Goal of the agent: pick up the blue key"
    from llmguide.methods.glam.generalisation import TESTS

    prompt = glam_prompt("go to the red ball", ["You see a red ball 1 step forward"], [], ACTION_STRINGS)
    assert "\n I would like the agent to: go to the red ball\n" in TESTS["goal_prefix"].rewrite()(prompt)


def test_generalisation_tests_rewrite_prompts_and_swap_actions_then_restore():
    from llmguide.methods.glam.generalisation import SYNONYM_ACTIONS, run_tests

    policy = RecordingPolicy()
    env = {"name": "babyai", "task": "GoToLocal", "max_steps": 3}
    results = run_tests(policy, env, ["invented_nouns"], episodes=2, seed=5, k_history=2)
    seen = "\n".join(policy.prompts)
    assert results["invented_nouns"]["episodes"] == 2 and len(policy.prompts) == 6
    assert any(w in seen for w in ("dax", "xolo", "afze"))
    assert not any(f" {w}" in seen for w in ("key", "ball", "box"))
    policy.prompts.clear()
    results = run_tests(policy, env, ["synonym_actions"], episodes=1, seed=5, k_history=2)
    assert policy.prompts[0].startswith("Possible action of the agent: " + ", ".join(SYNONYM_ACTIONS))
    assert "Action 0: move_ahead\n" in policy.prompts[1]   # the history names the action as the policy saw it
    assert policy.action_strings == list(ACTION_STRINGS)   # restored
    with pytest.raises(ValueError, match="unknown generalisation test"):
        run_tests(policy, env, ["french"], episodes=1, seed=0)


def test_new_composition_and_heldout_levels_are_solvable_and_mention_what_they_test():
    from llmguide.envs.babyai.env import HELD_OUT, bot_demonstrations

    demos = bot_demonstrations({"name": "babyai", "task": "PickupPickupLocal"}, 4, seed=1)
    assert all(d["mission"].startswith("pick up") and ", then pick up" in d["mission"] for d in demos)
    assert np.mean([d["success"] for d in demos]) >= 0.75
    held = bot_demonstrations({"name": "babyai", "task": "MixedTestLocal"}, 6, seed=2)
    assert all(any(h in d["mission"] for h in HELD_OUT) for d in held)


@needs_hf
def test_npae_keeps_pretrained_embeddings_and_scores_with_action_heads():
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.policy import MLPHead

    torch.set_num_threads(1)
    pretrained = HFLM()
    torch.manual_seed(0)
    lm = HFLM(pretrained=False, trainable=True)
    emb, emb0 = lm.model.get_input_embeddings().weight, pretrained.model.get_input_embeddings().weight
    torch.testing.assert_close(emb, emb0)
    names = [n for n, _ in lm.model.named_parameters() if "q_proj" in n][:1]
    assert names and not torch.allclose(dict(lm.model.named_parameters())[names[0]],
                                        dict(pretrained.model.named_parameters())[names[0]])
    # context_states is the same context representation score_with_hidden gives
    with torch.no_grad():
        _, hidden = pretrained.score_with_hidden([SHORT, OTHER], [[" go forward"]] * 2)
        states = pretrained.context_states([SHORT, OTHER])
    torch.testing.assert_close(states, hidden, atol=1e-4, rtol=1e-4)
    d = d_model_of(lm)
    policy = LMPolicy(lm, ACTION_STRINGS, ValueHead(d, 16), action_head=MLPHead(d, 16, len(ACTION_STRINGS)))
    logp, values = policy([SHORT, OTHER])
    assert logp.shape == (2, 6) and values.shape == (2,)
    logp[0, 0].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in lm.model.named_parameters() if "mlp" in n)
    assert all(p.grad is not None for p in policy.action_head.parameters())
    policy.action_strings = ["a", "b", "c", "d", "e", "f"]   # action heads do not read the strings
    with torch.no_grad():
        torch.testing.assert_close(policy([SHORT])[0][0], logp[0].detach(), atol=1e-5, rtol=1e-5)


def test_npae_and_glam_config_errors_name_the_key():
    from llmguide.core.errors import ConfigError
    from llmguide.pipelines import load_config

    cfg = load_config(["env=babyai", "method=npae", "llm=hf"])
    assert cfg.method.name == "npae" and not cfg.method.pretrained and cfg.method.action_heads and not cfg.method.lora
    assert cfg.agent.reward_scale == 20.0   # the rest comes from glam.yaml
    with pytest.raises(ConfigError, match="method.post_tests"):
        load_config(["env=babyai", "method=glam", "llm=hf", "method.post_tests=[french]"])
    with pytest.raises(ConfigError, match="method.bc_episodes"):
        load_config(["env=babyai", "method=glam", "llm=hf", "method.bc_episodes=-1"])
    from llmguide.methods.glam.recipe import GLAMRecipe

    with pytest.raises(ConfigError, match="method.lora"):   # before any model is loaded
        GLAMRecipe(load_config(["env=babyai", "method=npae", "llm=hf", "method.lora=true"])).check()


@needs_hf
@pytest.mark.parametrize("method", ["glam", "npae"])
def test_seq2seq_lm_trains_as_policy_through_the_cli(tmp_path, method):
    """Any transformers seq2seq model works as the policy: a tiny random T5 built here (Gemma tokenizer)."""
    import shutil

    from transformers import T5Config, T5ForConditionalGeneration

    from llmguide import cli
    from llmguide.llm.backends.hf import embedded_safetensors_dir

    torch.manual_seed(0)
    model = tmp_path / "t5"
    T5ForConditionalGeneration(T5Config(vocab_size=262144, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2,
                                        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).save_pretrained(model)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(embedded_safetensors_dir() / name, model / name)
    threads = torch.get_num_threads()
    code = cli.main(["train", "env=babyai", f"method={method}", "llm=hf", f"llm.model_path={model}", "total_steps=4",
                     "num_envs=1", "env.task=GoToRedBall", "env.max_steps=4", "agent.num_steps=4",
                     "agent.num_minibatches=2", "method.value_hidden=8", "eval.episodes=1", "progress=false",
                     f"run.dir={tmp_path}", "run.name=run"])
    torch.set_num_threads(threads)
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(np.isfinite(r.get("losses/policy_loss", np.nan)) for r in records)
    policy = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=False)["agent"]["policy"]
    if method == "glam":   # peft's default T5 targets: LoRA on the q and v projections only
        assert any(".q.lora_A" in n for n in policy) and all("lora_" in n or "value_head" in n for n in policy)
    else:                  # NPAE: the whole LM and the action head train
        assert any("action_head" in n for n in policy) and any("encoder.block.0" in n for n in policy)


def test_history_peek_is_the_next_prompt_without_recording_it():
    h = History(2, 2)
    h.reset(0, "go to the red ball", "You see a wall")
    peeked = h.peek(0, "turn left", "You see a red ball", ACTION_STRINGS)
    assert h.prompts(ACTION_STRINGS)[0] != peeked        # nothing recorded
    h.step(0, "turn left", "You see a red ball")
    assert h.prompts(ACTION_STRINGS)[0] == peeked        # what a step would have given


@needs_hf
def test_micro_batches_accumulate_to_the_same_update_as_one_forward(lora_policy):
    """``agent.micro_batch``: GLAM's minibatch in several forwards, gradients accumulated, one optimizer step:
    the same parameters after the update as one forward over the minibatch."""
    from omegaconf import OmegaConf

    from llmguide.envs import make_vector_env

    envs = make_vector_env({"name": "babyai", "task": "GoToRedBall"}, 1, seed=0)
    start = lora_policy.trainable_state()
    prompts = [SHORT, OTHER, SHORT, OTHER]
    actions, old = np.array([2, 0, 1, 2]), np.log(np.full(4, 1 / len(ACTION_STRINGS), np.float32))
    adv, ret = np.array([1.0, -1.0, 0.5, 0.2], np.float32), np.array([0.1, 0.0, 0.3, 0.2], np.float32)
    after = {}
    try:
        for micro in (0, 1):
            lora_policy.load_trainable_state(start)
            cfg = OmegaConf.create({"update_epochs": 1, "num_minibatches": 1, "micro_batch": micro, "lr": 5e-3})
            GLAMPPO(envs, lora_policy, cfg, seed=0).ppo_update(prompts, actions, old, adv, ret)
            after[micro] = {k: v.clone() for k, v in lora_policy.trainable_state().items()}
    finally:
        lora_policy.load_trainable_state(start)
        envs.close()
    moved = [k for k in after[0] if not torch.allclose(after[0][k], start[k])]
    assert moved and any("lora_" in k for k in moved)
    for k in after[0]:
        assert torch.allclose(after[0][k], after[1][k], atol=1e-5, rtol=1e-4), k


@needs_hf
def test_a_minibatch_with_a_non_finite_gradient_is_skipped_not_applied(lora_policy, caplog):
    """A PPO ratio that overflows (an old log-prob far below the new one) gives NaN gradients through the clipped
    objective. That minibatch is skipped and counted, with a warning; the weights stay finite, and the next
    minibatch still trains (the lease-4 H200 runs lost 4 of 6 seeds to NaN weights before this guard)."""
    from omegaconf import OmegaConf

    from llmguide.envs import make_vector_env

    envs = make_vector_env({"name": "babyai", "task": "GoToRedBall"}, 1, seed=0)
    start = lora_policy.trainable_state()
    prompts, actions = [SHORT, OTHER], np.array([2, 0])
    old = np.array([-500.0, np.log(1 / len(ACTION_STRINGS))], np.float32)   # exp(new - old) = inf for the first
    adv, ret = np.array([-1.0, 1.0], np.float32), np.zeros(2, np.float32)
    try:
        cfg = OmegaConf.create({"update_epochs": 1, "num_minibatches": 2, "lr": 5e-3, "norm_adv": False})
        agent = GLAMPPO(envs, lora_policy, cfg, seed=0)
        with caplog.at_level("WARNING"):
            metrics = agent.ppo_update(prompts, actions, old, adv, ret)
        after = lora_policy.trainable_state()
    finally:
        lora_policy.load_trainable_state(start)
        envs.close()
    assert metrics["losses/skipped_minibatches"] == 1.0
    assert all(torch.isfinite(v).all() for v in after.values())
    assert any(not torch.equal(after[k], start[k]) for k in after)   # the finite minibatch was applied
    assert np.isfinite(metrics["losses/policy_loss"]) and np.isfinite(metrics["losses/entropy"])
    assert "non-finite gradient" in caplog.text and "max_abs_logratio" in caplog.text
