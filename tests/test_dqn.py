"""DQN: n-step targets by hand, double-DQN target, learning a goal-conditioned task, ε schedule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from llmguide.envs.toy import ContextBandit, vector_env
from llmguide.learners.dqn import DQN, NStepBuffer, double_dqn_targets
from llmguide.rewards.base import RewardModule

torch.set_num_threads(1)


def o(x: float) -> dict[str, np.ndarray]:
    return {"vector": np.array([x], np.float32)}


def test_nstep_returns_hand_computed_at_termination_and_truncation():
    buf = NStepBuffer(n=3, gamma=0.5, num_envs=2)
    assert buf.push(0, o(0), 1, 1.0, o(1), False, False) == []
    assert buf.push(0, o(1), 0, 2.0, o(2), False, False) == []
    (tr,) = buf.push(0, o(2), 1, 4.0, o(3), False, False)
    # R = 1 + .5*2 + .25*4 = 3, bootstrap from s3 with gamma^3
    assert (tr.obs["vector"][0], tr.action, tr.reward, tr.next_obs["vector"][0]) == (0, 1, 3.0, 3)
    assert (tr.terminated, tr.discount) == (False, 0.125)
    # env 1 is independent of env 0
    assert buf.push(1, o(10), 0, 100.0, o(11), False, False) == []
    # termination at s4: the window (s1, s2, s3) is flushed with shorter horizons, no bootstrap
    out = buf.push(0, o(3), 0, 8.0, o(4), True, False)
    assert [t.reward for t in out] == [2 + 0.5 * 4 + 0.25 * 8, 4 + 0.5 * 8, 8.0]
    assert [t.discount for t in out] == [0.125, 0.25, 0.5]
    assert all(t.terminated and t.next_obs["vector"][0] == 4 for t in out)
    # truncation also ends the window but keeps the bootstrap (terminated=False)
    out = buf.push(1, o(11), 1, 1.0, o(12), False, True)
    assert [(t.reward, t.discount, t.terminated) for t in out] == [(100.5, 0.25, False), (1.0, 0.5, False)]


class FixedQ(nn.Module):
    """Q-values read from a table indexed by the observation's first feature."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.tensor(table, dtype=torch.float32)

    def forward(self, obs):
        return self.table[obs["vector"][:, 0].long()]


def test_double_dqn_target_uses_online_argmax_and_target_values():
    online = FixedQ([[0.0, 0.0], [5.0, 1.0]])   # online prefers action 0 in s'=1
    target = FixedQ([[0.0, 0.0], [2.0, 9.0]])   # target's own max (9) must NOT be used
    batch = {"next_obs": {"vector": torch.tensor([[1.0], [1.0]])}, "rewards": torch.tensor([1.0, 1.0]),
             "discounts": torch.tensor([0.25, 0.25]), "terminated": torch.tensor([0.0, 1.0])}
    torch.testing.assert_close(double_dqn_targets(online, target, batch), torch.tensor([1.5, 1.0]))


CFG = dict(hidden=32, lr=1e-3, learning_starts=200, buffer_size=5000, batch_size=32, train_every=1,
           target_update_every=200, eps_decay_steps=1500, eps_end=0.05, n_step=3, chunk_steps=8)


def test_goal_conditioned_dqn_learns_from_explicit_goal_embeddings():
    # the observation carries no information; only the goal embedding says which arm pays
    envs = vector_env(lambda: ContextBandit(3, goal_in_obs=False), 4)
    agent = DQN(envs, CFG, seed=0, goal_dim=3, goal_provider=lambda: np.stack(envs.get_attr("goal")))
    agent.learn(2500, progress=False)
    obs = {"vector": np.full((3, 3), 0.5, np.float32)}
    assert agent.act(obs, greedy=True, goal_emb=np.eye(3, dtype=np.float32)).tolist() == [0, 1, 2]
    rets = [e["charts/episodic_return"] for e in agent.episodes]
    assert np.mean(rets[-100:]) > 0.85 and np.mean(rets[:100]) < 0.6
    with pytest.raises(ValueError, match="goal"):
        agent.act(obs, greedy=True)


class Visits(RewardModule):
    """A small count-based bonus 0.01/sqrt(n(action)); the counts are its checkpointed state."""

    name = "visits"

    def __init__(self):
        self.counts = np.zeros(3)

    def compute(self, batch):
        return 0.01 / np.sqrt(1.0 + self.counts[batch.actions])

    def update(self, batch):
        np.add.at(self.counts, batch.actions.reshape(-1), 1)
        return {}

    def state_dict(self):
        return {"counts": self.counts.copy()}

    def load_state_dict(self, state):
        self.counts = state["counts"].copy()


def test_goal_in_observation_epsilon_schedule_and_state_round_trip():
    envs = vector_env(lambda: ContextBandit(3), 2)
    agent = DQN(envs, CFG, seed=0, reward_modules=[(1.0, Visits())])
    assert agent.epsilon(0) == 1.0 and agent.epsilon(750) == pytest.approx(0.525) and agent.epsilon(10**6) == pytest.approx(0.05)
    agent.learn(1600, progress=False)
    # 16 env steps per chunk, 1 update per env step from the chunk that crosses learning_starts=200
    assert agent.updates == 1600 - 192
    obs = {"vector": np.eye(3, dtype=np.float32)}
    assert agent.act(obs, greedy=True).tolist() == [0, 1, 2]
    assert agent.reward_modules[0][1].counts.sum() == 1600  # the module saw every transition
    clone = DQN(vector_env(lambda: ContextBandit(3), 2), {**CFG, "checkpoint_replay": True}, seed=5,
                reward_modules=[(1.0, Visits())])
    clone.load_state_dict(agent.state_dict())
    np.testing.assert_array_equal(clone.reward_modules[0][1].counts, agent.reward_modules[0][1].counts)
    assert clone.global_step == 1600 and clone.updates == agent.updates
    assert clone.act(obs, greedy=True).tolist() == [0, 1, 2]
    assert clone.replay.size == 0  # replay not checkpointed by default
