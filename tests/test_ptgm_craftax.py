"""PTGM on a batched env (Craftax): asynchronous options per env, the SMDP learner, the Crafter goal space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from llmguide.methods.ptgm.goals import (
    CRAFTER_INVENTORY,
    delta_goal_features,
    env_goal_features,
    event_counts,
    goal_feature_names,
    squash,
    state_dim,
    unsquash,
)
from llmguide.methods.ptgm.options import AsyncOptionsVectorEnv, GoalObservationVector, lowlevel_obs
from llmguide.methods.ptgm.smdp import AsyncOptionPPO, smdp_gae
from llmguide.rewards.base import RewardModule

torch.set_num_threads(1)


class BatchCountEnv(gym.vector.VectorEnv):
    """A batched env (all envs step in one call, SAME_STEP autoreset): env ``i``'s episodes last
    ``lengths[i]`` steps (terminated, or truncated with ``truncate``); reward = low-level action + 10·i."""

    def __init__(self, lengths, truncate=False):
        self.lengths, self.truncate = np.asarray(lengths), truncate
        self.num_envs = len(lengths)
        self.single_observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1e9, (1, 1, 1), np.float32),
                                                         "vector": gym.spaces.Box(0, 1e9, (3,), np.float32)})
        self.single_action_space = gym.spaces.Discrete(5)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.t = np.zeros(self.num_envs, np.int64)
        self.episode = np.zeros(self.num_envs, np.int64)
        self.low_actions: list[np.ndarray] = []

    def _obs(self):
        t = self.t.astype(np.float32)
        return {"image": t.reshape(-1, 1, 1, 1).copy(),
                "vector": np.stack([t, self.episode.astype(np.float32), np.arange(self.num_envs, dtype=np.float32)], 1)}

    def reset(self, *, seed=None, options=None):
        self.t[:] = 0
        return self._obs(), {}

    def step(self, actions):
        actions = np.asarray(actions)
        self.low_actions.append(actions.copy())
        self.t += 1
        rewards = actions.astype(np.float64) + 10.0 * np.arange(self.num_envs)
        end = self.t >= self.lengths
        term, trunc = end & (not self.truncate), end & self.truncate
        infos = {}
        if end.any():
            final = np.empty(self.num_envs, dtype=object)
            fo = self._obs()
            for i in np.flatnonzero(end):
                final[i] = {k: v[i].copy() for k, v in fo.items()}
            infos = {"final_obs": final, "_final_obs": end, "final_info": {"x": np.zeros(self.num_envs)},
                     "_final_info": end}
            self.t[end] = 0
            self.episode[end] += 1
        return self._obs(), rewards, term, trunc, infos

    def close(self, **kwargs):
        pass


def _code_policy(obs, goals):
    """Low level: the action is the goal's index (goals = eye(k)), so each env's option is visible."""
    return np.asarray(goals).argmax(1)


# --- AsyncOptionsVectorEnv ---------------------------------------------------------------------
def test_async_option_sums_rewards_and_ends_after_L_steps():
    env = BatchCountEnv([100, 100])
    venv = AsyncOptionsVectorEnv(env, _code_policy, np.eye(4), steps=3)
    assert venv.single_action_space == gym.spaces.Discrete(4)
    venv.reset(seed=0)
    assert venv.deciding.all()
    out = None
    for actions in ([2, 3], [0, 0], [1, 1]):       # codes read only at decision points
        out = venv.step(actions)
    assert [a.tolist() for a in env.low_actions] == [[2, 3]] * 3    # each env ran its own option for 3 steps
    assert out.ended.tolist() == [True, True] and venv.deciding.all()
    assert out.option.tolist() == [2, 3] and out.option_steps.tolist() == [3, 3]
    assert out.option_return.tolist() == [3 * 2.0, 3 * (3 + 10.0)]
    out = venv.step([1, 0])                       # new options start now
    assert env.low_actions[-1].tolist() == [1, 0] and not out.ended.any()
    with pytest.raises(ValueError, match="option codes"):
        venv.deciding[:] = True
        venv.step([4, 0])


@pytest.mark.parametrize("truncate", [False, True])
def test_async_options_end_on_done_and_envs_are_independent(truncate):
    # env 0's episodes last 5 steps, env 1's 100: options of L=3 end at different times
    env = BatchCountEnv([5, 100], truncate=truncate)
    venv = AsyncOptionsVectorEnv(env, _code_policy, np.eye(4), steps=3)
    venv.reset()
    ends: dict[int, list[tuple[int, int, float, bool]]] = {0: [], 1: []}
    codes = {0: iter([1, 2, 3, 1, 2]), 1: iter([3, 2, 1, 0])}
    actions = np.array([next(codes[0]), next(codes[1])])
    for t in range(1, 12):
        out = venv.step(actions)
        for i in np.flatnonzero(out.ended):
            done = bool(out.terminated[i] or out.truncated[i])
            ends[i].append((t, int(out.option_steps[i]), float(out.option_return[i]), done))
            actions[i] = next(codes[i])
        assert (out.terminated[0] or out.truncated[0]) == (t in (5, 10))
        assert bool(out.truncated[0]) == (truncate and t in (5, 10))
    # env 0: options 3, 2 (episode end at 5), 3, 2 (end at 10); rewards = code per step
    assert ends[0] == [(3, 3, 3.0, False), (5, 2, 4.0, True), (8, 3, 9.0, False), (10, 2, 2.0, True)]
    # env 1 is not affected by env 0's episode ends: every 3 steps, reward code + 10 per step
    assert ends[1] == [(3, 3, 39.0, False), (6, 3, 36.0, False), (9, 3, 33.0, False)]
    # the low level acted on every step for both envs with the env's own code
    assert [int(a[0]) for a in env.low_actions] == [1, 1, 1, 2, 2, 3, 3, 3, 1, 1, 2]
    assert [int(a[1]) for a in env.low_actions] == [3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0]


def test_goal_observation_vector_maps_obs_and_final_obs():
    env = BatchCountEnv([2, 5])
    wrapped = GoalObservationVector(env, 4, state_dim=3)
    assert wrapped.single_observation_space["vector"].shape == (3 + 4 + 1,)
    obs, _ = wrapped.reset()
    assert obs["vector"].shape == (2, 8) and (obs["vector"][:, :3] == env._obs()["vector"]).all()
    assert (obs["vector"][:, 3:] == 0).all()                     # unconditioned: no goal, has_goal 0
    wrapped.step(np.zeros(2, int))
    _, _, term, _, infos = wrapped.step(np.zeros(2, int))
    assert term.tolist() == [True, False]
    final = infos["final_obs"][0]
    assert final["vector"].shape == (8,) and final["vector"][0] == 2   # the finished episode's last state, mapped
    assert lowlevel_obs(env._obs(), np.ones(4), 4, state_dim=3)["vector"][0, -1] == 1


# --- SMDP learner -----------------------------------------------------------------------------
def test_smdp_gae_uses_the_discount_of_each_option():
    r = np.array([1.0, 2.0, 3.0])
    v = np.array([0.5, -1.0, 2.0], np.float32)
    d = np.array([0.5, 0.25, 0.9])
    adv, ret = smdp_gae(r, v, np.array([False, False, False]), d, last_value=4.0, lam=1.0)
    # lam = 1: returns are the discounted sums with each option's own discount, bootstrapped at the end
    expect2 = 3.0 + 0.9 * 4.0
    expect1 = 2.0 + 0.25 * expect2
    expect0 = 1.0 + 0.5 * expect1
    assert np.allclose(ret, [expect0, expect1, expect2]) and np.allclose(adv, ret - v)
    _, ret = smdp_gae(r, v, np.array([False, True, False]), d, last_value=4.0, lam=1.0)
    assert np.isclose(ret[1], 2.0) and np.isclose(ret[0], 1.0 + 0.5 * 2.0)   # no value across an episode end
    adv0, _ = smdp_gae(r, v, np.zeros(3, bool), d, last_value=4.0, lam=0.0)
    assert np.allclose(adv0, r + d * np.array([-1.0, 2.0, 4.0]) - v)           # lam = 0: one-step TD errors


class Capture(RewardModule):
    name = "capture"

    def __init__(self):
        self.batches = []

    def compute(self, batch):
        self.batches.append(batch)
        return np.zeros_like(batch.rewards, dtype=np.float32)


def _agent(env, steps=3, discount="option", num_steps=4, gamma=0.9, truncate_env=False):
    venv = AsyncOptionsVectorEnv(env, _code_policy, np.eye(4), steps=steps)
    cap = Capture()
    cfg = OmegaConf.create({"num_steps": num_steps, "hidden": 16, "image_encoder": "flat", "update_epochs": 1,
                            "num_minibatches": 1, "gamma": gamma, "gae_lambda": 1.0})
    return AsyncOptionPPO(venv, cfg, reward_modules=[(1.0, cap)], seed=0, option_discount=discount), cap


def test_async_option_ppo_learns_from_finished_options_only():
    env = BatchCountEnv([5, 100])
    agent, cap = _agent(env)
    captured = {}
    original = agent._update

    def spy(obs, actions, logprobs, values, advantages, returns, starts, state):
        captured.update(obs=obs, actions=actions, returns=returns, values=values)
        return original(obs, actions, logprobs, values, advantages, returns, starts, state)

    agent._update = spy
    agent.learn(1, progress=False)
    batch = cap.batches[0]
    M = batch.rewards.shape[0]
    assert batch.rewards.shape == (M, 1) and M >= 4 * 2            # >= num_steps × N finished options
    # env steps: 2 envs per step; each option of L=3 (env 0's end early at episode ends)
    assert agent.global_step == 2 * len(env.low_actions)
    env_of = batch.obs["vector"][:, 0, 2].astype(int)              # the env index is in the obs
    start_t = batch.obs["vector"][:, 0, 0]
    for i in (0, 1):
        rows = np.flatnonzero(env_of == i)
        acts, rews = batch.actions[rows, 0], batch.rewards[rows, 0]
        taus = np.where(batch.dones[rows, 0], 5 - start_t[rows], 3)
        # each transition's reward = the sum over its option: code per step + 10·i per step
        assert np.allclose(rews, taus * (acts + 10.0 * i))
        # an option starts where the previous ended (consecutive decisions of the same env)
        t_next = batch.next_obs["vector"][rows, 0, 0]
        assert np.allclose(start_t[rows[1:]], np.where(batch.dones[rows[:-1], 0], 0, t_next[:-1]))
    # env 0's terminal options: with lam = 1 their return is exactly their own reward (no bootstrap)
    term = np.flatnonzero(batch.terminated[:, 0])
    assert len(term) and np.allclose(captured["returns"][term, 0, 0], batch.rewards[term, 0])
    # the high level decided only at decision points: the low level ran the chosen code for whole options
    lows = np.array([a[1] for a in env.low_actions])
    assert all(len(set(lows[k:k + 3])) == 1 for k in range(0, len(lows) - 2, 3))


def test_async_option_ppo_per_step_discount_and_truncation_bootstrap():
    env = BatchCountEnv([4, 7], truncate=True)
    agent, cap = _agent(env, steps=3, discount="step", gamma=0.5)
    seqs_seen = []
    original = agent._train_on
    agent._train_on = lambda seqs: (seqs_seen.append(seqs), original(seqs))[1]
    agent.learn(1, progress=False)
    rows = [r for seq in seqs_seen[0] for r in seq]
    for r in rows:
        assert np.isclose(r["discount"], 0.5 ** r["tau"])
        assert (r["boot"] != 0.0) == r["truncated"]        # γ_k·V(final_obs) only for time-limit ends
        assert not r["terminated"]
    assert any(r["truncated"] for r in rows) and all(r["tau"] in (1, 2, 3) for r in rows)


def test_async_option_ppo_minibatches_partition_a_varying_number_of_options():
    """M finished options vary per rollout: every option lands in exactly one of num_minibatches near-equal
    minibatches (PPO's fixed slices would leave a 1-option remainder minibatch with unnormalised advantage)."""
    env = BatchCountEnv([5, 100])
    agent, _ = _agent(env)
    agent.num_minibatches = 4
    for M in (256, 257, 259, 261, 3):
        order = np.random.default_rng(M).permutation(M)
        mbs = agent._minibatches(order, max(1, M // 4))
        sizes = [len(m) for m in mbs]
        assert len(mbs) == min(4, M) and max(sizes) - min(sizes) <= 1
        assert sorted(np.concatenate(mbs).tolist()) == list(range(M))
    # flat PPO keeps CleanRL's fixed slices (a remainder minibatch when num_minibatches does not divide)
    from llmguide.learners.ppo import PPO

    assert [len(m) for m in PPO._minibatches(agent, np.arange(261), 65)] == [65, 65, 65, 65, 1]


# --- Crafter / Craftax goal space -------------------------------------------------------------
def test_crafter_goal_features_are_view_plus_inventory_counts():
    rng = np.random.default_rng(0)
    image = np.zeros((2, 19, 7, 9), np.uint8)
    image[:, 3] = 1
    vector = rng.integers(0, 10, (2, 22)).astype(np.float32) / 9.0
    f = env_goal_features(image, vector, "craftax")
    assert f.shape == (2, 19 * 7 * 9 + CRAFTER_INVENTORY)
    assert np.allclose(f[:, -CRAFTER_INVENTORY:], np.round(vector[:, :CRAFTER_INVENTORY] * 9))   # raw counts
    assert (f[:, :-CRAFTER_INVENTORY] == image.reshape(2, -1)).all()
    babyai = env_goal_features(np.ones((2, 7, 7, 3), np.uint8), vector, "babyai")
    assert babyai.shape == (2, 147) and babyai.dtype == np.uint8
    assert state_dim("babyai", 30) == 4 and state_dim("craftax", 22) == 22


# --- the pipeline on env=craftax (JAX compiles: slow) -------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("space", ["view_inventory", "inventory_delta"])
def test_craftax_pipeline_end_to_end(tmp_path, space):
    """collect (exploring agent) → codebook → pretrain → train (async options, BC-finetune) → eval."""
    import json

    pytest.importorskip("craftax")
    from llmguide.cli import main
    from llmguide.core.rundir import read_metrics

    base = ["env=craftax", "env.max_steps=48", f"run.dir={tmp_path}", "progress=false", "agent.image_encoder=flat",
            "num_envs=8", "agent.hidden=32"]
    small = ["method.codebook.k=4", "method.codebook.pca=8", "method.lowlevel.epochs=1", "method.prior.epochs=1",
             "method.lowlevel.hidden=32", "method.prior.hidden=32", "method.option_steps=4", f"method.goals.space={space}",
             "method.lowlevel.gate.enforce=false"]   # tiny data: the BC gate is recorded, not enforced
    assert main(["collect", *base, "method=ptgm", "method.collect.agent_steps=512", "agent.num_steps=16",
                 "run.name=data"]) == 0
    summary = json.loads((tmp_path / "data" / "collect_summary.json").read_text())
    assert summary["episodes"] >= 4 and summary["collector"] == "ppo+rnd"
    assert main(["codebook", *base, "method=ptgm", *small, f"method.data={tmp_path / 'data'}", "run.name=codes"]) == 0
    book = json.loads((tmp_path / "codes" / "ptgm" / "codebook.json").read_text())
    assert book["goal_space"] == space and len(book["clusters_kmeans"]) == 4
    assert sum(c["size"] for c in book["clusters_kmeans"]) == book["goals"]
    assert main(["pretrain", *base, "method=ptgm", *small, f"method.data={tmp_path / 'data'}",
                 f"method.codebook.run={tmp_path / 'codes'}", "run.name=pre"]) == 0
    manifest = json.loads((tmp_path / "pre" / "ptgm" / "manifest.json").read_text())
    assert manifest["state_dim"] == 22 and manifest["n_actions"] == 17 and manifest["goal_dim"] == 8
    for name, method, steps in (("opts", "ptgm", "agent.num_steps=2"), ("bcft", "ptgm_bc_finetune", "agent.num_steps=8")):
        assert main(["train", *base, f"method={method}", *small, steps, f"method.pretrained={tmp_path / 'pre'}",
                     "total_steps=400", "eval.episodes=1", f"run.name={name}"]) == 0
        result = json.loads((tmp_path / name / "eval.json").read_text())
        assert result["step"] >= 400 and "achievements_per_episode" in result
    records = read_metrics(tmp_path / "opts")
    assert any("charts/intrinsic_reward/kl_prior" in r for r in records)
    assert any(r.get("options/decisions", 0) >= 2 * 8 for r in records)     # >= num_steps x N options per update
    assert any("charts/achievements_per_episode" in r for r in records)     # episodes logged from the env steps


def test_inventory_delta_goal_is_the_change_to_the_goal_state_plus_events_in_between():
    items = goal_feature_names("view_inventory")
    names = goal_feature_names("inventory_delta")
    wood, ev_wood, ev_table = names.index("d:wood"), names.index("ev:collect wood"), names.index("ev:place table")
    T = 4                                              # states 0..4, transitions 0..3
    vector = np.zeros((T + 1, 22), np.float32)
    counts = [0, 1, 2, 2, 0]                           # wood: +1, +1, 0, −2 (a table placed)
    vector[:, items.index("inv:wood")] = np.asarray(counts) / 9.0
    events = [["collect wood"], ["collect wood"], [], ["place table"]]
    image = np.zeros((T + 1, 19, 7, 9), np.uint8)
    image[:, 2] = 1                                    # all grass ...
    image[4, 11, 3, 4], image[4, 2, 3, 4] = 1, 0       # ... and a table in view at the last state
    idx = np.array([2, 2, 4, 4])                       # goal state of each step t
    f = delta_goal_features(image, vector, events, idx, "inventory_delta")
    assert f.shape == (T, len(names))
    raw = unsquash(f)
    assert np.allclose(raw[:, wood], [2, 1, -2, -2])   # counts at g(t) minus counts at t
    assert np.allclose(raw[:, ev_wood], [2, 1, 0, 0])  # events of transitions t..g(t)−1
    assert np.allclose(raw[:, ev_table], [0, 0, 1, 1])
    assert np.allclose(np.delete(raw, [wood, ev_wood, ev_table], axis=1), 0)
    assert np.allclose(squash(np.array([9.0, -1.0, 0.0])), [np.log(10), -np.log(2), 0])
    fv = delta_goal_features(image, vector, events, idx, "inventory_delta_view", view_weight=2.0)
    view = fv[:, len(names):]
    assert view.shape == (T, 19) and np.allclose(fv[:, :len(names)], f)
    assert np.isclose(view[2, 11], 2.0 / 63) and np.isclose(view[0, 2], 2.0) and np.allclose(view.sum(1), 2.0)
    cum = event_counts(events, ["collect wood", "place table"])
    assert cum.shape == (T + 1, 2) and cum[-1].tolist() == [2, 1] and cum[0].tolist() == [0, 0]
    with pytest.raises(ValueError):
        delta_goal_features(image, vector, events, idx, "view_inventory")


def test_cluster_summary_names_the_mean_change_of_each_code():
    from llmguide.methods.ptgm.steps import cluster_summary

    goals = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, -2.0]], np.float32)
    out = cluster_summary(goals, np.array([0, 0, 1]), ["d:wood", "d:food"], 3, top=1)
    assert out[0] == {"code": 0, "size": 2, "top": [["d:wood", 2.0]]}
    assert out[1]["top"] == [["d:food", -2.0]] and out[2] == {"code": 2, "size": 0, "top": []}


@pytest.mark.parametrize("space", ["view_inventory", "inventory_delta", "inventory_delta_view"])
def test_goal_data_builds_the_configured_goal_space(tmp_path, space):
    from llmguide.core.errors import ConfigError
    from llmguide.data import Episode, EpisodeWriter
    from llmguide.methods.ptgm.steps import goal_data

    rng = np.random.default_rng(0)
    writer = EpisodeWriter(tmp_path / "data" / "dataset", writer="t")
    for T in (12, 20):
        image = np.zeros((T + 1, 19, 7, 9), np.uint8)
        image[:, 2] = 1
        vector = (np.arange(T + 1)[:, None] * np.ones(22) / 9.0).astype(np.float32)   # every count +1 per step
        writer.write(Episode(obs={"image": image, "vector": vector}, actions=rng.integers(0, 17, T),
                             rewards=np.zeros(T, np.float32), captions=[""] * (T + 1),
                             events=[["collect wood"]] * T, meta={}))
    cfg = OmegaConf.create({"env": {"name": "craftax"}, "seed": 0, "method": {
        "data": str(tmp_path / "data"), "codebook": {"seed": None},
        "goals": {"horizon_min": 3, "horizon_max": 5, "space": space, "vector_weight": 9.0, "view_weight": 1.0}}})
    data = goal_data(cfg)
    assert len(data["action"]) == 32 and data["state"].shape == (32, 22)
    if space == "view_inventory":
        assert data["goal"].shape == (32, 19 * 7 * 9 + CRAFTER_INVENTORY)
        return
    names = goal_feature_names(space)
    assert data["goal"].shape == (32, len(names))
    raw = unsquash(data["goal"][:, :CRAFTER_INVENTORY + 24])
    h = raw[:, names.index("d:wood")]              # wood +1 per step: the change = the steps to the goal state
    assert ((h >= 1) & (h <= 5)).all() and np.allclose(raw[:, names.index("ev:collect wood")], h)
    cfg.method.goals.space = "nonsense"
    with pytest.raises(ConfigError):
        goal_data(cfg)


def test_lowlevel_bc_reports_goal_information_as_accuracy_and_nll():
    """Actions follow the goal only half of the time (an explorer's noise): the goal lowers the val NLL and
    raises the accuracy; both are logged per epoch."""
    from llmguide.methods.ptgm.models import make_lowlevel, train_lowlevel

    rng = np.random.default_rng(0)
    n, k = 3000, 4
    goals = np.eye(k, dtype=np.float32)[rng.integers(0, k, n)]
    actions = np.where(rng.random(n) < 0.5, goals.argmax(1), rng.integers(0, k, n))
    images = np.zeros((n, 1, 1, 1), np.uint8)
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (1, 1, 1), np.float32),
                             "vector": gym.spaces.Box(-np.inf, np.inf, (2 + k + 1,), np.float32)})
    net = make_lowlevel(space, k, 32, "flat")
    out = train_lowlevel(net, images, np.zeros((n, 2), np.float32), goals, actions, p_uncond=0.2, epochs=4,
                         batch_size=128, lr=3e-3, seed=0, val_fraction=0.2)
    last = out["history"][-1]
    assert last["val_nll_cond"] < last["val_nll_uncond"] - 0.2 and last["val_acc_cond"] > last["val_acc_uncond"] + 0.2
    assert abs(last["val_nll_uncond"] - np.log(k)) < 0.1    # without the goal the action is uniform
