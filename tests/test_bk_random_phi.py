"""BK's random-Φ control: a fixed random network as the potential, through BK-Code's shaping."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.core.errors import ConfigError
from llmguide.methods.bk.random_phi import RandomPotential
from llmguide.pipelines import load_config, run


def _obs(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.random((n, 3, 7, 7)).astype(np.float32), "vector": rng.random((n, 5)).astype(np.float32)}


def test_the_random_potential_is_fixed_per_seed_bounded_and_varies_over_states() -> None:
    obs = _obs(64, 1)
    a, b = RandomPotential(seed=0, clip=2.0), RandomPotential(seed=0, clip=2.0)
    phi = a(obs, [{}] * 64, np.zeros(64))
    assert np.array_equal(phi, b(obs, [{}] * 64, np.zeros(64)))            # same seed, same Φ
    assert np.array_equal(phi[:8], a({k: v[:8] for k, v in obs.items()}, [{}] * 8, np.zeros(8)))  # per state
    assert not np.allclose(phi, RandomPotential(seed=1, clip=2.0)(obs, [{}] * 64, np.zeros(64)))
    assert np.all(np.abs(phi) <= 2.0) and phi.std() > 0.01


def test_bk_random_phi_trains_through_bk_shaping_without_labels(tmp_path) -> None:
    import json

    cfg = load_config(["env=babyai", "env.task=GoToLocal-RedBall-S20", "env.max_steps=32", "num_envs=2",
                       "method=bk_random_phi", "agent.num_steps=32", "agent.hidden=32", "total_steps=128",
                       "eval.episodes=0", "progress=false", "log_every=32", f"run.dir={tmp_path}", "run.name=r"])
    assert run("train", cfg) == 0
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("reward/bk_random_phi/") for r in rows for k in r)
    assert any(r.get("charts/intrinsic_reward", 0.0) != 0.0 for r in rows)   # the shaping term is paid


def test_bk_random_phi_has_no_label_step(tmp_path) -> None:
    cfg = load_config(["env=babyai", "method=bk_random_phi", f"method.data={tmp_path}", f"run.dir={tmp_path}"])
    with pytest.raises(ConfigError, match="no label step"):
        run("label", cfg)
