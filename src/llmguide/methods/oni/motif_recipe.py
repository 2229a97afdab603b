"""Motif pipeline (offline), one CLI verb per step, all state in ``<data_dir>`` so any step can be re-run:

- ``llmguide collect method=motif env=minihack ...``: run the collection policy (``method.collect_policy``:
  ``rnd`` = PPO learning from extrinsic + RND reward, a policy that does something as the reference's
  score-maximising agents; ``random``) for ``method.collect_steps`` env steps through the exploring collector
  (:mod:`llmguide.pipelines.collect`; ``<data_dir>`` is its run directory, episodes in ``dataset/``), count its
  messages, sample ``method.num_pairs`` pairs (``method.pair_sampling``: ``observations`` = both sides drawn over
  the collected observations, as the reference; ``unique`` = over unique messages) → ``pairs.sqlite``;
- ``llmguide label method=motif ...``: LM preferences in committed batches (resumable; ``method.max_batches``
  stops early, a rerun continues); with ``method.pairs_from=<data_dir>`` it first copies that dataset's pairs,
  unlabelled, so that a control labeller (``llm=shuffled``) labels exactly the treatment's pairs;
- ``llmguide train method=motif ...``: train the Bradley-Terry reward model (→ ``reward_model.pt``) if
  absent, then PPO with :class:`~llmguide.methods.oni.motif.MotifReward` through the Runner.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.config import register_rule
from llmguide.core.rundir import RunDir, atomic_torch_save, safe_torch_load
from llmguide.methods.oni.motif import MotifReward, PairsDB, annotate_pairs, sample_pairs, train_reward_model
from llmguide.pipelines.collect import Collection, check_intrinsic, explore
from llmguide.pipelines.runner import Parts, Recipe, Step

log = logging.getLogger(__name__)

RECIPE = f"{__name__}:MotifRecipe"   # this recipe as method YAMLs name it (method.recipe): its rules apply there
register_rule("method.collect_policy", lambda value: None if value == "random" else check_intrinsic(value),
              recipe=RECIPE)


def data_dir(cfg: DictConfig) -> Path:
    """``method.data_dir``, else ``<run.dir>/<run.name or motif-<env id>>/motif``."""
    if cfg.method.get("data_dir"):
        return Path(cfg.method.data_dir)
    name = cfg.run.name or f"motif-{str(cfg.env.get('id', cfg.env.name)).replace('/', '_')}"
    return Path(cfg.run.dir) / name / "motif"


def collection(cfg: DictConfig) -> Collection:
    """Motif's ``method.collect_*`` keys as a collection into :func:`data_dir` (the collect step's run directory):
    ``collect_policy`` ``random``, or an exploring PPO agent on ``collect_extrinsic_coef · r_env + RND`` (``rnd``;
    another intrinsic reward by name: ``noveld``, ``icm``, ``apt``, ``package.module:Class``)."""
    policy = str(cfg.method.collect_policy)
    return Collection(steps=int(cfg.method.collect_steps), policy="random" if policy == "random" else "ppo",
                      intrinsic="none" if policy == "random" else policy, intrinsic_coef=1.0,
                      extrinsic_coef=float(cfg.method.collect_extrinsic_coef), run_dir=data_dir(cfg))


def collect(cfg: DictConfig) -> int:
    """The collection policy's episodes (the collect step's run directory is :func:`data_dir`: ``dataset/``,
    ``collect_summary.json``, ``metrics.jsonl``), its message counts and sampled pairs in ``pairs.sqlite``."""
    from llmguide.methods.oni.recipe import message_key, use_reference_policy

    use_reference_policy(cfg)
    spec = collection(cfg)
    counts: Counter[str] = Counter()
    key = message_key(cfg)
    summary = explore(cfg, spec, on_infos=lambda infos: counts.update(str(i.get(key) or "") for i in infos))
    stats: dict[str, Any] = {"policy": str(cfg.method.collect_policy), "steps": spec.steps}
    if spec.policy == "ppo":
        stats.update({"episodes": float(summary["finished_episodes"]),
                      "success_last10pct": summary.get("success_last10pct", 0.0),
                      "return_last10pct": summary.get("return_last10pct", 0.0)})
    db = PairsDB(data_dir(cfg) / "pairs.sqlite")
    db.add_messages(counts)
    added = db.add_pairs(sample_pairs(db.messages(), int(cfg.method.num_pairs), int(cfg.seed),
                                      over=str(cfg.method.get("pair_sampling", "observations"))))
    stats.update({"messages": sum(counts.values()), "unique_messages": len(counts), "pairs": db.count()})
    (data_dir(cfg) / "collect_stats.json").write_text(json.dumps(stats, indent=2))
    print(f"collected {sum(counts.values())} messages ({len(counts)} unique); {added} new pairs, "
          f"{db.count()} in {db.path}; collection policy {stats}")
    db.close()
    return 0


def label(cfg: DictConfig) -> int:
    """Annotate the pairs still to do (resumable)."""
    from llmguide.methods.oni.annotator import PairAnnotator
    from llmguide.methods.oni.recipe import family_templates, method_goal, oracle_answers
    from llmguide.pipelines.services import service_for

    path = data_dir(cfg) / "pairs.sqlite"
    if cfg.method.get("pairs_from") and not path.exists():
        source_path = Path(cfg.method.pairs_from) / "pairs.sqlite"
        if not source_path.is_file():   # opening a PairsDB would create it (and its folders) at a mistyped path
            raise FileNotFoundError(f"method.pairs_from: no pairs in {source_path}")
        source = PairsDB(source_path)
        try:
            if source.count() == 0:
                raise FileNotFoundError(f"method.pairs_from: no pairs in {source.path}")
            source.copy_unlabelled(path).close()
        finally:
            source.close()
    db = PairsDB(path)
    if db.count() == 0:
        raise FileNotFoundError(f"no pairs in {db.path}; run `llmguide collect method=motif ...` first")
    with service_for(cfg, answerers=[oracle_answers(cfg)]) as service:
        template = cfg.method.template or family_templates(str(cfg.env.name))[2] or "motif_pref"
        annot = PairAnnotator(service, template=template, mode=cfg.method.label_mode,
                              max_tokens=int(cfg.method.max_tokens), goal=method_goal(cfg),
                              both_orders=bool(cfg.method.get("both_orders", False)))
        result = annotate_pairs(db, annot, int(cfg.method.label_batch), int(cfg.method.max_batches))
        result.update({"lm_submitted": service.lm_metrics()["lm/requests"], **annot.counts})
    (data_dir(cfg) / "label_stats.json").write_text(json.dumps(result, indent=2))
    print(f"labelled: {result}")
    db.close()
    return 0


def fit_reward_model(cfg: DictConfig) -> Path:
    """Train the Bradley-Terry reward model from the labelled pairs unless ``reward_model.pt`` exists.

    Every run on the same data shares the model: runs started together wait on a file lock so that it is
    fitted once, with ``method.reward_model_seed`` (not the run's seed)."""
    folder = data_dir(cfg)
    model_path = folder / "reward_model.pt"
    with open(folder / "reward_model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not model_path.exists():
            _fit(cfg, folder, model_path)
    return model_path


def _fit(cfg: DictConfig, folder: Path, model_path: Path) -> None:
    """Bradley-Terry fit on ``pairs.sqlite`` → ``reward_model.pt`` and its metrics."""
    db = PairsDB(folder / "pairs.sqlite")
    ckpt, metrics = train_reward_model(db, epochs=int(cfg.method.epochs), lr=float(cfg.method.lr),
                                       batch_size=int(cfg.method.batch_size),
                                       threshold_quantile=float(cfg.method.threshold_quantile),
                                       seed=int(cfg.method.reward_model_seed))
    db.close()
    atomic_torch_save(ckpt, model_path)
    (folder / "reward_model_metrics.json").write_text(json.dumps(metrics, indent=2))
    (folder / "train_norm_quantiles.json").write_text(json.dumps(ckpt["quantiles"], indent=2))
    print(f"reward model: {metrics}")


class MotifRecipe(Recipe):
    """Motif: offline collect → label → reward model, then PPO with the Motif reward."""

    agents = ("ppo",)
    env_families = ("minihack", "nethack", "crafter", "craftax")   # the families with a message line
    steps = {"collect": Step(collect, "Motif: collect an episode dataset with an exploring agent"),
             "label": Step(label, "Motif: label pairs of the dataset's messages with the LM, then fit the reward "
                                  "model", asks_lm=True)}
    lm_mode_key = "label_mode"
    prompt_keys = ("label_mode", "template", "goal", "canonicalize", "max_tokens")   # what shapes its LM requests

    def check(self) -> None:
        from llmguide.methods.oni.recipe import use_reference_policy

        super().check()
        use_reference_policy(self.cfg)

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        from llmguide.methods.oni.recipe import message_key

        cfg = self.cfg
        ckpt = safe_torch_load(fit_reward_model(cfg))
        module = MotifReward(ckpt, envs.num_envs, beta=float(cfg.method.beta), count_scope=str(cfg.method.count_scope),
                             canonicalize=bool(cfg.method.canonicalize), message_key=message_key(cfg))
        return Parts(envs, [(float(cfg.method.intrinsic_coef), module)], float(cfg.method.extrinsic_coef))

    def finish(self, parts: Parts, run: RunDir) -> None:
        """The messages met in training and their rewards → ``motif_reward.json``."""
        module = parts.modules[0][1]
        run.write_json("motif_reward.json", {"threshold": module.threshold, "messages": dict(module.table),
                                             "mean_reward": float(np.mean(list(module.table.values()) or [0]))})
