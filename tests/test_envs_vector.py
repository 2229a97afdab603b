"""Vector envs (sync and subprocess) for every family; split_infos gives transition infos."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf

from llmguide.envs import make_env, make_vector_env, split_infos

CFGS = {
    "crafter": {"name": "crafter", "obs": "symbolic", "task": None, "max_steps": 12, "size": 9},
    "babyai": {"name": "babyai", "task": "MixedTrainLocal", "max_steps": 7},
    "minihack": {"name": "minihack", "id": "MiniHack-Room-5x5-v0", "max_steps": 9},
    "nethack": {"name": "nethack", "id": "NetHackScore-v0", "max_steps": 8},
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("family", list(CFGS))
def test_vector_env_split_infos_at_episode_end(family, mode):
    num_envs, max_steps = 2, CFGS[family]["max_steps"]
    venv = make_vector_env(OmegaConf.create(CFGS[family]), num_envs, seed=0, mode=mode)
    try:
        assert isinstance(venv.single_observation_space, gym.spaces.Dict)
        assert all(isinstance(s, gym.spaces.Box) for s in venv.single_observation_space.values())
        obs, infos = venv.reset(seed=0)
        first = split_infos(infos, num_envs)
        assert all(isinstance(i["caption"], str) and i["events"] == [] for i in first)
        lengths = np.zeros(num_envs, int)
        finished = 0
        for _ in range(2 * max_steps + 1):
            obs, _, terminated, truncated, infos = venv.step(venv.action_space.sample())
            assert venv.observation_space.contains(obs)
            lengths += 1
            per_env = split_infos(infos, num_envs)
            for i, info in enumerate(per_env):
                assert isinstance(info["caption"], str) and isinstance(info["mission"], str)
                assert isinstance(info["events"], list) and all(isinstance(e, str) for e in info["events"])
                if terminated[i] or truncated[i]:
                    finished += 1
                    # the finished step's info, not the reset's: it carries the episode stats
                    assert info["episode"]["l"] == lengths[i]
                    assert lengths[i] <= max_steps
                    lengths[i] = 0
                else:
                    assert "episode" not in info
        assert finished >= num_envs
    finally:
        venv.close()


def test_make_env_seed_is_used_at_first_reset_and_registered_ids():
    a = make_env(CFGS["babyai"], seed=4)
    b = make_env(CFGS["babyai"], seed=4)
    assert a.reset()[1]["caption"] == b.reset()[1]["caption"]
    for env_id in ("llmguide/BabyAIText-v0", "llmguide/MiniHackText-v0"):
        env = gym.make(env_id)
        obs, info = env.reset(seed=0)
        assert "caption" in info and env.observation_space.contains(obs)
        env.close()
    with pytest.raises(ValueError, match="unknown env family"):
        make_env({"name": "atari"})
    with pytest.raises(ValueError, match="sync"):
        make_vector_env(CFGS["babyai"], 1, seed=0, mode="threads")
