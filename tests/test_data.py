"""Episode dataset: recorded from a real BabyAI-Text vector env, appended and merged on read."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from llmguide.data import Episode, EpisodeDataset, EpisodeRecorder, EpisodeWriter, load_episode, save_episode
from llmguide.envs.babyai.env import BabyAIText


def _vector_env(n: int = 2, max_steps: int = 6):
    return gym.vector.SyncVectorEnv([lambda: BabyAIText("GoToLocal", max_steps=max_steps) for _ in range(n)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def _record(root, steps: int, seed: int, writer: str | None = None, **kw) -> EpisodeRecorder:
    rec = EpisodeRecorder(_vector_env(), EpisodeWriter(root, writer=writer, meta={"env": "babyai"}), **kw)
    rec.reset(seed=seed)
    rng = np.random.default_rng(seed)
    finals = []
    for _ in range(steps):
        _, _, term, trunc, infos = rec.step(rng.integers(0, 6, rec.num_envs))
        for i in np.flatnonzero(np.logical_or(term, trunc)):
            finals.append((infos["final_obs"][i]["image"], infos["final_info"]["caption"][i]))
    rec.envs_finals = finals
    rec.close()
    return rec


def test_recorder_saves_consistent_episodes_with_true_final_states(tmp_path):
    rec = _record(tmp_path, steps=14, seed=0)
    ds = EpisodeDataset(tmp_path)
    assert len(ds) == rec.saved == rec.finished == 4          # 2 envs × (14 // 6) episodes of 6 steps
    for ep in ds:
        assert len(ep) == 6 and ep.obs["image"].shape == (7, 20, 7, 7) and len(ep.captions) == 7
        assert ep.meta["truncated"] and ep.meta["env"] == "babyai" and ep.mission.startswith("go to")
        assert all(c.startswith("You see") for c in ep.captions)
    finals = {(img.tobytes(), cap) for img, cap in rec.envs_finals}
    assert {(ep.obs["image"][-1].tobytes(), ep.captions[-1]) for ep in ds} == finals


def test_two_collection_runs_merge_and_a_torn_file_is_skipped(tmp_path, caplog):
    a = _record(tmp_path, steps=7, seed=1, writer="a")
    b = _record(tmp_path, steps=7, seed=2, writer="b", keep_every=2)
    assert a.saved == a.finished >= 2 and b.saved == (b.finished + 1) // 2
    ds = EpisodeDataset(tmp_path)
    assert len(ds) == a.saved + b.saved
    assert ds.stats()["writers"] == ["a", "b"]
    (tmp_path / "episodes" / "c-000000.npz").write_bytes(b"not a zip")
    with caplog.at_level("WARNING"):
        merged = EpisodeDataset([tmp_path]).episodes()
    assert len(merged) == a.saved + b.saved and "skipping unreadable episode file" in caplog.text
    # a run directory that holds dataset/ is accepted too
    run = tmp_path / "run"
    c = _record(run / "dataset", steps=7, seed=3)
    assert len(EpisodeDataset([tmp_path, run])) == a.saved + b.saved + 1 + c.saved


def test_writer_never_overwrites_and_round_trips(tmp_path):
    ep = Episode(obs={"vector": np.arange(9, dtype=np.float32).reshape(3, 3)}, actions=np.array([1, 2]),
                 rewards=np.array([0.0, 1.0]), captions=["a", "b", "c"], events=[[], ["pick up the key"]],
                 meta={"mission": "m"})
    w1, w2 = EpisodeWriter(tmp_path, writer="x"), EpisodeWriter(tmp_path, writer="x")
    p1, p2 = w1.write(ep), w2.write(ep)
    assert p1 != p2 and len(EpisodeDataset(tmp_path)) == 2
    back = load_episode(p1)
    np.testing.assert_array_equal(back.obs["vector"], ep.obs["vector"])
    assert back.events == [[], ["pick up the key"]] and back.captions == ["a", "b", "c"]


def test_inconsistent_episode_and_missing_dataset_are_clear_errors(tmp_path):
    bad = Episode(obs={"v": np.zeros((2, 1))}, actions=np.array([1, 2]), rewards=np.zeros(2),
                  captions=["a", "b", "c"], events=[[], []])
    with pytest.raises(ValueError, match="obs/v has 2 rows"):
        save_episode(tmp_path / "x.npz", bad)
    with pytest.raises(FileNotFoundError, match="llmguide collect"):
        EpisodeDataset(tmp_path / "nothing")
