"""PTGM: codebook assignment, hindsight indices, options, KL direction/sign, prior labels, step counting."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from llmguide.methods.ptgm.goals import GoalCodebook, fit_codebook, hindsight_indices
from llmguide.methods.ptgm.models import GoalPrior, KLToPrior, categorical_kl, train_prior
from llmguide.methods.ptgm.options import GoalObservation, OptionsVectorEnv, OptionsWrapper, lowlevel_obs
from llmguide.rewards.base import TransitionBatch

torch.set_num_threads(1)


# --- a tiny env: reward = action, ends (terminated) after `length` steps ---------------------------
class CountEnv(gym.Env):
    def __init__(self, length: int = 5, truncate: bool = False):
        self.length, self.truncate = length, truncate
        self.observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (2, 1, 1), np.float32),
                                                  "vector": gym.spaces.Box(0, 1, (5,), np.float32)})
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0
        self.actions: list[int] = []

    def _obs(self):
        return {"image": np.full((2, 1, 1), self.t, np.float32), "vector": np.eye(5, dtype=np.float32)[self.t % 4]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"success": False}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        end = self.t >= self.length
        return self._obs(), float(action), end and not self.truncate, end and self.truncate, {"success": end}


def test_hindsight_indices_are_future_states_within_the_horizon():
    rng = np.random.default_rng(0)
    for T in (1, 3, 7, 40, 123):
        idx = hindsight_indices(T, rng, 5, 30)
        t = np.arange(T)
        assert idx.shape == (T,)
        assert (idx > t).all() and (idx <= np.minimum(t + 30, T)).all()
        assert idx[-1] == T                                   # the last segment ends at the final state
        # segments: constant goal until it is reached, then a new one >= 5 steps later (unless clipped)
        ends = np.unique(idx)
        assert all(b - a >= 5 for a, b in zip(ends[:-1], ends[1:], strict=True) if b != T)
        assert (np.diff(idx) >= 0).all()


def test_hindsight_indices_exact_segments():
    class Fixed:  # rng whose integers() returns 3 then 4 then ...
        def __init__(self):
            self.seq = iter([3, 4, 10])

        def integers(self, lo, hi):
            return next(self.seq)

    assert hindsight_indices(9, Fixed(), 2, 10).tolist() == [3, 3, 3, 7, 7, 7, 7, 9, 9]


def _blobs(k=4, n=50, d=6, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 10, (k, d))
    x = np.concatenate([c + rng.normal(0, 0.1, (n, d)) for c in centers]).astype(np.float32)
    return x, np.repeat(np.arange(k), n), centers


def test_codebook_assigns_points_to_their_cluster_and_medoids_are_real_goals(tmp_path):
    x, truth, centers = _blobs()
    book = fit_codebook(x, 4, seed=0)
    labels = book.assign(x)
    # the clustering recovers the blobs up to a permutation
    for j in range(4):
        assert len(set(labels[truth == j])) == 1
    assert len(set(labels)) == 4
    # nearest-centroid assignment of the centres themselves
    assert (book.assign(book.centroids) == np.arange(4)).all()
    # medoids are data points, each in its own cluster
    for j, m in enumerate(book.medoids):
        assert np.isclose(x, m).all(1).any()
        assert book.assign(m[None])[0] == j
    book.save(tmp_path / "b.npz")
    again = GoalCodebook.load(tmp_path / "b.npz")
    assert (again.assign(x) == labels).all() and again.seed == 0 and again.meta["k"] == 4


def test_codebook_pca_embedding_and_random_codes_share_the_goal_space():
    x, _, _ = _blobs(d=20)
    book = fit_codebook(x, 4, seed=1, pca=3)
    assert book.dim == 3 and book.embed(x).shape == (len(x), 3)
    rand = fit_codebook(x, 4, seed=1, kind="random", embedding=book)
    assert rand.kind == "random" and (rand.pca_components == book.pca_components).all()
    emb = book.embed(x)
    for code in rand.codes():          # random codes are real (embedded) goals
        assert np.isclose(emb, code, atol=1e-5).all(1).any()
    soft = book.soft_assign(emb[:5], 1.0)
    assert np.allclose(soft.sum(1), 1) and (soft.argmax(1) == book.assign(emb[:5])).all()


def test_codebook_refuses_more_codes_than_distinct_goals():
    with pytest.raises(ValueError, match="distinct goals"):
        fit_codebook(np.zeros((10, 3), np.float32), 4, seed=0)


def test_option_sums_rewards_over_L_steps_and_counts_them():
    env = CountEnv(length=100)
    seen = []
    opt = OptionsWrapper(env, lambda obs, goal: (seen.append(goal.copy()), 2)[1], goals=np.eye(3), steps=4)
    assert opt.action_space == gym.spaces.Discrete(3)
    opt.reset(seed=0)
    obs, reward, term, trunc, info = opt.step(1)
    assert reward == 8.0 and info["option_steps"] == 4 and not (term or trunc)
    assert env.t == 4 and obs["image"][0, 0, 0] == 4
    assert all((g == np.eye(3)[1]).all() for g in seen)      # conditioned on the chosen code


@pytest.mark.parametrize("truncate", [False, True])
def test_option_ends_on_done(truncate):
    env = CountEnv(length=6, truncate=truncate)
    opt = OptionsWrapper(env, lambda obs, goal: 1, goals=np.eye(2), steps=4)
    opt.reset(seed=0)
    assert opt.step(0)[1:4] == (4.0, False, False)
    _, reward, term, trunc, info = opt.step(0)
    assert reward == 2.0 and info["option_steps"] == 2 and env.t == 6   # stopped at the episode end
    assert (term, trunc) == (not truncate, truncate) and info["success"]


def test_options_vector_env_batches_the_low_level_and_autoresets():
    calls = []

    def policy(obs, goals):
        calls.append(len(goals))
        return np.full(len(goals), 1)

    lengths = [3, 100]
    venv = OptionsVectorEnv([lambda n=n: CountEnv(length=n) for n in lengths], policy, np.eye(2), steps=4)
    venv.reset(seed=0)
    obs, reward, term, trunc, infos = venv.step(np.array([0, 1]))
    assert reward.tolist() == [3.0, 4.0] and term.tolist() == [True, False]
    assert infos["final_info"]["option_steps"][0] == 3 and infos["option_steps"][1] == 4
    assert calls == [2, 2, 2, 1]                               # env 0 left its option after 3 steps
    assert obs["image"][0, 0, 0, 0] == 0 and infos["final_obs"][0]["image"][0, 0, 0] == 3   # reset, final kept


def test_goal_observation_drops_the_mission_and_flags_the_goal():
    env = GoalObservation(CountEnv(), goal_dim=3)
    obs, _ = env.reset(seed=0)
    assert obs["vector"].shape == (4 + 3 + 1,) and env.observation_space["vector"].shape == (8,)
    assert (obs["vector"][4:] == 0).all()                       # unconditioned: zero goal, has_goal 0
    cond = lowlevel_obs({"image": np.zeros((2, 2, 1, 1)), "vector": np.zeros((2, 5))}, np.array([1, 2, 3]), 3)
    assert cond["vector"][:, 4:].tolist() == [[1, 2, 3, 1]] * 2


def test_categorical_kl_direction_and_sign():
    p = torch.tensor([[0.0, 0.0, 0.0]])                        # uniform
    q = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    pu, qu = np.full(3, 1 / 3), np.array([0.7, 0.2, 0.1])
    assert torch.allclose(categorical_kl(p, q), torch.tensor([float((pu * np.log(pu / qu)).sum())]))
    assert torch.allclose(categorical_kl(q, p), torch.tensor([float((qu * np.log(qu / pu)).sum())]))
    assert not torch.allclose(categorical_kl(p, q), categorical_kl(q, p))   # the direction matters
    assert categorical_kl(q, q).item() == pytest.approx(0.0, abs=1e-6)


class _Fixed(torch.nn.Module):
    """A 'policy' / 'prior' with fixed logits (encoder-free): ``action_logits`` and ``forward``."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits, dtype=torch.float32)

    def action_logits(self, obs, state=None, done=None):
        return self.logits.expand(obs["image"].shape[0], -1)

    def forward(self, obs):
        return self.logits.expand(obs["image"].shape[0], -1)


def test_kl_to_prior_module_direction_and_reward_sign():
    pi, prior = [0.0, 0.0, 0.0], np.log([0.7, 0.2, 0.1]).tolist()
    obs = {"image": np.zeros((2, 3, 2, 1, 1), np.float32), "vector": np.zeros((2, 3, 5), np.float32)}
    batch = TransitionBatch(obs=obs, actions=np.zeros((2, 3), int), next_obs=obs, rewards=np.ones((2, 3), np.float32),
                            terminated=np.zeros((2, 3), bool))
    module = KLToPrior(_Fixed(prior), "policy_prior")
    module.policy = _Fixed(pi)
    kl = module.compute(batch)
    expected = float(categorical_kl(torch.tensor([pi]), torch.tensor([prior]))[0])   # KL(π ‖ prior)
    assert kl.shape == (2, 3) and np.allclose(kl, expected) and (kl > 0).all()
    reverse = KLToPrior(_Fixed(prior), "prior_policy")
    reverse.policy = _Fixed(pi)
    assert np.allclose(reverse.compute(batch), float(categorical_kl(torch.tensor([prior]), torch.tensor([pi]))[0]))
    # the recipe weights the module by −coef: the learner's mixed reward is r_env − α·KL
    from llmguide.learners.common import mix_rewards

    alpha = 0.05
    intrinsic, metrics = mix_rewards(batch, [(-alpha, module)], {})
    assert np.allclose(batch.rewards + intrinsic, 1.0 - alpha * expected)
    assert metrics["charts/intrinsic_reward/kl_prior"] == pytest.approx(expected)   # KL logged apart from r_env
    with pytest.raises(ValueError):
        KLToPrior(_Fixed(prior), "sideways")


def test_kl_loss_mode_is_differentiable_in_the_policy_and_pulls_it_to_the_prior():
    class Learnable(_Fixed):
        def __init__(self, logits):
            super().__init__(logits)
            self.param = torch.nn.Parameter(self.logits.clone())

        def action_logits(self, obs, state=None, done=None):
            return self.param.expand(obs["image"].shape[0], -1)

    prior = np.log([0.7, 0.2, 0.1]).tolist()
    module = KLToPrior(_Fixed(prior), "policy_prior")
    module.policy = Learnable([2.0, 0.0, -2.0])
    obs = {"image": torch.zeros(4, 3, 1, 1), "vector": torch.zeros(4, 5)}
    opt = torch.optim.SGD([module.policy.param], lr=0.5)
    first = module.loss(obs).item()
    assert first == pytest.approx(float(categorical_kl(torch.tensor([[2.0, 0.0, -2.0]]), torch.tensor([prior]))[0]))
    for _ in range(200):
        opt.zero_grad()
        module.loss(obs).backward()
        opt.step()
    assert module.loss(obs).item() < 0.01 * first   # the KL term moves π(·|s) itself toward the prior


def test_prior_labels_are_the_nearest_code_of_the_hindsight_goal_and_are_learnable():
    # goals: 2 clusters; the state image tells which cluster the future goal is in
    x, truth, _ = _blobs(k=2, n=60, d=4, seed=3)
    book = fit_codebook(x, 2, seed=0)
    labels = book.assign(x)
    assert all(len(set(labels[truth == j])) == 1 for j in range(2))
    images = np.zeros((len(x), 2, 1, 1), np.float32)
    images[np.arange(len(x)), truth] = 1.0
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (2, 1, 1), np.float32),
                             "vector": gym.spaces.Box(0, 1, (5,), np.float32)})
    prior = GoalPrior(space, 2, hidden=16, image_encoder="flat")
    out = train_prior(prior, images, np.zeros((len(x), 4), np.float32), labels, epochs=30, batch_size=32,
                      lr=1e-2, seed=0, val_fraction=0.0)
    with torch.no_grad():
        pred = prior({"image": torch.as_tensor(images), "vector": torch.zeros(len(x), 5)}).argmax(-1).numpy()
    assert (pred == labels).mean() == 1.0 and out["history"][-1]["loss"] < 0.1


def test_option_ppo_counts_env_steps():
    from omegaconf import OmegaConf

    from llmguide.methods.ptgm.models import OptionPPO

    venv = OptionsVectorEnv([lambda: CountEnv(length=10), lambda: CountEnv(length=10)],
                            lambda obs, goals: np.zeros(len(goals), int), np.eye(3), steps=4)
    agent = OptionPPO(venv, OmegaConf.create({"num_steps": 5, "hidden": 16, "image_encoder": "flat",
                                              "update_epochs": 1, "num_minibatches": 1}), seed=0)
    agent.learn(1, progress=False)
    # one rollout: 5 options per env in episodes of 10 steps = options of 4, 4, 2, 4, 4 -> 18 env steps each
    assert agent.global_step == 2 * 18


@pytest.mark.slow
def test_cli_pipeline_end_to_end(tmp_path):
    """collect → codebook → pretrain → train for every PTGM arm, through the CLI entry point."""
    import json

    from llmguide.cli import main

    base = ["env=babyai", f"run.dir={tmp_path}", "progress=false", "agent.image_encoder=flat", "num_envs=2"]
    small = ["method.codebook.k=8", "method.lowlevel.epochs=1", "method.prior.epochs=1",
             "method.lowlevel.gate.enforce=false"]   # tiny data: the BC gate is recorded, not enforced
    assert main(["collect", *base, "method=ptgm", "method.collect.episodes=24", "run.name=data"]) == 0
    assert main(["codebook", *base, "method=ptgm", *small, f"method.data={tmp_path / 'data'}", "run.name=codes"]) == 0
    assert main(["pretrain", *base, "method=ptgm", *small, f"method.data={tmp_path / 'data'}",
                 f"method.codebook.run={tmp_path / 'codes'}", "run.name=pre"]) == 0
    runs = {m: [m] for m in ("ptgm", "ptgm_no_kl", "ptgm_random_codes", "ptgm_bc_finetune")}
    runs["ptgm_kl_loss"] = ["ptgm", "method.kl.mode=loss"]
    for name, (method, *extra) in runs.items():
        steps = "agent.num_steps=4" if method != "ptgm_bc_finetune" else "agent.num_steps=32"
        assert main(["train", *base, "env.task=BabyAI-UnlockPickup-v0", f"method={method}", *small, steps, *extra,
                     f"method.pretrained={tmp_path / 'pre'}", "total_steps=200", "eval.episodes=1",
                     f"run.name={name}"]) == 0
        result = json.loads((tmp_path / name / "eval.json").read_text())
        assert result["step"] >= 200 and "success_rate" in result
        assert main(["eval", str(tmp_path / name), "eval.episodes=1"]) == 0   # llmguide eval reloads the run
    from llmguide.core.rundir import read_metrics

    for name, in_loss in (("ptgm", False), ("ptgm_kl_loss", True)):   # kl.mode=loss: α·KL is in the PPO loss
        records = read_metrics(tmp_path / name)
        assert any("losses/policy_penalty" in r for r in records) == in_loss
        assert any("charts/intrinsic_reward/kl_prior" in r for r in records)   # the KL is logged in both modes
    codebook = json.loads((tmp_path / "codes" / "ptgm" / "codebook.json").read_text())
    assert codebook["k"] == 8 and codebook["seed"] == 0 and len(codebook["kmeans"]["cluster_sizes"]) == 8
