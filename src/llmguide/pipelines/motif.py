"""Motif pipeline (offline), one CLI verb per step, all state in ``<data_dir>`` so any step can be re-run:

- ``llmguide collect method=motif env=minihack ...``: run a random policy for ``method.collect_steps``
  env steps, count its messages, sample ``method.num_pairs`` pairs → ``pairs.sqlite``;
- ``llmguide label method=motif ...``: LM preferences in committed batches (resumable; ``method.max_batches``
  stops early, a rerun continues);
- ``llmguide train method=motif ...``: train the Bradley-Terry reward model (→ ``reward_model.pt``) if
  absent, then PPO with :class:`~llmguide.rewards.motif.MotifReward`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from llmguide.core.rundir import RunDir, atomic_torch_save
from llmguide.core.seeding import seed_everything
from llmguide.rewards.motif import MotifReward, PairsDB, annotate_pairs, sample_pairs, train_reward_model

log = logging.getLogger(__name__)


def data_dir(cfg: DictConfig) -> Path:
    """``method.data_dir``, else ``<run.dir>/<run.name or motif-<env id>>/motif``."""
    if cfg.method.get("data_dir"):
        return Path(cfg.method.data_dir)
    name = cfg.run.name or f"motif-{str(cfg.env.get('id', cfg.env.name)).replace('/', '_')}"
    return Path(cfg.run.dir) / name / "motif"


def collect(cfg: DictConfig) -> int:
    """Random-policy rollouts → message counts and sampled pairs in ``pairs.sqlite``."""
    from collections import Counter

    from llmguide.envs import make_vector_env, split_infos

    seed_everything(int(cfg.seed))
    envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
    counts: Counter[str] = Counter()
    try:
        envs.reset(seed=int(cfg.seed))
        envs.action_space.seed(int(cfg.seed))
        for _ in range(max(1, int(cfg.method.collect_steps) // envs.num_envs)):
            _, _, _, _, infos = envs.step(envs.action_space.sample())
            counts.update(str(i.get("caption") or "") for i in split_infos(infos, envs.num_envs))
    finally:
        envs.close()
    db = PairsDB(data_dir(cfg) / "pairs.sqlite")
    db.add_messages(counts)
    added = db.add_pairs(sample_pairs(db.messages(), int(cfg.method.num_pairs), int(cfg.seed)))
    print(f"collected {sum(counts.values())} messages ({len(counts)} unique); {added} new pairs, "
          f"{db.count()} in {db.path}")
    db.close()
    return 0


def label(cfg: DictConfig) -> int:
    """Annotate the pairs still to do (resumable)."""
    from llmguide.llm.service import LLMService
    from llmguide.pipelines.oni import make_lm
    from llmguide.rewards.oni_annotator import PairAnnotator

    db = PairsDB(data_dir(cfg) / "pairs.sqlite")
    if db.count() == 0:
        raise FileNotFoundError(f"no pairs in {db.path}; run `llmguide collect method=motif ...` first")
    lm = make_lm(cfg.llm, cfg.env.name)
    with LLMService(lm, max_batch=8) as service:
        annot = PairAnnotator(service, template=cfg.method.template, mode=cfg.method.label_mode,
                              max_tokens=int(cfg.method.max_tokens))
        result = annotate_pairs(db, annot, int(cfg.method.label_batch), int(cfg.method.max_batches))
        result.update({"lm_submitted": service.metrics()["submitted"], **annot.counts})
    lm.close()
    (data_dir(cfg) / "label_stats.json").write_text(json.dumps(result, indent=2))
    print(f"labelled: {result}")
    db.close()
    return 0


def train(cfg: DictConfig) -> int:
    """Reward model (if not trained yet) then PPO with the Motif reward."""
    from llmguide.envs import make_vector_env
    from llmguide.learners.ppo import PPO

    folder = data_dir(cfg)
    model_path = folder / "reward_model.pt"
    if not model_path.exists():
        db = PairsDB(folder / "pairs.sqlite")
        ckpt, metrics = train_reward_model(db, epochs=int(cfg.method.epochs), lr=float(cfg.method.lr),
                                           batch_size=int(cfg.method.batch_size),
                                           threshold_quantile=float(cfg.method.threshold_quantile),
                                           seed=int(cfg.seed))
        db.close()
        atomic_torch_save(ckpt, model_path)
        (folder / "reward_model_metrics.json").write_text(json.dumps(metrics, indent=2))
        (folder / "train_norm_quantiles.json").write_text(json.dumps(ckpt["quantiles"], indent=2))
        print(f"reward model: {metrics}")
    ckpt = torch.load(model_path, map_location="cpu", weights_only=False)
    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        try:
            module = MotifReward(ckpt, int(cfg.num_envs), beta=float(cfg.method.beta),
                                 count_scope=str(cfg.method.count_scope), canonicalize=bool(cfg.method.canonicalize))
            agent = PPO(envs, cfg.agent, reward_modules=[(float(cfg.method.intrinsic_coef), module)],
                        extrinsic_coef=float(cfg.method.extrinsic_coef), run=run, seed=int(cfg.seed),
                        device=str(cfg.device))
            if cfg.run.resume and (state := run.load_checkpoint()) is not None:
                agent.load_state_dict(state["agent"])
                run.truncate_metrics_after(agent.global_step)
            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress),
                        checkpoint_every=int(cfg.checkpoint_every))
            run.save_checkpoint({"agent": agent.state_dict()}, agent.global_step)
            run.write_json("motif_reward.json", {"threshold": module.threshold,
                                                 "messages": {m: r for m, r in module.table.items()},
                                                 "mean_reward": float(np.mean(list(module.table.values()) or [0]))})
            from llmguide.pipelines.oni import _evaluate

            _evaluate(cfg, agent, run)
        finally:
            envs.close()
    return 0
