"""Same seed, same numbers: tiny seeded trainings of PPO, DQN, GLAM's PPO and PTGM's high level (issue 68, item 4).

The golden numbers below were computed by the learners at HEAD 172db04, before the shared pieces (one clipped
loss, one reward mixer, one non-finite-gradient guard, the YAML as the only defaults) replaced the copies, by
running this file (``python tests/test_learner_equality.py`` prints them). A refactor of a learner must
leave every one of them unchanged; a change that is meant to change the numbers says so and recomputes them.
"""

from __future__ import annotations

import pprint
import sys
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from llmguide.envs.toy import ContextBandit, vector_env
from llmguide.learners.callbacks import Callback
from llmguide.learners.dqn import DQN
from llmguide.learners.on_policy import clipped_loss
from llmguide.learners.ppo import PPO
from llmguide.methods.ptgm.options import AsyncOptionsVectorEnv
from llmguide.methods.ptgm.smdp import AsyncOptionPPO
from test_dqn import Visits  # the tests' own fixtures
from test_ppo import ActionBonus
from test_ptgm_craftax import BatchCountEnv, _code_policy

torch.set_num_threads(1)
TOLERANCE = dict(rel=1e-6, abs=1e-6)


class Record(Callback):
    """Every update's metrics (steps/s left out: it is a time)."""

    def __init__(self):
        self.metrics: list[dict[str, float]] = []

    def on_rollout_end(self, metrics: dict[str, Any]) -> None:
        self.metrics.append({k: float(v) for k, v in metrics.items() if k != "charts/sps"})


def _train(agent: Any, steps: int, module: nn.Module, logged: str = "losses/") -> dict[str, Any]:
    """``agent`` trained for ``steps`` env steps: the metrics of each update that logged ``logged`` keys, the
    episode returns and a checksum of the trained parameters."""
    record = Record()
    agent.learn(steps, callback=record, progress=False)
    return {"updates": [m for m in record.metrics if any(k.startswith(logged) for k in m)],
            "returns": [e["charts/episodic_return"] for e in agent.episodes],
            "params": float(sum(p.detach().double().sum() for p in module.parameters()))}


def ppo_run(variant: str) -> dict[str, Any]:
    """4 updates of PPO on a 3-armed contextual bandit with an intrinsic bonus: feed-forward with the clipped value
    loss, or a GRU core with two value heads, an unclipped value loss and an early KL stop."""
    cfg = {"num_steps": 8, "num_minibatches": 2, "update_epochs": 4, "hidden": 16, "lr": 0.03}
    if variant == "gru":
        cfg.update(recurrent="gru", two_value_heads=True, clip_vloss=False, target_kl=0.02, int_episodic=False)
    agent = PPO(vector_env(lambda: ContextBandit(3), 2), cfg, reward_modules=[(0.1, ActionBonus(0))],
                extrinsic_coef=0.5, seed=3)
    return _train(agent, 64, agent.net)


def dqn_run() -> dict[str, Any]:
    """DQN for 160 env steps on the bandit, learning from step 32, with a count bonus; a log every 32 steps."""
    cfg = dict(hidden=16, lr=1e-3, learning_starts=32, buffer_size=500, batch_size=16, train_every=1,
               target_update_every=64, eps_decay_steps=100, n_step=3, chunk_steps=8, log_interval=32)
    agent = DQN(vector_env(lambda: ContextBandit(3), 2), cfg, reward_modules=[(1.0, Visits())],
                extrinsic_coef=0.5, seed=3)
    return _train(agent, 160, agent.q_net, logged="charts/epsilon")


def ptgm_run() -> dict[str, Any]:
    """PTGM's high level (SMDP PPO over asynchronous options of 3 steps) for 3 rollouts, with a code bonus."""
    venv = AsyncOptionsVectorEnv(BatchCountEnv([5, 100]), _code_policy, np.eye(4), steps=3)
    cfg = OmegaConf.create({"num_steps": 4, "hidden": 16, "image_encoder": "flat", "update_epochs": 2,
                            "num_minibatches": 2, "gamma": 0.9, "lr": 0.01})
    agent = AsyncOptionPPO(venv, cfg, reward_modules=[(0.1, ActionBonus(1))], extrinsic_coef=0.5, seed=3)
    return _train(agent, 60, agent.net)


class CharLM:
    """A stand-in language model for GLAM's policy (its ``action_head`` path): a prompt's context state is a linear
    map of its byte counts. No download, milliseconds a rollout."""

    device = torch.device("cpu")

    def __init__(self, d_model: int = 8):
        self.model = nn.Linear(64, d_model)

    def context_states(self, prompts: list[str]) -> torch.Tensor:
        counts = torch.zeros(len(prompts), 64)
        for i, prompt in enumerate(prompts):
            for byte in prompt.encode():
                counts[i, byte % 64] += 1
        return self.model(counts / 100)


def glam_run() -> dict[str, Any]:
    """GLAM's PPO for 2 rollouts of 4 steps on 2 BabyAI GoToRedBall envs, its policy on :class:`CharLM`."""
    from llmguide.envs import make_vector_env
    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.methods.glam.learner import GLAMPPO
    from llmguide.methods.glam.policy import LMPolicy, MLPHead, ValueHead

    torch.manual_seed(0)
    lm = CharLM()
    policy = LMPolicy(lm, ACTION_STRINGS, ValueHead(8, 16), action_head=MLPHead(8, 16, len(ACTION_STRINGS)))
    envs = make_vector_env({"name": "babyai", "task": "GoToRedBall"}, 2, seed=0)
    try:
        agent = GLAMPPO(envs, policy, {"num_steps": 4, "update_epochs": 3, "num_minibatches": 2, "lr": 0.03}, seed=3)
        return _train(agent, 16, policy)
    finally:
        envs.close()


RUNS = {"ppo": lambda: ppo_run("feedforward"), "ppo_gru": lambda: ppo_run("gru"), "dqn": dqn_run,
        "ptgm": ptgm_run, "glam": glam_run}



def _assert_same(run: dict[str, Any], golden: dict[str, Any]) -> None:
    """Every golden number again (a metric the refactor added is not compared)."""
    assert len(run["updates"]) == len(golden["updates"])
    for i, (got, want) in enumerate(zip(run["updates"], golden["updates"], strict=True)):
        for key, value in want.items():
            assert got[key] == pytest.approx(value, nan_ok=True, **TOLERANCE), (i, key)
    assert run["returns"] == pytest.approx(golden["returns"], **TOLERANCE)
    assert run["params"] == pytest.approx(golden["params"], **TOLERANCE)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_same_seed_gives_the_golden_metrics(name):
    _assert_same(RUNS[name](), GOLDEN[name])


def test_clipped_loss_by_hand():
    """r = (1.5, 0.5) with A = (1, −1) and clip 0.2: both terms clipped, −min(1.5, 1.2) and −min(−0.5, −0.8)."""
    new, old = torch.log(torch.tensor([1.5, 0.5])), torch.zeros(2)
    adv, entropy = torch.tensor([1.0, -1.0]), torch.tensor([1.0, 3.0])
    value, ret, old_value = torch.tensor([1.0, 2.0]), torch.zeros(2), torch.tensor([0.9, 2.5])
    out = clipped_loss(new, old, adv, entropy, value, ret, 0.2, 0.01, 0.5, old_values=old_value)
    assert out["policy_loss"].item() == pytest.approx((-1.2 + 0.8) / 2)
    # the value clipped to old ± 0.2 is (1.0, 2.3): the larger squared errors are 1 and 2.3² = 5.29
    assert out["value_loss"].item() == pytest.approx(0.5 * (1 + 5.29) / 2)
    assert out["loss"].item() == pytest.approx(-0.2 - 0.01 * 2.0 + 0.5 * 0.5 * 6.29 / 2)
    assert out["clipfrac"].item() == 1.0 and out["max_abs_logratio"].item() == pytest.approx(np.log(2))
    assert out["approx_kl"].item() == pytest.approx(((0.5 - np.log(1.5)) + (-0.5 - np.log(0.5))) / 2)
    plain = clipped_loss(new, old, adv, entropy, value, ret, 0.2, 0.01, 0.5)
    assert plain["value_loss"].item() == pytest.approx(0.5 * (1 + 4) / 2)
    heads = clipped_loss(new, old, adv, entropy, value[:, None].repeat(1, 2), ret[:, None].repeat(1, 2), 0.2,
                         0.01, 0.5)
    assert heads["value_loss"].item() == pytest.approx(2 * plain["value_loss"].item())   # summed over heads


def _nan_gradients(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every gradient of ``module``'s first parameter made NaN (the losses stay finite); its state before."""
    next(module.parameters()).register_hook(lambda grad: torch.full_like(grad, float("nan")))
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("name", ["ppo", "dqn", "ptgm"])
def test_every_learner_skips_and_counts_a_step_whose_gradient_is_not_finite(name, caplog):
    """Without the guard the NaN gradient would reach the weights (and PPO, DQN would stop with NonFiniteError)."""
    small = {"num_steps": 8, "num_minibatches": 2, "update_epochs": 3, "hidden": 16}
    if name == "ptgm":
        venv = AsyncOptionsVectorEnv(BatchCountEnv([5, 100]), _code_policy, np.eye(4), steps=3)
        agent = AsyncOptionPPO(venv, {**small, "num_steps": 4, "image_encoder": "flat"}, seed=0)
    elif name == "ppo":
        agent = PPO(vector_env(lambda: ContextBandit(3), 2), small, seed=0)
    else:
        agent = DQN(vector_env(lambda: ContextBandit(3), 2), dict(hidden=16, learning_starts=16, batch_size=8,
                                                                  train_every=1, chunk_steps=8, log_interval=32),
                    seed=0)
    net = agent.q_net if name == "dqn" else agent.net
    before = _nan_gradients(net)
    record = Record()
    with caplog.at_level("WARNING"):
        agent.learn(32, callback=record, progress=False)
    logged = [m for m in record.metrics if "losses/skipped_minibatches" in m]
    steps = [32] if name == "dqn" else [6] * agent.updates   # DQN: one step per env step from learning_starts
    assert [m["losses/skipped_minibatches"] for m in logged] == steps
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert "had a non-finite gradient and were skipped" in caplog.text


# --- golden numbers: computed at HEAD 172db04, before the refactor (see the module docstring) ------------------
GOLDEN: dict[str, dict[str, Any]] = {
    'dqn': {'params': -25.589692317007575,
            'returns': [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0,
                        1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
                        0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0,
                        0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0,
                        1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0,
                        0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                        0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0,
                        1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                        0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                        1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            'updates': [{'charts/epsilon': 0.696,
                         'charts/extrinsic_reward': 0.1875,
                         'charts/intrinsic_reward': 0.004125890322029591,
                         'charts/intrinsic_reward/visits': 0.004125890322029591,
                         'charts/replay_size': 32.0,
                         'losses/q_values': 0.03190052509307861,
                         'losses/td_loss': 0.06993235647678375},
                        {'charts/epsilon': 0.392,
                         'charts/extrinsic_reward': 0.375,
                         'charts/intrinsic_reward': 0.002422808902338147,
                         'charts/intrinsic_reward/visits': 0.002422808902338147,
                         'charts/replay_size': 64.0,
                         'losses/q_values': 0.1609615981578827,
                         'losses/td_loss': 0.026486413553357124},
                        {'charts/epsilon': 0.08800000000000008,
                         'charts/extrinsic_reward': 0.5625,
                         'charts/intrinsic_reward': 0.0019065450178459287,
                         'charts/intrinsic_reward/visits': 0.0019065450178459287,
                         'charts/replay_size': 96.0,
                         'losses/q_values': 0.23398756980895996,
                         'losses/td_loss': 0.011183181777596474},
                        {'charts/epsilon': 0.050000000000000044,
                         'charts/extrinsic_reward': 0.4375,
                         'charts/intrinsic_reward': 0.0016199664678424597,
                         'charts/intrinsic_reward/visits': 0.0016199664678424597,
                         'charts/replay_size': 128.0,
                         'losses/q_values': 0.07434581965208054,
                         'losses/td_loss': 0.02382827177643776},
                        {'charts/epsilon': 0.050000000000000044,
                         'charts/extrinsic_reward': 1.0,
                         'charts/intrinsic_reward': 0.0014384863898158073,
                         'charts/intrinsic_reward/visits': 0.0014384863898158073,
                         'charts/replay_size': 160.0,
                         'losses/q_values': 0.19216594099998474,
                         'losses/td_loss': 0.024495650082826614}]},
    'glam': {'params': 3.1285246817860752,
             'returns': [0.915625],
             'updates': [{'charts/extrinsic_reward': 0.0,
                          'charts/value_mean': -0.34440070390701294,
                          'losses/approx_kl': 0.07960938413937886,
                          'losses/clipfrac': 0.5416666666666666,
                          'losses/entropy': 1.7134148478507996,
                          'losses/policy_loss': -0.056240350008010864,
                          'losses/skipped_minibatches': 0.0,
                          'losses/value_loss': 0.01769655992272116},
                         {'charts/extrinsic_reward': 0.11445312201976776,
                          'charts/value_mean': -0.23109431564807892,
                          'losses/approx_kl': 0.05214004963636398,
                          'losses/clipfrac': 0.4583333333333333,
                          'losses/entropy': 1.6434670686721802,
                          'losses/policy_loss': 0.00953076034784317,
                          'losses/skipped_minibatches': 0.0,
                          'losses/value_loss': 39.55003663881629}]},
    'ppo': {'params': -1.8493638187646866,
            'returns': [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0,
                        0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0,
                        1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0,
                        0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
            'updates': [{'charts/extrinsic_reward': 0.5625,
                         'charts/intrinsic_reward': 0.03750000149011612,
                         'charts/intrinsic_reward/action_bonus': 0.375,
                         'charts/learning_rate': 0.03,
                         'losses/approx_kl': 0.06692259013652802,
                         'losses/clipfrac': 0.4375,
                         'losses/entropy': 1.0383843183517456,
                         'losses/explained_variance': -0.3679680824279785,
                         'losses/old_approx_kl': 0.027696147561073303,
                         'losses/policy_loss': -0.16714221239089966,
                         'losses/value_loss': 0.05662254989147186,
                         'reward/action_bonus/updates': 1.0},
                        {'charts/extrinsic_reward': 0.5625,
                         'charts/intrinsic_reward': 0.05624999850988388,
                         'charts/intrinsic_reward/action_bonus': 0.5625,
                         'charts/learning_rate': 0.0225,
                         'losses/approx_kl': 0.17610618472099304,
                         'losses/clipfrac': 0.453125,
                         'losses/entropy': 0.8984209895133972,
                         'losses/explained_variance': -0.009399890899658203,
                         'losses/old_approx_kl': 0.16213180124759674,
                         'losses/policy_loss': -0.178748220205307,
                         'losses/value_loss': 0.02943192981183529,
                         'reward/action_bonus/updates': 2.0},
                        {'charts/extrinsic_reward': 0.5625,
                         'charts/intrinsic_reward': 0.03750000149011612,
                         'charts/intrinsic_reward/action_bonus': 0.375,
                         'charts/learning_rate': 0.015,
                         'losses/approx_kl': 0.1747664511203766,
                         'losses/clipfrac': 0.484375,
                         'losses/entropy': 0.41277673840522766,
                         'losses/explained_variance': 0.09554678201675415,
                         'losses/old_approx_kl': 0.2540889382362366,
                         'losses/policy_loss': -0.1565469205379486,
                         'losses/value_loss': 0.037248916923999786,
                         'reward/action_bonus/updates': 3.0},
                        {'charts/extrinsic_reward': 0.875,
                         'charts/intrinsic_reward': 0.01875000074505806,
                         'charts/intrinsic_reward/action_bonus': 0.1875,
                         'charts/learning_rate': 0.0075,
                         'losses/approx_kl': 0.06228456646203995,
                         'losses/clipfrac': 0.09375,
                         'losses/entropy': 0.25011974573135376,
                         'losses/explained_variance': -0.719880223274231,
                         'losses/old_approx_kl': 0.147542804479599,
                         'losses/policy_loss': -0.10582044720649719,
                         'losses/value_loss': 0.022872911766171455,
                         'reward/action_bonus/updates': 4.0}]},
    'ppo_gru': {'params': -11.426968250787468,
                'returns': [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0,
                            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0,
                            1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0,
                            1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0],
                'updates': [{'charts/extrinsic_reward': 0.25,
                             'charts/intrinsic_reward': 0.02500000037252903,
                             'charts/intrinsic_reward/action_bonus': 0.25,
                             'charts/learning_rate': 0.03,
                             'losses/approx_kl': 0.027099043130874634,
                             'losses/clipfrac': 0.14583333333333334,
                             'losses/entropy': 1.0743601322174072,
                             'losses/explained_variance': 0.009828388690948486,
                             'losses/old_approx_kl': -0.011199787259101868,
                             'losses/policy_loss': -0.1196097582578659,
                             'losses/value_loss': 0.04543439671397209,
                             'reward/action_bonus/updates': 1.0},
                            {'charts/extrinsic_reward': 0.1875,
                             'charts/intrinsic_reward': 0.02500000037252903,
                             'charts/intrinsic_reward/action_bonus': 0.25,
                             'charts/learning_rate': 0.0225,
                             'losses/approx_kl': 0.020870476961135864,
                             'losses/clipfrac': 0.041666666666666664,
                             'losses/entropy': 1.0784326791763306,
                             'losses/explained_variance': -0.15688347816467285,
                             'losses/old_approx_kl': 0.09649607539176941,
                             'losses/policy_loss': -0.10094914585351944,
                             'losses/value_loss': 0.04013725370168686,
                             'reward/action_bonus/updates': 2.0},
                            {'charts/extrinsic_reward': 0.4375,
                             'charts/intrinsic_reward': 0.0625,
                             'charts/intrinsic_reward/action_bonus': 0.625,
                             'charts/learning_rate': 0.015,
                             'losses/approx_kl': 0.0341339185833931,
                             'losses/clipfrac': 0.20833333333333334,
                             'losses/entropy': 0.946943998336792,
                             'losses/explained_variance': -0.9695707559585571,
                             'losses/old_approx_kl': 0.07213366031646729,
                             'losses/policy_loss': -0.07814744114875793,
                             'losses/value_loss': 0.061281003057956696,
                             'reward/action_bonus/updates': 3.0},
                            {'charts/extrinsic_reward': 0.75,
                             'charts/intrinsic_reward': 0.012500000186264515,
                             'charts/intrinsic_reward/action_bonus': 0.125,
                             'charts/learning_rate': 0.0075,
                             'losses/approx_kl': 0.0683332085609436,
                             'losses/clipfrac': 0.15625,
                             'losses/entropy': 0.7959262728691101,
                             'losses/explained_variance': 0.003793478012084961,
                             'losses/old_approx_kl': 0.11908678710460663,
                             'losses/policy_loss': -0.09606773406267166,
                             'losses/value_loss': 0.041012853384017944,
                             'reward/action_bonus/updates': 4.0}]},
    'ptgm': {'params': -2.098414455220336,
             'returns': [9.0, 11.0, 13.0, 3.0, 12.0, 15.0],
             'updates': [{'charts/extrinsic_reward': 20.875,
                          'charts/intrinsic_reward': 0.03750000149011612,
                          'charts/intrinsic_reward/action_bonus': 0.375,
                          'charts/learning_rate': 0.01,
                          'losses/approx_kl': 0.007110908627510071,
                          'losses/clipfrac': 0.125,
                          'losses/entropy': 1.3660213947296143,
                          'losses/explained_variance': -0.0008014440536499023,
                          'losses/old_approx_kl': 0.005162417888641357,
                          'losses/policy_loss': -0.09314149618148804,
                          'losses/value_loss': 340.7194519042969,
                          'options/decisions': 8.0,
                          'options/env_steps_per_rollout': 12.0,
                          'options/mean_steps': 2.75,
                          'reward/action_bonus/updates': 1.0},
                         {'charts/extrinsic_reward': 16.25,
                          'charts/intrinsic_reward': 0.012500000186264515,
                          'charts/intrinsic_reward/action_bonus': 0.125,
                          'charts/learning_rate': 0.006,
                          'losses/approx_kl': 0.003071233630180359,
                          'losses/clipfrac': 0.125,
                          'losses/entropy': 1.2927179336547852,
                          'losses/explained_variance': 0.051591694355010986,
                          'losses/old_approx_kl': 0.04957151412963867,
                          'losses/policy_loss': 0.04516087472438812,
                          'losses/value_loss': 133.13783264160156,
                          'options/decisions': 8.0,
                          'options/env_steps_per_rollout': 11.0,
                          'options/mean_steps': 2.75,
                          'reward/action_bonus/updates': 2.0},
                         {'charts/extrinsic_reward': 22.875,
                          'charts/intrinsic_reward': 0.0,
                          'charts/intrinsic_reward/action_bonus': 0.0,
                          'charts/learning_rate': 0.0023333333333333327,
                          'losses/approx_kl': 0.0003636479377746582,
                          'losses/clipfrac': 0.0,
                          'losses/entropy': 0.7668412327766418,
                          'losses/explained_variance': 0.2573883533477783,
                          'losses/old_approx_kl': -0.02506747841835022,
                          'losses/policy_loss': -0.0077450573444366455,
                          'losses/value_loss': 519.5814208984375,
                          'options/decisions': 8.0,
                          'options/env_steps_per_rollout': 10.0,
                          'options/mean_steps': 2.75,
                          'reward/action_bonus/updates': 3.0}]},
}


def golden_source(names: list[str]) -> str:
    """``GOLDEN = {...}`` for the code as it is now (the numbers of :data:`RUNS`), to paste below."""
    rows = []
    for name in names:
        text = pprint.pformat(RUNS[name](), width=104 - len(name), compact=True)
        rows.append(f"    {name!r}: " + text.replace("\n", "\n" + " " * (len(name) + 8)) + ",")
    return "GOLDEN: dict[str, dict[str, Any]] = {\n" + "\n".join(rows) + "\n}"


if __name__ == "__main__":
    print(golden_source(sys.argv[1:] or sorted(RUNS)))
