"""Gymnasium's own env checker on every env family, and seeded reproducibility across resets and steps."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from llmguide.envs import make_env

FAMILIES = [
    pytest.param({"name": "crafter"}, id="crafter"),
    pytest.param({"name": "babyai"}, id="babyai"),
    pytest.param({"name": "minihack", "id": "MiniHack-KeyRoom-Fixed-S5-v0", "message_obs": True}, id="minihack"),
    pytest.param({"name": "minihack", "id": "MiniHack-MultiRoom-N2-v0"}, id="minihack-minigrid"),  # map from MiniGrid
    pytest.param({"name": "nethack", "id": "NetHackScore-v0", "message_obs": True}, id="nethack"),
    pytest.param({"name": "craftax"}, id="craftax", marks=pytest.mark.slow),
]


def _make(cfg: dict, seed: int | None = None):
    if cfg["name"] in ("minihack", "nethack"):
        pytest.importorskip("minihack" if cfg["name"] == "minihack" else "nle")
    if cfg["name"] == "craftax":
        pytest.importorskip("craftax")
    if cfg["name"] == "babyai":
        pytest.importorskip("minigrid")
    return make_env(cfg, seed)


@pytest.mark.parametrize("cfg", FAMILIES)
def test_gymnasium_env_checker_passes(cfg):
    env = _make(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def _trajectory(env, seed: int, steps: int, actions: np.ndarray) -> list[dict]:
    """Observations of ``steps`` steps over several episodes: reset(seed) once, later resets unseeded."""
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for t in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(actions[t]))
        out.append(obs)
        if terminated or truncated or t % 40 == 39:  # force several later, unseeded resets
            obs, _ = env.reset()
            out.append(obs)
    return out


@pytest.mark.parametrize("cfg", [p for p in FAMILIES if p.id in ("minihack", "minihack-minigrid", "nethack", "babyai", "crafter")])
def test_same_seed_gives_identical_observations_across_later_resets_and_steps(cfg):
    a, b = _make(cfg), _make(cfg)
    actions = np.random.default_rng(0).integers(a.action_space.n, size=160)
    ta, tb = _trajectory(a, 5, 160, actions), _trajectory(b, 5, 160, actions)
    assert len(ta) == len(tb)
    for i, (oa, ob) in enumerate(zip(ta, tb, strict=True)):
        for key in oa:
            assert np.array_equal(oa[key], ob[key]), f"{key} differs at observation {i}"
    c = _make(cfg)
    tc = _trajectory(c, 6, 160, actions)
    assert any(not np.array_equal(x[k], y[k]) for x, y in zip(ta, tc, strict=False) for k in x), \
        "another seed should give another trajectory"
    for env in (a, b, c):
        env.close()
