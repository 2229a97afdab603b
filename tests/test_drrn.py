"""DRRN baseline (GLAM's text Q-network): tokenizer, Q-network, act interface, TD update, SAME_STEP
episode boundaries on real BabyAI-Text, checkpoints, and the CLI end to end."""

from __future__ import annotations

import json
import zlib
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from llmguide.envs.babyai.env import ACTION_STRINGS
from llmguide.methods.glam.drrn import DRRN, DRRNAgent, DRRNPolicy, HashTokenizer, TextReplay
from llmguide.methods.glam.policy import glam_prompt

PROMPTS = [glam_prompt("go to the red ball", ["You see a red ball 2 steps forward"], [], ACTION_STRINGS),
           glam_prompt("pick up the blue key", ["You see a wall 1 step left", "You carry a blue key"],
                       ["pick up"], ACTION_STRINGS),
           "short"]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _policy(seed: int = 0, **kwargs) -> DRRNPolicy:
    torch.manual_seed(seed)
    return DRRNPolicy(ACTION_STRINGS, vocab_size=kwargs.pop("vocab_size", 512), embed_dim=16, hidden_dim=16,
                      **kwargs)


def _agent(policy: DRRNPolicy, num_envs: int = 1, **cfg) -> DRRNAgent:
    envs = SimpleNamespace(num_envs=num_envs)   # td_update never touches the env
    return DRRNAgent(envs, policy, cfg, seed=0)


# --- tokenizer -------------------------------------------------------------------------------------
def test_hash_tokenizer_ids_are_stable_words_lowercased_and_oov_words_get_ids():
    tok = HashTokenizer(vocab_size=100)
    ids = tok.encode("You see a RED ball, 2 steps-forward!")
    assert ids.tolist() == [1 + zlib.crc32(w.encode()) % 99 for w in
                            ("you", "see", "a", "red", "ball", "2", "steps", "forward")]
    assert ids.tolist() == HashTokenizer(100).encode("you see a red ball 2 steps forward").tolist()  # new instance
    invented = tok.encode("dax xolo afze vermilion")   # words never seen before
    assert len(invented) == 4 and all(1 <= i < 100 for i in invented)
    assert tok.encode("dax").tolist() == invented[:1].tolist()
    assert tok.encode("").tolist() == [] and tok.encode(" ,.; ").tolist() == []
    ids, lengths = HashTokenizer.pad([np.array([5, 6, 7]), np.array([], dtype=np.int32), np.array([9])])
    assert ids.tolist() == [[5, 6, 7], [0, 0, 0], [9, 0, 0]] and lengths.tolist() == [3, 1, 1]
    with pytest.raises(ValueError, match="vocab_size"):
        HashTokenizer(1)


# --- network and policy ----------------------------------------------------------------------------
def test_q_shapes_and_padding_does_not_change_a_prompts_q():
    policy = _policy()
    q = policy(PROMPTS)
    assert q.shape == (3, len(ACTION_STRINGS)) and torch.isfinite(q).all()
    for i, prompt in enumerate(PROMPTS):   # alone (no padding) == inside a padded batch
        torch.testing.assert_close(policy([prompt])[0], q[i], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(q[0], q[1])
    # the action encoder really reads the action text: a different string, a different Q
    policy.action_strings = ["rotate left", "rotate right", "move ahead"]   # GLAM's synonym-action test
    q_syn = policy(PROMPTS)
    assert q_syn.shape == (3, 3) and not torch.allclose(q_syn[:, :2], q[:, :2])
    net = DRRN(vocab_size=50, embed_dim=8, hidden_dim=4)
    obs, obs_len = HashTokenizer.pad([np.array([1, 2, 3]), np.array([4])])
    acts, act_len = HashTokenizer.pad([np.array([5]), np.array([6, 7]), np.array([8]), np.array([9])])
    assert net(obs, obs_len, acts, act_len).shape == (2, 4)


def test_act_greedy_is_argmax_and_sampled_logprob_is_log_softmax_of_q_over_temperature():
    policy = _policy(temperature=0.5)
    with torch.no_grad():
        q = policy(PROMPTS)
    actions, logp, q_max = policy.act(PROMPTS, greedy=True)
    assert actions.tolist() == q.argmax(-1).tolist()
    np.testing.assert_allclose(q_max, q.max(-1).values.numpy(), rtol=1e-5)
    expected = torch.log_softmax(q / 0.5, -1)
    np.testing.assert_allclose(logp, expected[torch.arange(3), actions].numpy(), rtol=1e-5)
    torch.manual_seed(1)
    seen = np.zeros((3, len(ACTION_STRINGS)))
    for _ in range(300):
        actions, logp, _ = policy.act(PROMPTS)
        assert actions.dtype.kind == "i" and logp.shape == (3,)
        np.testing.assert_allclose(logp, expected[torch.arange(3), actions].numpy(), rtol=1e-5)
        seen[np.arange(3), actions] += 1
    # sampling follows softmax(Q / T): empirical frequencies near the probabilities
    np.testing.assert_allclose(seen / 300, expected.exp().numpy(), atol=0.12)
    with pytest.raises(ValueError, match="temperature"):
        _policy(temperature=0.0)


# --- TD update ---------------------------------------------------------------------------------------
def _fixed_batch(policy: DRRNPolicy, terminals: list[float]) -> dict:
    ids = [policy.tokenizer.encode(p) for p in PROMPTS]
    return {"obs": ids, "actions": torch.tensor([2, 0, 3]), "rewards": torch.tensor([1.0, 0.0, 0.5]),
            "next_obs": ids[::-1], "terminals": torch.tensor(terminals)}


def test_td_target_is_reward_plus_discounted_max_next_q_except_at_terminals():
    policy = _policy()
    agent = _agent(policy, gamma=0.9, lr=1e-4)
    batch = _fixed_batch(policy, [1.0, 0.0, 0.0])
    with torch.no_grad():
        next_max = policy.q_from_ids(batch["next_obs"]).max(-1).values
    expected = batch["rewards"] + 0.9 * torch.tensor([0.0, 1.0, 1.0]) * next_max
    metrics = agent.td_update(batch)
    assert metrics["charts/td_target"] == pytest.approx(float(expected.mean()), rel=1e-5)
    assert agent.updates == 1 and agent.target_net is None   # GLAM's DRRN: no target network


def test_td_updates_lower_the_loss_and_move_q_toward_the_target():
    policy = _policy()
    agent = _agent(policy, lr=3e-3)
    batch = _fixed_batch(policy, [1.0, 1.0, 1.0])   # terminal: the target is the reward itself
    rows = torch.arange(3)
    with torch.no_grad():
        before = policy.q_from_ids(batch["obs"])[rows, batch["actions"]]
    losses = [agent.td_update(batch)["losses/td_loss"] for _ in range(60)]
    with torch.no_grad():
        after = policy.q_from_ids(batch["obs"])[rows, batch["actions"]]
    assert losses[-1] < 0.1 * losses[0]
    assert (after - batch["rewards"]).abs().max() < (before - batch["rewards"]).abs().max()
    assert (after - batch["rewards"]).abs().max() < 0.1


def test_optional_target_network_is_copied_every_n_updates():
    policy = _policy()
    agent = _agent(policy, lr=1e-2, target_update_every=2)
    batch = _fixed_batch(policy, [0.0, 0.0, 0.0])
    assert agent.target_net is not None
    agent.td_update(batch)
    online, target = policy.net.state_dict(), agent.target_net.state_dict()
    assert not all(torch.equal(online[k], target[k]) for k in online)
    agent.td_update(batch)
    online, target = policy.net.state_dict(), agent.target_net.state_dict()
    assert all(torch.equal(online[k], target[k]) for k in online)


def test_replay_is_a_ring_buffer():
    replay = TextReplay(3)
    for i in range(5):
        replay.add(np.array([i]), i % 2, float(i), np.array([i + 1]), i == 4)
    assert len(replay) == 3 and sorted(int(item[0][0]) for item in replay.items) == [2, 3, 4]
    batch = replay.sample(np.random.default_rng(0), 8)
    assert len(batch["obs"]) == 8 and batch["actions"].shape == (8,) and set(batch["rewards"].tolist()) <= {2.0, 3.0, 4.0}
    with pytest.raises(ValueError):
        TextReplay(0)


# --- learning --------------------------------------------------------------------------------------------
class TurnThenGoForward(gym.Env):
    """A two-step GoToRedBall in text: the ball is 1 step left or right; turning toward it puts it
    1 step forward, then "go forward" reaches it (reward 1).  Any other action ends the episode."""

    observation_space = spaces.Discrete(1)
    action_space = spaces.Discrete(len(ACTION_STRINGS))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.side, self.facing = ("left", "right")[int(self.np_random.integers(2))], False
        return 0, self._info()

    def _info(self) -> dict:
        where = "1 step forward" if self.facing else f"1 step {self.side}"
        return {"caption": f"You see a red ball {where}", "mission": "go to the red ball"}

    def step(self, action):
        wanted = "go forward" if self.facing else f"turn {self.side}"
        if ACTION_STRINGS[int(action)] != wanted:
            return 0, 0.0, True, False, self._info()
        if self.facing:
            return 0, 1.0, True, False, self._info()
        self.facing = True
        return 0, 0.0, False, False, self._info()


def test_drrn_learns_the_two_step_text_task_through_bootstrapped_targets():
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    envs = SyncVectorEnv([TurnThenGoForward] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    policy = _policy(seed=3, vocab_size=256)
    agent = DRRNAgent(envs, policy, {"k_history": 1, "lr": 3e-3, "batch_size": 32, "update_every": 2, "gamma": 0.9},
                      seed=3)
    prompts = [glam_prompt("go to the red ball", [f"You see a red ball 1 step {where}"], [], ACTION_STRINGS)
               for where in ("left", "right", "forward")]
    try:
        agent.learn(1000, progress=False)
    finally:
        envs.close()
    with torch.no_grad():
        q = policy(prompts)
    best = [ACTION_STRINGS.index(a) for a in ("turn left", "turn right", "go forward")]
    assert q.argmax(-1).tolist() == best   # it reads "left" / "right" / "forward" in the caption
    rows = torch.arange(3)
    # Q(ball forward, go forward) -> 1; Q(ball to the side, turn to it) -> 0.9 * 1 (bootstrapped); rest -> 0
    torch.testing.assert_close(q[rows, best], torch.tensor([0.9, 0.9, 1.0]), atol=0.15, rtol=0)
    q[rows, best] = 0.0
    assert q.abs().max() < 0.2


# --- episode boundaries on the real env ---------------------------------------------------------------
class Recorder:
    """A vector env proxy that keeps every step's raw outputs."""

    def __init__(self, envs):
        self.envs, self.num_envs, self.steps = envs, envs.num_envs, []

    def reset(self, **kwargs):
        self.first = self.envs.reset(**kwargs)
        return self.first

    def step(self, actions):
        out = self.envs.step(actions)
        self.steps.append((np.array(actions), *out))
        return out


def test_same_step_reset_keeps_first_observation_and_truncation_bootstraps():
    from llmguide.envs import make_vector_env

    envs = Recorder(make_vector_env({"name": "babyai", "task": "GoToRedBall", "max_steps": 3}, 1, seed=0))
    policy = _policy()
    agent = DRRNAgent(envs, policy, {"k_history": 2, "batch_size": 10_000}, seed=0)   # no updates
    try:
        agent.learn(8, progress=False)
    finally:
        envs.envs.close()
    enc = policy.tokenizer.encode
    items = agent.replay.items
    assert len(items) == 8 and agent.global_step == 8
    mission, caption = envs.first[1]["mission"][0], envs.first[1]["caption"][0]
    np.testing.assert_array_equal(items[0][0], enc(glam_prompt(mission, [caption], [], ACTION_STRINGS)))
    boundaries = 0
    for t, (actions, _, reward, terminated, truncated, infos) in enumerate(envs.steps):
        action = ACTION_STRINGS[int(actions[0])]
        obs_id, act, r, next_ids, terminal = items[t]
        assert act == int(actions[0]) and r == pytest.approx(float(reward[0]))
        assert terminal == bool(terminated[0])   # truncation is not terminal: the target bootstraps
        if terminated[0] or truncated[0]:
            boundaries += 1
            final_caption = infos["final_info"]["caption"][0]
            # the transition's next prompt ends with the last observation of the finished episode
            np.testing.assert_array_equal(next_ids, enc(glam_prompt(mission, [caption, final_caption], [action],
                                                                    ACTION_STRINGS)))
            # SAME_STEP: the top-level info is the new episode's reset; its caption starts the next prompt
            mission, caption = infos["mission"][0], infos["caption"][0]
            if t + 1 < len(items):
                np.testing.assert_array_equal(items[t + 1][0], enc(glam_prompt(mission, [caption], [],
                                                                               ACTION_STRINGS)))
        else:
            np.testing.assert_array_equal(next_ids, enc(glam_prompt(mission, [caption, infos["caption"][0]],
                                                                    [action], ACTION_STRINGS)))
            caption = infos["caption"][0]
            if t + 1 < len(items):   # the next step acts from that same prompt
                np.testing.assert_array_equal(items[t + 1][0], next_ids)
    assert boundaries >= 2   # max_steps=3 over 8 steps: at least two episode ends were checked


# --- checkpoints and CLI --------------------------------------------------------------------------------
def test_checkpoint_round_trip_restores_network_optimizer_counters_and_replay():
    policy = _policy()
    agent = _agent(policy, lr=1e-3, target_update_every=5, checkpoint_replay=True)
    batch = _fixed_batch(policy, [0.0, 1.0, 0.0])
    for t in range(3):
        agent.replay.add(batch["obs"][t], t, 1.0, batch["next_obs"][t], False)
        agent.td_update(batch)
    agent.global_step = 12
    state = agent.state_dict()
    clone_policy = _policy(seed=7)
    clone = _agent(clone_policy, lr=1e-3, target_update_every=5)
    clone.load_state_dict(state)
    torch.testing.assert_close(clone_policy(PROMPTS), policy(PROMPTS))
    assert clone.global_step == 12 and clone.updates == 3 and len(clone.replay) == 3
    assert clone.optimizer.state_dict()["state"][0]["step"] == 3
    torch.testing.assert_close(clone.target_net.state_dict(), agent.target_net.state_dict())
    # both continue identically
    np.testing.assert_allclose(agent.td_update(batch)["losses/td_loss"], clone.td_update(batch)["losses/td_loss"],
                               rtol=1e-5)
    with pytest.raises(ValueError, match="drrn"):
        clone.load_state_dict({**state, "algo": "glam"})


def _train_args(tmp_path, *extra: str) -> list[str]:
    return ["train", "env=babyai", "method=drrn", "env.task=GoToRedBall", "num_envs=2", "agent.batch_size=16",
            "method.hidden_dim=32", "method.embed_dim=32", "log_every=16", "eval.episodes=2", "env.max_steps=8",
            "progress=false", f"run.dir={tmp_path}", "run.name=drrn", *extra]


def test_train_cli_end_to_end_writes_metrics_checkpoint_eval_and_resumes(tmp_path):
    from llmguide import cli

    assert cli.main(_train_args(tmp_path, "total_steps=64")) == 0
    torch.set_num_threads(1)
    run = tmp_path / "drrn"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["losses/td_loss"] for r in records if "losses/td_loss" in r]
    assert losses and all(np.isfinite(losses))
    assert any("charts/sps" in r and r["charts/sps"] > 0 for r in records)
    assert any("charts/q_mean" in r for r in records) and any("charts/episodic_return" in r for r in records)
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["step"] == 64 and ckpt["agent"]["algo"] == "drrn" and ckpt["agent"]["updates"] > 0
    result = json.loads((run / "eval.json").read_text())
    assert result["episodes"] == 2 and 0.0 <= result["success_rate"] <= 1.0 and result["length_mean"] <= 8
    # resume: continue the same run to 96 steps from its checkpoint
    assert cli.main(_train_args(tmp_path, "total_steps=96", "run.resume=true")) == 0
    torch.set_num_threads(1)
    ckpt2 = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt2["step"] == 96 and ckpt2["agent"]["updates"] > ckpt["agent"]["updates"]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 96
    # `llmguide eval RUN_DIR`: greedy and sampled episodes of the latest checkpoint
    assert cli.main(["eval", str(run), "eval.episodes=1", "method.post_tests=[oov_nouns,new_composition]",
                     "method.post_test_episodes=1"]) == 0
    torch.set_num_threads(1)
    result = json.loads((run / "eval.json").read_text())
    assert result["step"] == 96 and result["episodes"] == 1 and result["sampled"]["episodes"] == 1
    tests = result["generalisation"]
    assert set(tests) == {"oov_nouns", "new_composition"} and tests["new_composition"]["task"] == "PickupPickupLocal"


@pytest.mark.parametrize(("override", "key"), [("agent.batch_size=0", "agent.batch_size"),
                                                ("agent.gamma=1.5", "agent.gamma"),
                                                ("agent.update_every=-4", "agent.update_every"),
                                                ("method.vocab_size=1", "method.vocab_size")])
def test_bad_method_value_is_a_config_error_naming_the_key(tmp_path, capsys, override, key):
    from llmguide import cli

    assert cli.main(_train_args(tmp_path, "total_steps=8", override)) == 2
    assert f"'{key}'" in capsys.readouterr().err
    assert not (tmp_path / "drrn").exists()   # failed before any compute


def test_drrn_needs_babyai(tmp_path, capsys):
    from llmguide import cli

    code = cli.main(["train", "env=crafter", "method=drrn", "total_steps=8", "progress=false",
                     f"run.dir={tmp_path}", "run.name=x"])
    assert code == 2 and "'env'" in capsys.readouterr().err
