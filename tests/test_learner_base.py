"""The learner base (issue 51): the five training loops share ``learners.base.Learner``; the on-policy ones
share PPO's vocabulary, and GLAM's old names are accepted for one release with a deprecation line."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from llmguide.core.errors import ConfigError
from llmguide.envs.toy import ContextBandit, vector_env
from llmguide.learners.base import Learner
from llmguide.learners.callbacks import Callback
from llmguide.learners.common import agent_config
from llmguide.learners.dqn import DQN
from llmguide.learners.on_policy import DEPRECATED_KEYS, OnPolicyLearner, deprecated_keys
from llmguide.learners.ppo import PPO
from llmguide.methods.glam.drrn import DRRNAgent
from llmguide.methods.glam.learner import GLAMPPO
from llmguide.methods.ptgm.models import OptionPPO
from llmguide.methods.ptgm.smdp import AsyncOptionPPO
from llmguide.pipelines import load_config

torch.set_num_threads(1)
SMALL = {"num_steps": 8, "num_minibatches": 2, "update_epochs": 1, "hidden": 16}


@pytest.mark.parametrize("cls", [PPO, DQN, GLAMPPO, DRRNAgent, AsyncOptionPPO, OptionPPO])
def test_every_training_loop_is_a_learner_and_keeps_only_its_iteration(cls):
    assert issubclass(cls, Learner) and cls.algo
    owned = {name for klass in cls.__mro__ if klass not in (Learner, OnPolicyLearner, object) for name in vars(klass)}
    assert not owned & {"learn", "state_dict", "load_state_dict", "reset_envs", "_log", "_end_iteration"}
    on_policy = cls in (PPO, GLAMPPO, AsyncOptionPPO, OptionPPO)
    assert issubclass(cls, OnPolicyLearner) == on_policy


class StopAfter(Callback):
    """Asks to stop after ``n`` env steps (``on_step`` False); counts the rollout ends it saw."""

    def __init__(self, n: int):
        self.n, self.rollouts, self.ended = n, 0, False

    def on_step(self, step) -> bool:
        return step.step < self.n

    def on_rollout_end(self, metrics) -> None:
        self.rollouts += 1

    def on_training_end(self) -> None:
        self.ended = True


def test_the_loop_stops_after_the_iteration_a_callback_asked_in_and_a_checkpoint_restarts_the_envs():
    agent = PPO(vector_env(lambda: ContextBandit(3), 2), SMALL, seed=0)
    stop = StopAfter(4)   # asked during the first rollout (16 env steps): that rollout and its update finish
    agent.learn(1000, callback=stop, progress=False)
    assert agent.global_step == 16 and agent.updates == 1 and stop.rollouts == 1 and stop.ended
    assert agent.envs_ready and len(agent.episodes) == 16 and "losses/policy_loss" in agent.last_metrics
    state = agent.state_dict()
    assert {"algo", "net", "optimizer", "global_step", "updates", "counters", "rng", "agent_rng",
            "reward_modules"} <= set(state) and state["algo"] == "ppo"
    agent.load_state_dict(state)
    assert not agent.envs_ready   # the next learn() resets the envs (seed + global_step)
    agent.learn(32, progress=False)
    assert agent.global_step == 32 and agent.updates == 2
    dqn_state = DQN(vector_env(lambda: ContextBandit(3), 2), {"hidden": 16}, seed=0).state_dict()
    with pytest.raises(ValueError, match="checkpoint is for agent 'dqn', not 'ppo'"):
        agent.load_state_dict(dqn_state)


def test_same_seed_same_numbers_through_the_base():
    runs = []
    for _ in range(2):
        agent = PPO(vector_env(lambda: ContextBandit(3), 2), SMALL, seed=3)
        agent.learn(32, progress=False)
        runs.append({k: v for k, v in agent.last_metrics.items() if k != "charts/sps"})
    assert runs[0] == runs[1]


def test_glam_old_names_map_to_the_on_policy_vocabulary_with_one_deprecation_line(caplog):
    with caplog.at_level(logging.WARNING), pytest.warns(DeprecationWarning, match="agent.num_steps"):
        cfg = agent_config({"rollout_steps": 4, "epochs": 1, "minibatch": 2}, "glam")
        found = deprecated_keys(cfg)
    assert found == {"rollout_steps": 4, "epochs": 1, "minibatch": 2}
    lines = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(lines) == 1 and "agent.rollout_steps, agent.epochs, agent.minibatch deprecated" in lines[0]
    assert "use agent.num_steps, agent.update_epochs, agent.num_minibatches" in lines[0]
    learner = OnPolicyLearner(vector_env(lambda: ContextBandit(3), 2))
    with pytest.warns(DeprecationWarning):
        learner._read_settings(cfg)
    assert (learner.num_steps, learner.update_epochs, learner.minibatch_size) == (4, 1, 2)   # minibatch: a size
    learner._read_settings(agent_config({"num_steps": 4}, "glam"))   # the new names: no line, no size
    assert (learner.num_steps, learner.update_epochs, learner.num_minibatches, learner.minibatch_size) == (4, 2, 16, None)
    assert set(DEPRECATED_KEYS.values()) == {"num_steps", "update_epochs", "num_minibatches"}


def test_glam_config_takes_both_vocabularies_and_checks_the_old_names():
    base = ["env=babyai", "method=glam", "llm=hf"]
    cfg = load_config([*base, "agent.num_steps=4", "agent.update_epochs=1", "agent.num_minibatches=2"])
    assert (cfg.agent.num_steps, cfg.agent.update_epochs, cfg.agent.num_minibatches, cfg.agent.rollout_steps) == \
        (4, 1, 2, None)
    assert load_config([*base, "agent.rollout_steps=4", "agent.minibatch=2"]).agent.minibatch == 2
    for bad in ("agent.rollout_steps=0", "agent.num_minibatches=0"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_config([*base, bad])


def test_glam_minibatches_old_size_and_new_count_slice_the_same_rows():
    """``minibatch=m`` (a size) and ``num_minibatches=n/m`` give the same minibatches of a batch of ``n``."""
    learner = OnPolicyLearner(vector_env(lambda: ContextBandit(3), 2))
    order = np.random.default_rng(0).permutation(64)
    old = learner._minibatches(order, 4)
    learner.num_minibatches = 16
    new = learner._minibatches(order, max(1, 64 // learner.num_minibatches))
    assert len(old) == len(new) == 16 and all((a == b).all() for a, b in zip(old, new, strict=True))
