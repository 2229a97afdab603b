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


def test_env_infos_are_built_lazily_and_match_the_eager_split():
    """Only the envs a reader touches are converted; each equals Gymnasium's per-env info."""
    from llmguide.envs.vector import EnvInfos

    n = 3
    infos = {"caption": np.array(["a", "b", "c"], dtype=object), "score": np.array([1, 2, 3]),
             "_score": np.array([False, True, True]),
             "inventory": {"wood": np.array([0, 4, 1]), "_wood": np.ones(n, bool)},
             "final_info": {"caption": np.array(["", "end", ""], dtype=object), "score": np.array([0, 9, 0])},
             "_final_info": np.array([False, True, False])}
    rows = EnvInfos(infos, n)
    assert rows._built == [None, None, None]
    assert rows[2] == {"caption": "c", "score": 3, "inventory": {"wood": 1}, "events": [], "mission": ""}
    assert rows._built[0] is None and rows._built[1] is None   # untouched envs were not built
    assert rows[1]["caption"] == "end" and rows[1]["score"] == 9   # a finished env's info is its final_info
    assert "score" not in rows[0] and isinstance(rows[2]["score"], int)  # masks respected, plain Python values
    assert list(rows)[2] is rows[2] and rows[-1] is rows[2]


def test_flat_image_encoder_is_one_linear_layer():
    import torch
    from gymnasium import spaces

    from llmguide.learners.networks import ActorCritic

    space = spaces.Dict({"image": spaces.Box(0, 1, (19, 7, 9), np.float32),
                         "vector": spaces.Box(0, 1, (22,), np.float32)})
    flat, cnn = ActorCritic(space, 17, image_encoder="flat"), ActorCritic(space, 17)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in flat.modules())
    assert any(isinstance(m, torch.nn.Conv2d) for m in cnn.modules())
    obs = {k: torch.rand(5, *s.shape) for k, s in space.spaces.items()}
    action, _, _, value, _ = flat.get_action_and_value(obs)
    assert action.shape == (5,) and value.shape == (5, 1)
    with pytest.raises(ValueError, match="image_encoder"):
        ActorCritic(space, 17, image_encoder="resnet")


def _aggregated_infos() -> dict:
    """A Gymnasium-style aggregated info of 3 envs: env 1 finished (its transition is in final_info),
    ``score`` only set for env 0 and 2, a nested dict column, and no ``caption`` for env 2."""
    return {
        "caption": np.array(["a", "b", None], dtype=object), "_caption": np.array([True, True, False]),
        "events": np.array([["x"], [], ["y"]], dtype=object), "_events": np.array([True, True, True]),
        "score": np.array([1.5, 0.0, 2.5]), "_score": np.array([True, False, True]),
        "inv": {"wood": np.array([1, 2, 3]), "_wood": np.array([True, True, True])},
        "_inv": np.array([True, True, True]),
        "final_info": {"caption": np.array([None, "b-final", None], dtype=object),
                       "_caption": np.array([False, True, False]),
                       "events": np.array([None, ["done"], None], dtype=object),
                       "_events": np.array([False, True, False])},
        "_final_info": np.array([False, True, False]),
    }


def test_info_rows_are_lazy_views_equal_to_per_env_dicts():
    from llmguide.envs.vector import InfoRows

    rows = InfoRows(_aggregated_infos(), 3)
    assert dict(rows[0]) == {"caption": "a", "events": ["x"], "score": 1.5, "inv": {"wood": 1}}
    assert dict(rows[1]) == {"caption": "b", "events": [], "inv": {"wood": 2}}   # masked score left out
    assert "score" not in rows[1] and rows[1].get("score", "none") == "none"
    assert "caption" not in rows[2] and rows[-1]["score"] == 2.5
    assert isinstance(rows[0]["inv"], dict)                 # nested columns come out as plain dicts
    assert "final_info" not in rows[0] and "final_obs" not in rows[0]
    assert rows.column("score", -1) == [1.5, -1, 2.5]
    assert rows.column("inv") == [{"wood": 1}, {"wood": 2}, {"wood": 3}]
    assert rows.column("missing", 0) == [0, 0, 0]
    with pytest.raises(IndexError):
        rows[3]


def test_env_infos_column_matches_the_rows():
    """A finished env's column value comes from final_info, text keys get the rows' defaults."""
    from llmguide.envs.vector import split_infos

    for key in ("caption", "events", "score", "inv", "mission", "missing"):
        expected = [info.get(key) for info in split_infos(_aggregated_infos(), 3)]
        assert split_infos(_aggregated_infos(), 3).column(key) == expected, key
    infos = split_infos(_aggregated_infos(), 3)
    assert infos.column("caption") == ["a", "b-final", ""]
    assert infos.column("events") == [["x"], ["done"], ["y"]]
    infos[0]["caption"] = "changed"        # a built row is what a reader saw: the column agrees with it
    assert infos.column("caption")[0] == "changed"
