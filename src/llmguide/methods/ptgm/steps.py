"""PTGM's offline steps, each a CLI verb that reads and writes run directories: ``collect`` (the BabyAI
bot over many missions; on Crafter / Craftax the exploring collector, PPO+RND), ``codebook`` (hindsight
goals + KMeans) and ``pretrain`` (goal-conditioned BC low level + goal priors).  The recipe that
trains over the codebook options is :mod:`llmguide.methods.ptgm.recipe`."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.errors import ConfigError
from llmguide.core.seeding import seed_everything
from llmguide.pipelines.collect import Collection, explore
from llmguide.pipelines.runner import open_run

log = logging.getLogger(__name__)


def run_input(cfg: DictConfig, key: str, sub: str = "") -> Path:
    value = cfg.method
    for part in key.split("."):
        value = value.get(part) if value is not None else None
    if value in (None, ""):
        raise ConfigError(f"method.{key}", f"is required: the run directory of the previous step (method.{key}=runs/NAME)")
    path = Path(str(value)) / sub
    if sub and not path.exists():
        raise ConfigError(f"method.{key}", f"{value} holds no {sub}; run the previous PTGM step first")
    return Path(str(value))


# --- collect --------------------------------------------------------------------------------------
def collect(cfg: DictConfig) -> int:
    """Task-agnostic episodes → ``<run>/dataset/`` (llmguide.data format): on env=babyai the BabyAI bot
    (:func:`~llmguide.envs.babyai.bot.bot_episodes`) round robin over ``method.collect.tasks``; elsewhere the
    exploring collector (:mod:`llmguide.pipelines.collect`): PPO on ``extrinsic_coef · r_env + intrinsic_coef · RND``
    for ``method.collect.agent_steps`` env steps, every finished episode saved, so the data mix early
    (near-random) and later (exploring) play.  The default ``extrinsic_coef: 0`` is task-agnostic (no task
    reward ever reaches the data); ``> 0`` with ``env.task`` null adds the game's own reward (all 22
    achievements), i.e. general play."""
    c = cfg.method.collect
    if str(cfg.env.name) != "babyai":
        policy = str(c.get("policy") or "ppo")   # ppo (the exploring agent) | expert (competent play)
        explore(cfg, Collection.from_block(c, int(c.agent_steps), writer=f"{policy}-", policy=policy,
                                           exclude=tuple(c.get("exclude") or ()),
                                           expert_mode=str(c.get("expert_mode") or "data")))
        return 0
    from llmguide.data import Episode, EpisodeDataset, EpisodeWriter
    from llmguide.envs.babyai.bot import bot_episodes
    from llmguide.envs.babyai.env import BabyAIText

    seed = int(cfg.seed)
    seed_everything(seed)
    tasks = [str(t) for t in c.tasks]
    with open_run(cfg, outputs=("dataset",)) as run:
        writer = EpisodeWriter(run.path / "dataset", writer=f"bot-s{seed}",
                               meta={"env": "babyai", "collector": "BabyAIBot", "seed": seed})
        envs = [BabyAIText(task=t) for t in tasks]
        errors = 0
        seeds = (seed * 1_000_003 + i for i in range(int(c.episodes)))
        for i, ep in enumerate(bot_episodes(envs, seeds, timeout=float(c.replan_timeout))):
            errors += bool(ep.error)
            if not ep.actions:
                continue
            writer.write(Episode(obs={"image": np.stack([o["image"] for o in ep.obs]).astype(np.uint8),
                                      "vector": np.stack([o["vector"] for o in ep.obs])},
                                 actions=np.asarray(ep.actions), rewards=np.asarray(ep.rewards, np.float32),
                                 captions=[info["caption"] for info in ep.infos],
                                 events=[info["events"] for info in ep.infos[1:]],
                                 meta={"mission": ep.mission, "task": tasks[i % len(tasks)], "success": ep.success,
                                       "terminated": bool(ep.terminated), "truncated": bool(ep.truncated),
                                       "return": float(sum(ep.rewards)), "length": len(ep.actions)}))
        stats = EpisodeDataset(run.path / "dataset").stats()
        run.write_json("collect_summary.json", {**stats, "tasks": tasks, "bot_errors": errors})
        print(f"collected {stats['episodes']} bot episodes ({stats['transitions']} transitions, "
              f"success {stats['success_rate']:.2f}) into {run.path / 'dataset'}")
    return 0


# --- hindsight goals (shared by codebook and pretrain: same seed, same goals) ----------------------
def goal_data(cfg: DictConfig) -> dict[str, np.ndarray]:
    """Per step of every episode: image (uint8: BabyAI's codes, Craftax's one-hot), the task-agnostic state
    vector (:func:`~llmguide.methods.ptgm.goals.state_dim`), action and the hindsight goal's features
    (:func:`~llmguide.methods.ptgm.goals.env_goal_features`)."""
    from llmguide.data import EpisodeDataset
    from llmguide.methods.ptgm.goals import (
        delta_goal_features,
        env_goal_features,
        hindsight_indices,
        state_dim,
    )

    g, family = cfg.method.goals, str(cfg.env.name)
    space = goal_space(cfg)
    episodes = EpisodeDataset(run_input(cfg, "data")).episodes()
    if not episodes:
        raise ConfigError("method.data", "no readable episodes; run `llmguide collect method=ptgm` first")
    rng = np.random.default_rng(_codebook_seed(cfg))
    weight = float(g.get("vector_weight", 9.0))
    parts: dict[str, list[np.ndarray]] = {"image": [], "state": [], "action": [], "goal": []}
    for ep in episodes:
        image = np.asarray(ep.obs["image"], np.uint8)
        vector = np.asarray(ep.obs["vector"], np.float32)
        sdim = state_dim(family, vector.shape[1])
        idx = hindsight_indices(len(ep), rng, int(g.horizon_min), int(g.horizon_max))
        parts["image"].append(image[:-1])
        parts["state"].append(vector[:-1, :sdim])
        parts["action"].append(np.asarray(ep.actions, np.int64))
        if space == "view_inventory":
            parts["goal"].append(env_goal_features(image[idx], vector[idx], family, weight))
        else:
            parts["goal"].append(delta_goal_features(image, vector, ep.events, idx, space,
                                                     float(g.get("view_weight", 1.0))))
    return {k: np.concatenate(v) for k, v in parts.items()}


def goal_space(cfg: DictConfig) -> str:
    """``method.goals.space`` on Crafter / Craftax (default ``view_inventory``); BabyAI: its future view."""
    from llmguide.methods.ptgm.goals import GOAL_SPACES

    if str(cfg.env.name) == "babyai":
        return "view_inventory"
    space = str(cfg.method.goals.get("space", "view_inventory") or "view_inventory")
    if space not in GOAL_SPACES:
        raise ConfigError("method.goals.space", f"must be one of {GOAL_SPACES}, got {space!r}")
    return space


def cluster_summary(goals: np.ndarray, labels: np.ndarray, names: list[str], k: int, top: int = 4) -> list[dict]:
    """What each code means: per cluster, its size and the ``top`` named goal features with the largest mean
    magnitude (the last ``len(names)`` columns of ``goals``; e.g. inventory changes and events)."""
    tail = np.asarray(goals, np.float32)[:, -len(names):] if names else np.zeros((len(goals), 0), np.float32)
    out = []
    for j in range(k):
        m = labels == j
        mean = tail[m].mean(axis=0) if m.any() else np.zeros(len(names), np.float32)
        order = np.argsort(-np.abs(mean))[:top]
        out.append({"code": j, "size": int(m.sum()),
                    "top": [[names[i], round(float(mean[i]), 3)] for i in order if abs(mean[i]) >= 0.005]})
    return out


def _codebook_seed(cfg: DictConfig) -> int:
    seed = cfg.method.codebook.seed
    return int(cfg.seed if seed is None else seed)


def _embed(book, goals: np.ndarray, chunk: int = 20_000) -> np.ndarray:
    return np.concatenate([book.embed(goals[i:i + chunk].astype(np.float32)) for i in range(0, len(goals), chunk)])


def codebook(cfg: DictConfig) -> int:
    """KMeans codebook (and the random-goals ablation's, in the same PCA space) of the hindsight goals."""
    from llmguide.methods.ptgm.goals import fit_codebook

    c, seed = cfg.method.codebook, _codebook_seed(cfg)
    seed_everything(seed)
    data = goal_data(cfg)
    with open_run(cfg, outputs=("ptgm",)) as run:
        out = run.path / "ptgm"
        out.mkdir(parents=True, exist_ok=True)
        book = fit_codebook(data["goal"], int(c.k), seed, pca=int(c.pca), n_init=int(c.n_init),
                            max_fit=int(c.max_fit))
        rand = fit_codebook(data["goal"], int(c.k), seed, kind="random", max_fit=int(c.max_fit), embedding=book)
        book.save(out / "codebook.npz")
        rand.save(out / "codebook_random.npz")
        summary = {"goals": int(len(data["goal"])), "seed": seed, "k": book.k, "dim": book.dim,
                   "kmeans": book.meta, "random": rand.meta}
        if str(cfg.env.name) != "babyai":   # what the codes mean (mean inventory change / events per cluster)
            from llmguide.methods.ptgm.goals import goal_feature_names, unsquash

            space = goal_space(cfg)
            names = goal_feature_names(space)
            summary["goal_space"] = space
            feats = data["goal"]
            if space != "view_inventory":   # mean raw changes / event counts (the features are squashed)
                n = sum(not name.startswith("view:") for name in names)   # changes and event counts
                feats = np.concatenate([unsquash(feats[:, :n]), feats[:, n:]], axis=1)
            for kind, b in (("kmeans", book), ("random", rand)):
                labels = b.assign(_embed(b, data["goal"]))
                summary[f"clusters_{kind}"] = cluster_summary(feats, labels, names, b.k)
        run.write_json("ptgm/codebook.json", summary)
        print(f"codebook: k={book.k} in {book.dim}-d goal space from {summary['goals']} hindsight goals -> {out}")
    return 0


# --- pretrain --------------------------------------------------------------------------------------
def pretrain(cfg: DictConfig) -> int:
    """Goal-conditioned BC low level (on the KMeans book's goal embedding) and one prior per codebook, then
    the BC quality gate (:mod:`llmguide.methods.ptgm.gate`, ``method.lowlevel.gate``) into the manifest's
    ``bc_gate``.  A failed gate, when enforced, still leaves every file (``train`` refuses the run unless
    told ``method.lowlevel.gate.enforce=false``), sets the manifest's ``failed`` and ends in a one-line
    ConfigError (exit 2), as BK's failed labelling does."""
    import torch

    from llmguide.core.rundir import atomic_torch_save
    from llmguide.envs import make_env
    from llmguide.methods.ptgm.gate import bc_gate, better_data, enforced, gate_line
    from llmguide.methods.ptgm.goals import GoalCodebook
    from llmguide.methods.ptgm.models import GoalPrior, make_lowlevel, train_lowlevel, train_prior, val_split
    from llmguide.methods.ptgm.options import lowlevel_space

    m, seed = cfg.method, int(cfg.seed)
    seed_everything(seed)
    torch.set_num_threads(max(1, int(cfg.agent.get("torch_threads", 1) or 1)))
    src = run_input(cfg, "codebook.run", "ptgm/codebook.npz") / "ptgm"
    books = {"kmeans": GoalCodebook.load(src / "codebook.npz"), "random": GoalCodebook.load(src / "codebook_random.npz")}
    data = goal_data(cfg)
    emb = _embed(books["kmeans"], data["goal"])
    probe = make_env(cfg.env, seed)
    env_space, n_actions = probe.observation_space, int(probe.action_space.n)
    probe.close()
    sdim = int(data["state"].shape[1])
    with open_run(cfg, outputs=("ptgm",)) as run:
        out = run.path / "ptgm"
        out.mkdir(parents=True, exist_ok=True)
        for name in ("codebook.npz", "codebook_random.npz", "codebook.json"):
            shutil.copy(src / name, out / name)
        ll = m.lowlevel
        enc = str(cfg.agent.get("image_encoder", "cnn") or "cnn")
        net = make_lowlevel(lowlevel_space(env_space, emb.shape[1], sdim), n_actions, int(ll.hidden), enc)
        bc = train_lowlevel(net, data["image"], data["state"], emb, data["action"], p_uncond=float(ll.p_uncond),
                            epochs=int(ll.epochs), batch_size=int(ll.batch_size), lr=float(ll.lr), seed=seed)
        atomic_torch_save({"net": net.state_dict(), "goal_dim": int(emb.shape[1]), "hidden": int(ll.hidden),
                           "n_actions": n_actions, "image_encoder": enc, "state_dim": sdim}, out / "lowlevel.pt")
        gate = bc_gate(net, data["image"], data["state"], emb, data["action"], books["kmeans"].assign(emb),
                       books["kmeans"].codes(str(m.goal_source)), val_split(len(emb), seed), ll.get("gate"), seed)
        print(gate_line(gate), flush=True)
        summary: dict[str, Any] = {"samples": int(len(emb)), "goal_dim": int(emb.shape[1]), "lowlevel": bc,
                                   "bc_gate": gate}
        p = m.prior
        for kind, book in books.items():
            e = emb if kind == "kmeans" else _embed(book, data["goal"])
            targets = book.assign(e) if p.soft_temperature is None else book.soft_assign(e, float(p.soft_temperature))
            prior = GoalPrior(env_space, book.k, int(p.hidden), enc, sdim)
            summary[f"prior_{kind}"] = train_prior(prior, data["image"], data["state"], targets,
                                                   epochs=int(p.epochs), batch_size=int(p.batch_size),
                                                   lr=float(p.lr), seed=seed)
            atomic_torch_save({"net": prior.state_dict(), "k": book.k, "hidden": int(p.hidden), "image_encoder": enc,
                               "state_dim": sdim}, out / f"prior_{kind}.pt")
        failed = f"BC gate: {gate['failed']}" if gate["failed"] and enforced(ll.get("gate")) else None
        run.write_json("ptgm/manifest.json", {**summary, "data": str(run_input(cfg, "data")), "codebook": str(src.parent),
                                              "seed": seed, "lowlevel_hidden": int(ll.hidden), "image_encoder": enc,
                                              "env": str(cfg.env.name), "state_dim": sdim, "n_actions": n_actions,
                                              "failed": failed})
        last = bc["history"][-1] if bc["history"] else {}
        print(f"pretrain: low level {json.dumps(last)}; priors "
              f"{ {k: summary[f'prior_{k}']['history'][-1] for k in books} } -> {out}")
        if failed:
            raise ConfigError("method.lowlevel.gate", f"{run.path}: the low level fails PTGM's BC gate ({gate['failed']}); "
                              f"its data barely tie actions to goals: collect better data ({better_data(str(cfg.env.name))}), "
                              "train it longer, or keep it with method.lowlevel.gate.enforce=false")
    return 0
