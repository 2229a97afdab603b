"""PPO: GAE at episode boundaries, learning tiny tasks, recurrent memory, intrinsic head, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from llmguide.envs.toy import ContextBandit, CueMemory, vector_env
from llmguide.envs.vector import split_infos
from llmguide.learners.common import mix_rewards
from llmguide.learners.evaluation import evaluate
from llmguide.learners.ppo import PPO, compute_gae
from llmguide.rewards.base import RewardModule, TransitionBatch

torch.set_num_threads(1)


class ActionBonus(RewardModule):
    """Intrinsic reward 1 for choosing ``action``; counts how often it was updated (checkpointed)."""

    name = "action_bonus"

    def __init__(self, action: int):
        self.action, self.updates = action, 0

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        return (batch.actions == self.action).astype(np.float32)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        self.updates += 1
        return {"updates": self.updates}

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = state["updates"]


def test_gae_hand_computed_with_episode_boundary():
    rewards = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 1.0]], np.float32)
    values = np.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0]], np.float32)
    dones = np.array([[False, False], [True, False], [False, False]])
    adv, ret = compute_gae(rewards, values, dones, np.array([2.0, 0.0], np.float32), gamma=0.9, lam=0.5)
    # env 0: t=2: 3 + .9*2 - 1.5 = 3.3; t=1 ends the episode: 2 - 1 = 1.0 (nothing from t=2);
    #        t=0: 1 + .9*1 - .5 = 1.4, plus .9*.5*1.0 = 1.85
    np.testing.assert_allclose(adv[:, 0], [1.85, 1.0, 3.3], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [2.35, 2.0, 4.8], rtol=1e-6)
    # env 1: no boundary, the advantage flows back with factor gamma*lambda = .45
    np.testing.assert_allclose(adv[:, 1], [0.2025, 0.45, 1.0], rtol=1e-6)


def test_split_infos_takes_final_info_for_finished_envs():
    infos = {"x": np.array([1, 2]), "_x": np.array([True, True]),
             "final_info": {"success": np.array([False, True]), "_success": np.array([False, True])},
             "_final_info": np.array([False, True])}
    out = split_infos(infos, 2)
    assert out[0]["x"] == 1 and "success" not in out[0]
    assert out[1] == {"success": True, "caption": "", "events": [], "mission": ""}


def test_mix_rewards_sums_coefficients_and_counts_non_finite():
    class Bad(ActionBonus):
        name = "bad"

        def compute(self, batch):
            r = super().compute(batch)
            r[0, 0] = np.nan
            return r

    actions = np.array([[1, 0], [1, 1]])
    batch = TransitionBatch(obs={}, actions=actions, next_obs={}, rewards=np.zeros((2, 2), np.float32),
                            terminated=np.zeros((2, 2), bool))
    counters: dict[str, int] = {}
    total, metrics = mix_rewards(batch, [(0.5, ActionBonus(1)), (2.0, Bad(1))], counters)
    np.testing.assert_allclose(total, [[0.5, 0.0], [2.5, 2.5]])
    assert counters["reward/bad/nonfinite"] == 1 and metrics["reward/bad/nonfinite"] == 1


CFG = dict(num_steps=16, hidden=32, lr=2.5e-3, update_epochs=4, num_minibatches=2, ent_coef=0.01)


def test_ppo_learns_contextual_bandit_and_evaluates():
    envs = vector_env(lambda: ContextBandit(3), 4)
    agent = PPO(envs, CFG, seed=0)
    make = lambda cfg, seed: ContextBandit(3)  # noqa: E731
    before = evaluate(agent, None, 30, seed=1, make_env_fn=make)
    agent.learn(3000, progress=False)
    after = evaluate(agent, None, 30, seed=1, make_env_fn=make)
    assert before["success_rate"] < 0.7
    assert after["success_rate"] == 1.0 and after["return_mean"] == 1.0
    assert agent.global_step == 3008  # whole rollouts of 4 envs x 16 steps
    rets = [e["charts/episodic_return"] for e in agent.episodes]
    assert np.mean(rets[-100:]) > 0.9 > np.mean(rets[:100])
    # evaluation is repeatable and leaves the training RNG untouched
    state = torch.get_rng_state()
    sampled = [evaluate(agent, None, 10, seed=5, greedy=False, make_env_fn=make) for _ in range(2)]
    assert sampled[0]["episode_returns"] == sampled[1]["episode_returns"]
    assert torch.equal(state, torch.get_rng_state())


def test_zero_update_epochs_acts_without_ever_changing_the_policy():
    agent = PPO(vector_env(lambda: ContextBandit(3), 2), {**CFG, "update_epochs": 0}, seed=0)
    before = {k: v.clone() for k, v in agent.net.state_dict().items()}
    agent.learn(256, progress=False)
    assert agent.global_step == 256 and agent.updates == 8
    assert all(torch.equal(before[k], v) for k, v in agent.net.state_dict().items())
    assert agent.last_metrics["losses/clipfrac"] == 0.0


def test_gru_core_remembers_a_cue_that_a_feedforward_policy_cannot():
    envs = vector_env(CueMemory, 8)
    agent = PPO(envs, {**CFG, "recurrent": "gru", "lr": 3e-3}, seed=0)
    agent.learn(6000, progress=False)
    res = evaluate(agent, None, 40, seed=3, make_env_fn=lambda cfg, seed: CueMemory())
    # without memory the best policy succeeds half of the time
    assert res["success_rate"] >= 0.9


def test_intrinsic_value_head_learns_from_intrinsic_reward_only():
    envs = vector_env(lambda: ContextBandit(3), 4)
    module = ActionBonus(2)
    agent = PPO(envs, {**CFG, "two_value_heads": True, "int_episodic": False}, reward_modules=[(1.0, module)],
                extrinsic_coef=0.0, seed=0)
    agent.learn(2000, progress=False)
    greedy = agent.act({"vector": np.eye(3, dtype=np.float32)}, greedy=True)
    assert greedy.tolist() == [2, 2, 2]  # chosen for the intrinsic reward, whatever the context
    assert module.updates == agent.updates > 0
    assert agent.last_metrics["charts/intrinsic_reward/action_bonus"] > 0.8


def test_same_seed_same_parameters_and_state_dict_round_trip():
    def train(seed):
        agent = PPO(vector_env(lambda: ContextBandit(3), 2), CFG, reward_modules=[(0.1, ActionBonus(0))], seed=seed)
        return agent.learn(256, progress=False)

    a, b = train(7), train(7)
    for (name, pa), pb in zip(a.net.state_dict().items(), b.net.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    c = PPO(vector_env(lambda: ContextBandit(3), 2), CFG, reward_modules=[(0.1, ActionBonus(0))], seed=99)
    c.load_state_dict(a.state_dict())
    assert c.global_step == a.global_step == 256 and c.reward_modules[0][1].updates == 8
    assert c.optimizer.state_dict()["state"][0]["step"] == a.optimizer.state_dict()["state"][0]["step"]
    obs = {"vector": np.eye(3, dtype=np.float32)}
    assert c.act(obs, greedy=True).tolist() == a.act(obs, greedy=True).tolist()
    with pytest.raises(ValueError, match="reward modules"):
        PPO(vector_env(lambda: ContextBandit(3), 2), CFG, seed=0).load_state_dict(a.state_dict())


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_recurrent_state_is_reset_where_an_episode_starts(core):
    from gymnasium import spaces

    from llmguide.learners.networks import ActorCritic

    space = spaces.Dict({"vector": spaces.Box(-1, 1, (3,), np.float32)})
    net = ActorCritic(space, 2, hidden=8, recurrent=core)
    x = torch.randn(5, 1, 3)
    done = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])
    state = tuple(torch.randn_like(s) for s in net.initial_state(1))
    full, _ = net._features({"vector": x.reshape(5, 3)}, state, done)
    tail, _ = net._features({"vector": x[2:].reshape(3, 3)}, net.initial_state(1), None)
    torch.testing.assert_close(full[2:], tail)          # after the reset: as from a zero state
    head, _ = net._features({"vector": x[:2].reshape(2, 3)}, state, None)
    torch.testing.assert_close(full[:2], head)          # before it: the given state is used
    assert not torch.allclose(head, net._features({"vector": x[:2].reshape(2, 3)}, net.initial_state(1), None)[0])


def test_dict_encoder_scales_uint8_images_and_concatenates_vectors():
    from gymnasium import spaces

    from llmguide.learners.networks import DictEncoder

    as_uint8 = spaces.Dict({"pixels": spaces.Box(0, 255, (3, 64, 64), np.uint8),
                            "vector": spaces.Box(-1, 1, (4,), np.float32),
                            "goal": spaces.Box(-1, 1, (5,), np.float32)})
    enc = DictEncoder(as_uint8, hidden=16)
    assert enc.image_keys == ["pixels"] and enc.vector_dim == 9 and enc.out_dim == 32
    img = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    vec, goal = torch.randn(2, 4), torch.randn(2, 5)
    out = enc({"pixels": img, "vector": vec, "goal": goal})
    assert out.shape == (2, 32)
    # uint8 pixels are divided by 255: same features as the pre-scaled float image without scaling
    enc.uint8_keys.clear()
    torch.testing.assert_close(enc({"pixels": img.float() / 255.0, "vector": vec, "goal": goal}), out)
    assert not torch.allclose(enc({"pixels": img.float(), "vector": vec, "goal": goal}), out)
    with pytest.raises(ValueError, match="1-D or 3-D"):
        DictEncoder(spaces.Dict({"bad": spaces.Box(0, 1, (2, 2), np.float32)}))


def test_on_step_callback_sees_every_vector_step_with_transition_infos():
    from llmguide.learners.callbacks import Callback

    seen = []

    class Spy(Callback):
        def on_step(self, step):
            seen.append((step.step, step.dones.copy(), step.infos))
            return True

    agent = PPO(vector_env(lambda: ContextBandit(3), 2), CFG, seed=0)
    agent.learn(64, callback=Spy(), progress=False)
    assert [s for s, _, _ in seen] == list(range(2, 66, 2))
    assert all(d.all() and all("success" in i for i in infos) for _, d, infos in seen)
    successes = [float(i["success"]) for _, _, infos in seen for i in infos]
    assert np.mean(successes) == np.mean([e["charts/success"] for e in agent.episodes])


class Endless(gym.Env):
    """Reward 1 every step in one unchanging state; the episode ends after ``horizon`` steps, by a time
    limit (truncated) or by a real end (terminated)."""

    def __init__(self, horizon: int = 5, terminal: bool = False):
        self.horizon, self.terminal, self.t = horizon, terminal, 0
        self.observation_space = spaces.Dict({"vector": spaces.Box(0.0, 1.0, (1,), np.float32)})
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"vector": np.ones(1, np.float32)}, {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.horizon
        return {"vector": np.ones(1, np.float32)}, 1.0, end and self.terminal, end and not self.terminal, {}


@pytest.mark.parametrize("terminal", [False, True])
def test_ppo_bootstraps_at_truncation_but_not_at_termination(terminal):
    # gamma 0.9: with the time limit bootstrapped V = 1 / (1 - 0.9) = 10 in the (only) state; if the
    # limit were treated as terminal (the old behaviour) V would average sum_{k<=5} 0.9^k ~ 3.3 over the
    # positions; with a real termination that is also the right answer.
    cfg = dict(CFG, gamma=0.9, gae_lambda=0.95, lr=1e-2, ent_coef=0.0, anneal_lr=False, clip_vloss=False)
    agent = PPO(vector_env(lambda: Endless(5, terminal), 2), cfg, seed=0)
    agent.learn(6000, progress=False)
    value = agent.net.get_value({"vector": torch.ones(1, 1)}).item()
    if terminal:
        assert 2.0 < value < 4.6
    else:
        assert value > 7.5


def test_callbacks_vocabulary_checkpoint_eval_and_early_stop(tmp_path):
    from llmguide.core.rundir import RunDir
    from llmguide.learners.callbacks import Callback, CheckpointCallback, EvalCallback

    calls = {"eval": [], "start": 0, "end": 0}

    class StopAt(Callback):
        def on_training_start(self):
            calls["start"] += 1

        def on_step(self, step):
            return step.step < 96

        def on_training_end(self):
            calls["end"] += 1

    with RunDir(tmp_path / "run") as run:
        agent = PPO(vector_env(lambda: ContextBandit(3), 2), CFG, seed=0, run=run)   # 32 steps per update
        agent.learn(1000, progress=False, callback=[
            CheckpointCallback(run, every=64),
            EvalCallback(run, 40, lambda a: calls["eval"].append(a.global_step) or {"x": 1.0}),
            StopAt()])
        saved = sorted(int(p.stem.split("_")[1]) for p in (tmp_path / "run" / "checkpoints").glob("ckpt_*.pt"))
    assert agent.global_step == 96          # stopped by on_step at the end of that rollout
    assert saved == [64]                     # 96 did not cross 128
    assert calls["eval"] == [64, 96]         # first rollout end past 40 and past 80
    assert calls["start"] == calls["end"] == 1
