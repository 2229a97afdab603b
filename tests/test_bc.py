"""Behaviour cloning with and without memory (``llmguide.learners.bc``; issue 52's gate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from llmguide.learners.bc import action_accuracy, clone, held_out
from llmguide.learners.networks import ActorCritic

N_ACTIONS = 4


def _cue_data(n_episodes: int = 400, length: int = 6, seed: int = 0):
    """Episodes whose first observation shows a cue (one of 4) and every later one is blank; the demonstrator
    always plays the cue: only a policy that remembers the episode's start can imitate it after step 0."""
    rng = np.random.default_rng(seed)
    cues = rng.integers(0, N_ACTIONS, n_episodes)
    obs = np.zeros((n_episodes, length, N_ACTIONS + 1), np.float32)
    obs[:, 0, :N_ACTIONS] = np.eye(N_ACTIONS)[cues]
    obs[:, 1:, N_ACTIONS] = 1.0   # "blank"
    first = np.zeros((n_episodes, length), bool)
    first[:, 0] = True
    actions = np.repeat(cues[:, None], length, 1)
    return obs.reshape(-1, N_ACTIONS + 1), actions.reshape(-1), first.reshape(-1)


def _net(recurrent):
    torch.manual_seed(0)
    space = spaces.Dict({"vector": spaces.Box(0.0, 1.0, (N_ACTIONS + 1,), np.float32)})
    return ActorCritic(space, N_ACTIONS, hidden=32, recurrent=recurrent, image_encoder="flat")


def test_memory_clones_what_a_memoryless_policy_cannot():
    obs, actions, first = _cue_data()

    def obs_fn(idx):
        return {"vector": torch.as_tensor(obs[idx])}

    val = held_out(len(actions), block=60, val_every=5)
    gru = clone(_net("gru"), obs_fn, actions, first, seq_len=12, batch_steps=240, updates=300, lr=3e-3, val=val)
    flat = clone(_net(None), obs_fn, actions, first, seq_len=1, batch_steps=240, updates=300, lr=3e-3, val=val)
    # blank steps are 5 of 6: a memoryless clone gets the cue step and a quarter of the rest
    assert flat["val_accuracy"] < 0.5
    assert gru["val_accuracy"] > 0.95
    assert gru["val_steps"] == int(val.sum()) and gru["train_steps"] == int((~val).sum())


def test_held_out_steps_are_never_trained_on():
    """Training on the held-out steps only would be the only way to learn labels that exist only there."""
    obs, actions, first = _cue_data(n_episodes=200)
    val = held_out(len(actions), block=60, val_every=5)
    labels = actions.copy()
    labels[val] = (labels[val] + 1) % N_ACTIONS   # the held-out steps disagree with the rule the rest follow

    def obs_fn(idx):
        return {"vector": torch.as_tensor(obs[idx])}

    out = clone(_net("gru"), obs_fn, labels, first, seq_len=6, batch_steps=120, updates=200, lr=3e-3, val=val)
    assert out["val_accuracy"] < 0.1
    assert 0.1 < val.mean() < 0.3


def test_a_feed_forward_net_takes_single_steps_and_accuracy_needs_held_out_steps():
    obs, actions, first = _cue_data(n_episodes=20)
    net = _net(None)
    with pytest.raises(ValueError, match="seq_len=1"):
        clone(net, lambda i: {"vector": torch.as_tensor(obs[i])}, actions, first, seq_len=4)
    assert action_accuracy(net, lambda i: {"vector": torch.as_tensor(obs[i])}, actions, first,
                           np.zeros(len(actions), bool)) is None
