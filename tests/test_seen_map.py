"""env.seen_map: the memory channel every learner can read, built from the agent's views alone (issue 52)."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from llmguide.core.errors import ConfigError
from llmguide.envs import make_env, make_vector_env
from llmguide.envs.crafter import seen_map
from llmguide.envs.crafter.expert.agent import ExpertPolicy
from llmguide.envs.crafter.expert.nav import view_ids


def _cfg(name: str, size: int, **env) -> OmegaConf:
    base = OmegaConf.load(f"src/llmguide/conf/env/{name}.yaml")
    return OmegaConf.merge(base, {"seen_map": {"size": size}, **env})


def _ids(obs_map: np.ndarray) -> np.ndarray:
    """One-hot map planes -> ids ``[y, x]`` (-1: not seen)."""
    return obs_map.argmax(-3) - 1


@pytest.mark.parametrize("name", ["crafter", "craftax"])
def test_the_map_holds_the_current_view_and_remembers_what_left_it(name):
    size = 15
    envs = make_vector_env(_cfg(name, size, max_steps=400), 2, seed=1)
    expert = ExpertPolicy(_cfg(name, 0), seed=1, mode="data")
    try:
        assert envs.single_observation_space["map"].shape == (seen_map.CHANNELS, size, size)
        obs, infos = envs.reset(seed=1)
        seen_counts = []
        for _ in range(150):
            ids = _ids(obs["map"])
            view = np.swapaxes(view_ids(obs["image"]), -1, -2)   # [y, x]
            h = size // 2
            centre = ids[:, h - 3:h + 4, h - 4:h + 5]
            material = (view >= 1) & (view <= 12)   # materials of the view are on the map, where they are
            assert np.array_equal(centre[material], view[material])
            assert np.isclose(obs["map"].sum(-3), 1.0).all()   # one class per cell
            seen_counts.append((ids >= 0).sum(axis=(1, 2)))
            obs, _, _, _, infos = envs.step(expert.act(obs, infos))
        # the expert walks: cells that left the view stay on the map
        assert max(c.max() for c in seen_counts) > 63
    finally:
        envs.close()


def test_the_map_is_the_experts_own_memory_and_forgets_at_episode_end():
    """Dead reckoning from views only: the wrapper's position track equals the expert's, step for step; a new
    episode starts with only its first view seen."""
    envs = make_vector_env(_cfg("craftax", 15, max_steps=60), 3, seed=2)
    expert = ExpertPolicy({"name": "craftax"}, seed=2, mode="data")
    wrapper = envs
    while not isinstance(wrapper, seen_map.SeenMapVector):
        wrapper = wrapper.env
    try:
        obs, infos = envs.reset(seed=2)
        restarts = 0
        for _ in range(130):
            actions = expert.act(obs, infos)
            for agent, memory in zip(expert.agents, wrapper.maps, strict=True):
                assert np.array_equal(agent.map.pos, memory.map.pos)
            obs, _, term, trunc, infos = envs.step(actions)
            for i in np.flatnonzero(np.asarray(term) | np.asarray(trunc)):
                restarts += 1
                assert 0 < (_ids(obs["map"][i]) >= 0).sum() <= 63
        assert restarts >= 3
    finally:
        envs.close()


def test_one_env_has_the_same_space_and_is_off_by_default():
    env = make_env(_cfg("crafter", 11), seed=0)
    obs, _ = env.reset(seed=0)
    assert obs["map"].shape == env.observation_space["map"].shape == (seen_map.CHANNELS, 11, 11)
    obs, *_ = env.step(1)
    assert env.observation_space.contains(obs)
    plain = make_env(OmegaConf.load("src/llmguide/conf/env/crafter.yaml"), seed=0)
    assert "map" not in plain.observation_space.spaces
    vec = make_vector_env(OmegaConf.load("src/llmguide/conf/env/craftax.yaml"), 2, seed=0)
    assert "map" not in vec.single_observation_space.spaces
    vec.close()


@pytest.mark.parametrize(("env", "key"), [({"seen_map": {"size": 8}}, "env.seen_map.size"),
                                          ({"seen_map": {"size": 15, "radius": 3}}, "env.seen_map.radius"),
                                          ({"seen_map": {"size": 9}, "actions": "text"}, "env.seen_map.size")])
def test_bad_settings_name_their_key(env, key):
    cfg = OmegaConf.merge(OmegaConf.load("src/llmguide/conf/env/crafter.yaml"), env)
    with pytest.raises(ConfigError) as err:
        make_vector_env(cfg, 1, seed=0)
    assert err.value.key == key


def test_an_expert_that_only_labels_follows_the_moves_another_policy_made():
    """DAgger: a random policy drives and the expert labels; told the executed actions, the expert's dead
    reckoning matches the map's, which follows the actions taken (without it, it follows its own choices)."""
    envs = make_vector_env(_cfg("craftax", 15, max_steps=500), 2, seed=4)
    wrapper = envs
    while not isinstance(wrapper, seen_map.SeenMapVector):
        wrapper = wrapper.env
    rng = np.random.default_rng(0)
    try:
        for tell in (True, False):
            expert = ExpertPolicy({"name": "craftax"}, seed=4, mode="plain")
            obs, infos = envs.reset(seed=4)
            apart = 0
            for _ in range(60):
                expert.act(obs, infos)
                apart += sum(not np.array_equal(a.map.pos, m.map.pos) for a, m in zip(expert.agents, wrapper.maps,
                                                                                       strict=True))
                taken = rng.integers(1, 5, size=2)   # random moves
                if tell:
                    expert.executed(taken)
                obs, _, _, _, infos = envs.step(taken)
            assert (apart == 0) if tell else (apart > 0)
    finally:
        envs.close()
