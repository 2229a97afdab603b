"""Intrinsic reward modules: novelty falls on revisits, normalisers, the CleanRL #360 axis, checkpoints."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from llmguide.core.errors import ConfigError
from llmguide.pipelines import load_config
from llmguide.rewards import REWARDS, TransitionBatch, build_reward_modules, register_reward
from llmguide.rewards.normalization import (
    IntrinsicRewardNormalizer,
    ObservationNormalizer,
    RewardForwardFilter,
    RunningMeanStd,
)
from llmguide.rewards.noveld import NovelD
from llmguide.rewards.shaping import PotentialShaping

# --- a small grid world: the agent moves on a GxG grid; obs = one-hot cell + (x, y) or an image ---
G = 12
MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]])
VECTOR_SPACE = spaces.Dict({"grid": spaces.Box(0, 1, (G * G,), np.float32), "pos": spaces.Box(0, 1, (2,), np.float32)})
IMAGE_SPACE = spaces.Dict({"image": spaces.Box(0, 255, (2, G, G), np.uint8), "pos": spaces.Box(0, 1, (2,), np.float32)})
ACTIONS = spaces.Discrete(4)


def render(pos: np.ndarray, image: bool) -> dict[str, np.ndarray]:
    n = len(pos)
    out = {"pos": (pos / (G - 1)).astype(np.float32)}
    if image:
        img = np.zeros((n, 2, G, G), np.uint8)
        img[np.arange(n), 0, pos[:, 0], pos[:, 1]] = 255
        img[:, 1, ::3, ::4] = 100
        out["image"] = img
    else:
        grid = np.zeros((n, G * G), np.float32)
        grid[np.arange(n), pos[:, 0] * G + pos[:, 1]] = 1.0
        out["grid"] = grid
    return out


def grid_batch(rng: np.random.Generator, t: int, regions: list[tuple[int, int]], image: bool = False) -> TransitionBatch:
    """T steps of len(regions) envs; env n wanders in columns [lo, hi) of the grid."""
    n = len(regions)
    lo = np.array([r[0] for r in regions])
    hi = np.array([r[1] for r in regions])
    x = rng.integers(np.tile(lo, t), np.tile(hi, t))
    pos = np.stack([x, rng.integers(0, G, t * n)], 1)
    actions = rng.integers(0, 4, t * n)
    nxt = pos + MOVES[actions]
    nxt[:, 0] = np.clip(nxt[:, 0], np.tile(lo, t), np.tile(hi, t) - 1)
    nxt[:, 1] = np.clip(nxt[:, 1], 0, G - 1)

    def shape(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v.reshape(t, n, *v.shape[1:]) for k, v in d.items()}

    return TransitionBatch(obs=shape(render(pos, image)), actions=actions.reshape(t, n),
                           next_obs=shape(render(nxt, image)), rewards=np.zeros((t, n), np.float32),
                           terminated=np.zeros((t, n), bool))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Small nets on a shared 2-core box: one thread is faster and does not starve other jobs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SMALL = {"feature_dim": 32, "hidden": 64, "lr": 1e-3, "epochs": 4, "minibatch_size": 64}
SEEN, UNSEEN = (0, G // 2), (G // 2 + 1, G)


CLASSES = {"rnd": "RND", "noveld": "NovelD", "icm": "ICM", "apt": "APT"}


def target(name: str) -> str:
    return f"llmguide.rewards.{name}:{CLASSES[name]}"


def build(name: str, space: spaces.Space = VECTOR_SPACE, num_envs: int = 4, seed: int = 0, **module):
    cfg = {"name": name, "reward": target(name), "intrinsic_coef": 0.5, "module": {**SMALL, **module}}
    [(coef, m)] = build_reward_modules(cfg, space, ACTIONS, num_envs, seed=seed)
    assert coef == 0.5
    return m


# --- normalisers ---------------------------------------------------------------------------
def test_running_mean_std_converges_to_stream_moments():
    rng = np.random.default_rng(1)
    rms = RunningMeanStd()
    chunks = [rng.normal(2.0, 3.0, size=int(rng.integers(1, 500))) for _ in range(60)]
    for c in chunks:
        rms.update(c)
    data = np.concatenate(chunks)
    assert rms.mean == pytest.approx(data.mean(), rel=1e-4)
    assert rms.std == pytest.approx(data.std(), rel=1e-4)
    assert rms.std == pytest.approx(3.0, rel=0.05)


def test_forward_filter_walks_time_per_env_not_envs():
    """CleanRL #360: the discounted return must run along time, separately for each env."""
    rewards = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # (T=3, N=2)
    filt = RewardForwardFilter(gamma=0.5, num_envs=2)
    returns = filt.filter(rewards)
    expected = np.array([[1.0, 10.0], [2.5, 25.0], [4.25, 42.5]])  # R_t = 0.5 R_{t-1} + r_t per column
    np.testing.assert_allclose(returns, expected)
    # the state carries into the next rollout
    np.testing.assert_allclose(filt.filter(np.zeros((1, 2))), [[2.125, 21.25]])
    # CleanRL's transposed loop treats envs as time: its values mix env 0 into env 1
    buggy = RewardForwardFilter(gamma=0.5, num_envs=3)
    buggy_out = np.array([buggy.update(row) for row in rewards.T])  # what #360 computed
    assert not np.allclose(buggy_out.T, returns)
    assert buggy_out[1, 0] == pytest.approx(0.5 * 1 + 10)  # env 1's "return" contains env 0's reward
    with pytest.raises(ValueError, match=r"\(T, 2\)"):
        RewardForwardFilter(0.5, 2).filter(rewards.T)


def test_intrinsic_normalizer_matches_hand_computation_and_true_std():
    rng = np.random.default_rng(2)
    gamma, t, n = 0.9, 64, 32
    norm = IntrinsicRewardNormalizer(gamma, n)
    rollouts = [rng.normal(0.0, 1.0, (t, n)) for _ in range(20)]
    outs = [norm(r) for r in rollouts]
    # hand computation over the concatenated stream, env by env, in time order
    stream = np.concatenate(rollouts)  # (20*T, N)
    ret = np.zeros_like(stream)
    acc = np.zeros(n)
    for i in range(len(stream)):
        acc = gamma * acc + stream[i]
        ret[i] = acc
    assert norm.return_rms.std == pytest.approx(ret.std(), rel=1e-3)
    np.testing.assert_allclose(outs[-1], rollouts[-1] / ret.std(), rtol=1e-3)
    # iid N(0, 1) rewards: stationary return std is 1 / sqrt(1 - gamma^2)
    assert norm.return_rms.std == pytest.approx(1.0 / np.sqrt(1 - gamma**2), rel=0.05)


def test_observation_normalizer_standardises_and_clips():
    rng = np.random.default_rng(3)
    norm = ObservationNormalizer({"x": (3,)}, clip=2.0)
    data = rng.normal([1.0, -5.0, 100.0], [0.5, 2.0, 10.0], size=(5000, 3))
    norm.update({"x": data})
    z = norm({"x": data})["x"]
    np.testing.assert_allclose(z.mean(0), 0.0, atol=0.05)
    assert np.abs(z).max() <= 2.0
    assert norm({"x": np.array([[1.0, -5.0, 1e6]])})["x"][0, 2] == 2.0


# --- novelty falls on revisits ------------------------------------------------------------------
@pytest.mark.parametrize("name,iters", [("rnd", 25), ("noveld", 25), ("icm", 100), ("apt", 70)])
def test_novelty_of_revisited_states_falls_below_unseen(name, iters):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    extra = {"first_visit": False} if name == "noveld" else {}
    m = build(name, num_envs=8, normalize=False, **extra)
    first = None
    for _ in range(iters):
        batch = grid_batch(rng, 16, [SEEN] * 8)
        r = m.compute(batch)
        first = r.mean() if first is None else first
        m.update(batch)
    # one mixed batch: envs 0-3 in the visited half, envs 4-7 in the never-visited half
    mixed = grid_batch(rng, 16, [SEEN] * 4 + [UNSEEN] * 4)
    r = m.compute(mixed)
    seen, unseen = r[:, :4], r[:, 4:]
    assert seen.mean() < 0.8 * first, (seen.mean(), first)
    assert seen.mean() < 0.65 * unseen.mean(), (seen.mean(), unseen.mean())


def test_rnd_cnn_path_on_images_and_reward_normalisation():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    m = build("rnd", space=IMAGE_SPACE, num_envs=8, epochs=2)
    for _ in range(12):
        batch = grid_batch(rng, 16, [SEEN] * 8, image=True)
        r = m.compute(batch)
        m.update(batch)
    mixed = grid_batch(rng, 16, [SEEN] * 4 + [UNSEEN] * 4, image=True)
    r = m.compute(mixed)
    assert r.shape == (16, 8) and r.dtype == np.float32
    assert r[:, :4].mean() < r[:, 4:].mean()
    # normalised reward = raw error / running std of the discounted intrinsic returns
    raw = m.novelty({k: v.reshape(-1, *v.shape[2:]) for k, v in mixed.next_obs.items()}).reshape(16, 8)
    np.testing.assert_allclose(r, raw / m.reward_norm.return_rms.std, rtol=1e-4)
    assert m.reward_norm.return_rms.count == pytest.approx(13 * 16 * 8, abs=1)


def test_noveld_pays_relu_difference_on_first_visits_only():
    m = build("noveld", num_envs=1, normalize=False)
    a, b, c = [1, 1], [1, 2], [1, 3]
    # episode 1: A->B, B->A, A->C (done); episode 2 starts at the reset obs A: A->B, B->A
    obs = render(np.array([a, b, a, a, b]), image=False)
    nxt = render(np.array([b, a, c, b, a]), image=False)
    batch = TransitionBatch(
        obs={k: v[:, None] for k, v in obs.items()}, actions=np.zeros((5, 1), int),
        next_obs={k: v[:, None] for k, v in nxt.items()}, rewards=np.zeros((5, 1)),
        terminated=np.array([[0], [0], [1], [0], [0]], bool),
    )
    mask = NovelD.first_visit_mask(build("noveld", num_envs=1), batch)[:, 0]
    # B new; A revisited (the episode's first obs); C new; after the reset B is new again; A revisited
    np.testing.assert_array_equal(mask, [1, 0, 1, 1, 0])
    r = m.compute(batch)[:, 0]
    flat = lambda d: {k: v[:, 0] for k, v in d.items()}  # noqa: E731
    expected = np.maximum(m.novelty(flat(batch.next_obs)) - 0.5 * m.novelty(flat(batch.obs)), 0) * mask
    np.testing.assert_allclose(r, expected, rtol=1e-5)
    assert r[0] > 0 and r[1] == 0


# --- checkpoints ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rnd", "noveld", "icm", "apt"])
def test_state_dict_round_trip_reproduces_rewards(name):
    rng = np.random.default_rng(5)
    batches = [grid_batch(rng, 16, [SEEN] * 4) for _ in range(3)]
    a = build(name, seed=1, epochs=1)
    a.compute(batches[0])
    a.update(batches[0])
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    fresh = build(name, seed=2, epochs=1)
    fresh.compute(batches[0])
    b = build(name, seed=2, epochs=1)
    b.load_state_dict(torch.load(buffer, weights_only=False))
    expected = a.compute(batches[1])
    np.testing.assert_allclose(expected, b.compute(batches[1]), rtol=1e-6)
    assert not np.allclose(expected, fresh.compute(batches[1]), rtol=1e-3)  # the state is what matters
    a.update(batches[1])
    b.update(batches[1])
    np.testing.assert_allclose(a.compute(batches[2]), b.compute(batches[2]), rtol=1e-6)


# --- registry / config ---------------------------------------------------------------------------
def test_build_from_shipped_method_configs():
    for name in ("rnd", "noveld", "icm", "apt"):
        cfg = load_config([f"method={name}"])
        [(coef, module)] = build_reward_modules(cfg.method, VECTOR_SPACE, ACTIONS, 2)
        assert coef == cfg.method.intrinsic_coef and module.name == name
    assert build_reward_modules(load_config(["method=none"]).method, VECTOR_SPACE, ACTIONS, 2) == []


def test_bad_method_config_names_the_key():
    with pytest.raises(ConfigError, match="method.module.feature_dims"):
        build_reward_modules({"name": "rnd", "reward": target("rnd"), "module": {"feature_dims": 3}},
                             VECTOR_SPACE, ACTIONS, 2)
    with pytest.raises(ConfigError, match="method.module.gamma"):
        build_reward_modules({"name": "icm", "reward": target("icm"), "module": {"gamma": 1.5}}, VECTOR_SPACE, ACTIONS, 2)
    with pytest.raises(ConfigError, match="method.module.representation"):
        build_reward_modules({"name": "apt", "reward": target("apt"), "module": {"representation": "clip"}},
                             VECTOR_SPACE, ACTIONS, 2)
    with pytest.raises(ConfigError, match="method.reward"):
        build_reward_modules({"name": "nope"}, VECTOR_SPACE, ACTIONS, 2)
    with pytest.raises(ConfigError, match="method.reward"):
        build_reward_modules({"name": "nope", "reward": "llmguide.rewards.rnd:Nope"}, VECTOR_SPACE, ACTIONS, 2)
    assert build_reward_modules({"name": "none", "reward": None}, VECTOR_SPACE, ACTIONS, 2) == []
    with pytest.raises(ConfigError, match="method.module.lr"):
        load_config(["method=rnd", "method.module.lr=-1.0"])


def test_register_reward_adds_a_method():
    def factory(cfg, obs_space, action_space, num_envs, device="cpu", seed=0):
        return [(2.0, PotentialShaping(lambda o: o["pos"][..., 0], gamma=0.9)), (0.1, build("rnd"))]

    register_reward("pos_shaping", factory)
    try:
        pairs = build_reward_modules({"name": "pos_shaping"}, VECTOR_SPACE, ACTIONS, 4)
        assert [c for c, _ in pairs] == [2.0, 0.1]
        batch = grid_batch(np.random.default_rng(0), 4, [SEEN] * 4)
        assert pairs[0][1].compute(batch).shape == (4, 4)
    finally:
        REWARDS.pop("pos_shaping")


def test_crafter_sized_images_take_the_strided_cnn_path():
    space = spaces.Dict({"image": spaces.Box(0, 255, (3, 64, 64), np.uint8), "inventory": spaces.Box(0, 9, (16,), np.float32)})
    rng = np.random.default_rng(0)
    obs = {"image": rng.integers(0, 256, (2, 2, 3, 64, 64), dtype=np.uint8),
           "inventory": rng.integers(0, 9, (2, 2, 16)).astype(np.float32)}
    batch = TransitionBatch(obs=obs, actions=np.zeros((2, 2), int), next_obs=obs, rewards=np.zeros((2, 2)),
                            terminated=np.zeros((2, 2), bool))
    for name in ("rnd", "icm"):
        m = build(name, space=space, num_envs=2)
        assert m.compute(batch).shape == (2, 2)
        assert all(np.isfinite(v) for v in m.update(batch).values())


@pytest.mark.parametrize("name", ["rnd", "noveld", "icm", "apt"])
def test_nonfinite_observations_are_counted_and_do_not_poison_the_module(name):
    m = build(name, num_envs=4, normalize=True)
    rng = np.random.default_rng(0)
    batch = grid_batch(rng, 8, [SEEN] * 4)
    batch.next_obs["pos"][3, 2, 0] = np.nan
    r = m.compute(batch)
    assert r[3, 2] == 0.0 and np.isfinite(r).all()
    assert m.reward_norm.nonfinite == 1
    m.update(batch)
    assert np.isfinite(m.compute(grid_batch(rng, 8, [SEEN] * 4))).all()  # statistics and weights stay clean
