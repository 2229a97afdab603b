"""Potential-based shaping: F = gamma * (1 - done) * Phi(s') - Phi(s), indexed right at episode ends."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.rewards import PotentialShaping, TransitionBatch, potential_shaping


def test_indexing_at_episode_boundaries():
    gamma = 0.9
    # one env; states are numbers and Phi(s) = s. Episode 1: 1 -> 2 -> 3 (done, true final obs 3).
    # The vector env resets to 7, so obs[2] is the reset obs 7; episode 2: 7 -> 8 -> 9.
    obs = np.array([1.0, 2.0, 7.0, 8.0])[:, None]
    next_obs = np.array([2.0, 3.0, 8.0, 9.0])[:, None]
    dones = np.array([0, 1, 0, 0], bool)[:, None]
    f = potential_shaping(obs, next_obs, dones, gamma)[:, 0]
    np.testing.assert_allclose(f, [0.9 * 2 - 1, -2.0, 0.9 * 8 - 7, 0.9 * 9 - 8], rtol=1e-6)
    # done: no Phi(s') term (terminal potential 0), and the reset obs 7 is never paired with 3
    assert f[1] == pytest.approx(-2.0)
    # the next episode's first step uses its own Phi(s) = Phi(7)
    assert f[2] == pytest.approx(0.9 * 8 - 7)


def test_discounted_shaping_telescopes_to_minus_initial_potential():
    """Sum_t gamma^t F_t over a whole episode equals -Phi(s_0): shaping cannot change the optimum."""
    rng = np.random.default_rng(0)
    gamma, length = 0.97, 40
    phi = rng.normal(size=length + 1)
    dones = np.zeros(length, bool)
    dones[-1] = True
    f = potential_shaping(phi[:-1, None], phi[1:, None], dones[:, None], gamma)[:, 0]
    discounted = np.sum(gamma ** np.arange(length) * f)
    assert discounted == pytest.approx(-phi[0], rel=1e-5)


def test_potential_shaping_module_on_a_two_env_rollout():
    gamma = 0.5
    potential = lambda obs: obs["x"].sum(axis=-1)  # noqa: E731  (T, N, 2) -> (T, N)
    x = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2)
    x_next = x + 100
    dones = np.array([[0, 1], [1, 0], [0, 0]], bool)
    batch = TransitionBatch(obs={"x": x}, actions=np.zeros((3, 2), int), next_obs={"x": x_next},
                            rewards=np.zeros((3, 2)), terminated=dones)
    module = PotentialShaping(potential, gamma)
    f = module.compute(batch)
    phi_s, phi_next = x.sum(-1), x_next.sum(-1)
    for t in range(3):
        for n in range(2):
            expected = -phi_s[t, n] if dones[t, n] else gamma * phi_next[t, n] - phi_s[t, n]
            assert f[t, n] == pytest.approx(expected)


def test_bad_potentials_get_clear_errors():
    batch = TransitionBatch(obs={"x": np.zeros((2, 3, 1))}, actions=np.zeros((2, 3)), next_obs={"x": np.zeros((2, 3, 1))},
                            rewards=np.zeros((2, 3)), terminated=np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"shape \(6,\), expected \(2, 3\)"):
        PotentialShaping(lambda o: o["x"].reshape(-1), 0.9).compute(batch)
    with pytest.raises(ValueError, match="non-finite"):
        PotentialShaping(lambda o: o["x"][..., 0] * np.nan, 0.9).compute(batch)
    with pytest.raises(ValueError, match="shape mismatch"):
        potential_shaping(np.zeros((2, 3)), np.zeros((3, 2)), np.zeros((2, 3)), 0.9)


def test_truncation_keeps_the_next_potential_termination_zeroes_it():
    gamma = 0.9
    x = np.zeros((1, 3, 1), np.float32)
    x_next = np.full((1, 3, 1), 2.0, np.float32)
    # env 0 continues, env 1 is cut by a time limit, env 2 really ended
    batch = TransitionBatch(obs={"x": x}, actions=np.zeros((1, 3), int), next_obs={"x": x_next},
                            rewards=np.zeros((1, 3)), terminated=np.array([[0, 0, 1]], bool),
                            truncated=np.array([[0, 1, 0]], bool))
    f = PotentialShaping(lambda o: o["x"][..., 0], gamma).compute(batch)
    np.testing.assert_allclose(f, [[gamma * 2.0, gamma * 2.0, 0.0]])
    assert batch.dones.tolist() == [[False, True, True]]
