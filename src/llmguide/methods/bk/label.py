"""BK ``label``: build the variant's potential from the dataset(s) named by ``method.data``.

Writes ``<run>/bk/`` and ``<run>/bk/manifest.json``.  A step that yields nothing usable — no valid
program (BK-Code), fewer than ``method.pref.min_usable`` usable labels (BK-Pref), an empty goal
library (BK-Goal) — writes its transcript, ``bk/failed.json`` and a manifest with ``failed``, then
raises :class:`llmguide.methods.bk.common.LabelingFailed`; ``train`` refuses such a directory.

With ``llm=oracle`` the same loop runs; the oracle answers from ground truth and is told the
mission of ``env.task``.  The LM arms are not (the paper's BK is task-agnostic), unless
``method.tell_task=true`` (BK-Code): then the write prompt names the same mission, so an LM arm is told
what the oracle is told and the comparison isolates the knowledge.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.errors import ConfigError, LLMGuideError
from llmguide.core.rundir import atomic_write_text
from llmguide.core.seeding import seed_everything
from llmguide.data import EpisodeDataset
from llmguide.methods.bk.inputs import action_names, data_hash, make_sandbox, paths, positive, variant_of
from llmguide.pipelines.runner import open_run


def task_mission(cfg: DictConfig, task: str | None = None) -> str:
    """The mission of ``env.task`` (or of ``task``: ``llm.target``, wrong knowledge) in the first episode,
    told to the oracle LM only."""
    from omegaconf import OmegaConf

    from llmguide.envs import make_env

    env_cfg = cfg.env if task is None else OmegaConf.merge(cfg.env, {"task": task})
    env = make_env(env_cfg, int(cfg.seed))
    try:
        _, info = env.reset(seed=int(cfg.seed))
        return str(info.get("mission", ""))
    finally:
        env.close()


def _label_code(cfg, bk, lm, episodes, out, rng, mission: str | None = None
                ) -> tuple[dict[str, Any], list[str], str | None]:
    k = cfg.method.code
    states = bk.sample_states(episodes, int(positive(cfg, "code.sample_states")), rng)
    notes = bk.env_notes(str(cfg.env.name), str(k.get("example", "env")))
    res = bk.write_potential_code(lm, states, make_sandbox(cfg, out / "scratch"), out, env_notes=notes,
                                  iterations=int(positive(cfg, "code.iterations")),
                                  fix_retries=int(k.fix_retries), max_tokens=int(k.max_tokens),
                                  temperature=float(k.temperature), seed=int(cfg.seed), mission=mission)
    failure = None if res.ok else (f"no valid program in {res.lm_calls} LM calls "
                                   f"({res.summary['iterations']} iterations; see steps.jsonl)")
    return dict(res.summary), list(res.summary["prompt_versions"]), failure


def _label_pref(cfg, bk, lm, episodes, out, names) -> tuple[dict[str, Any], list[str], str | None]:
    k = cfg.method.pref
    summary = bk.label_preferences(lm, episodes, int(positive(cfg, "pref.num_pairs")), out,
                                   segment_length=int(k.segment_length), action_names=names,
                                   batch_size=int(k.batch_size), max_tokens=int(k.max_tokens),
                                   temperature=float(k.temperature), seed=int(cfg.seed))
    strict = summary["A"] + summary["B"]
    minimum = int(k.get("min_usable", 1))
    if summary["usable"] < minimum or strict == 0:
        return summary, [summary["prompt_version"]], (
            f"{summary['usable']} usable labels of {summary['pairs']} ({strict} strict A/B), "
            f"fewer than method.pref.min_usable={minimum} (see labels.jsonl)")
    fit = bk.fit_preference_model(episodes, bk.read_labels(out / "labels.jsonl"), out / "pref_model.pt",
                                  epochs=int(k.epochs), lr=float(k.lr), include_ties=bool(k.include_ties),
                                  seed=int(cfg.seed))
    summary["fit"] = {key: v for key, v in fit.items() if key != "history"}
    return summary, [summary["prompt_version"]], None


def _label_goal(cfg, bk, lm, episodes, out, names, rng) -> tuple[dict[str, Any], list[str], str | None]:
    from llmguide.llm.embeddings import SentenceEmbedder

    k = cfg.method.goal
    library = bk.build_goal_library(lm, episodes, out, iterations=int(positive(cfg, "goal.iterations")),
                                    window=int(k.window), max_goals=int(k.max_goals), action_names=names,
                                    max_tokens=int(k.max_tokens), temperature=float(k.temperature),
                                    seed=int(cfg.seed))
    if not library["goals"]:
        return ({"goals": 0, "failed_answers": library["failed_answers"]}, [library["prompt_version"]],
                f"empty goal library after {library['iterations']} iterations (see answers.jsonl)")
    potential = bk.GoalPotential(library, SentenceEmbedder(), names, top_k=int(k.top_k))
    caps, texts = bk.dataset_transition_texts(episodes, names, int(k.calibration_samples), rng)
    calib = bk.calibrate_threshold(potential, caps, texts, float(k.fire_rate), float(k.min_threshold))
    library.update(calib)
    atomic_write_text(out / "library.json", json.dumps(library, indent=2))
    quality = {k: library[k] for k in ("iterations", "failed_answers", "echoed_example") if k in library}
    quality["malformed_rate"] = library.get("parse/malformed_rate", 0.0)
    return ({"goals": len(library["goals"]), "keys": len(library["keys"]), **quality, **calib},
            [library["prompt_version"]], None)


def label(cfg: DictConfig) -> int:
    """Build the variant's potential; raises ``LabelingFailed`` (after saving everything) on failure."""
    from llmguide.envs import get_oracle
    from llmguide.llm.factory import GROUND_TRUTH_BACKENDS
    from llmguide.methods import bk
    from llmguide.methods.bk.oracle import BKOracleAnswers
    from llmguide.pipelines.services import make_run_lm

    variant = variant_of(cfg)
    if variant == "bk_random_phi":
        raise ConfigError("method", "bk_random_phi needs no label step: train it directly")
    seed_everything(int(cfg.seed))
    dataset = EpisodeDataset(paths(cfg.method.get("data"), "method.data"))
    episodes = dataset.episodes()
    if not episodes:
        raise LLMGuideError(f"no readable episodes in {dataset.roots}")
    names = action_names(cfg)
    rng = np.random.default_rng(int(cfg.seed))
    knows = str(cfg.llm.backend) in GROUND_TRUTH_BACKENDS   # the oracle and its controls
    oracle_mission = task_mission(cfg, cfg.llm.get("target")) if knows else None
    # an LM arm sees the mission only with method.tell_task=true (the paper's BK is task-agnostic)
    told_mission = task_mission(cfg) if not knows and bool(cfg.method.get("tell_task", False)) else None
    answerers = [] if oracle_mission is None else [BKOracleAnswers(get_oracle(str(cfg.env.name)), oracle_mission)]
    lm = make_run_lm(cfg, answerers, online=False)
    with open_run(cfg, outputs=("bk",)) as run:
        out = run.path / "bk"
        out.mkdir(parents=True, exist_ok=True)
        try:
            if variant == "bk_code":
                summary, versions, failure = _label_code(cfg, bk, lm, episodes, out, rng, told_mission)
            elif variant == "bk_pref":
                summary, versions, failure = _label_pref(cfg, bk, lm, episodes, out, names)
            else:
                summary, versions, failure = _label_goal(cfg, bk, lm, episodes, out, names, rng)
        finally:
            lm.close()
        manifest = {"method": variant, "data": [str(r) for r in dataset.roots], "episodes": len(episodes),
                    "data_hash": data_hash(dataset), "llm": {"backend": str(cfg.llm.backend),
                                                              "model": getattr(lm, "model_id", "?")},
                    "oracle_mission": oracle_mission, "told_mission": told_mission,
                    "prompt_versions": versions, "seed": int(cfg.seed), "env": str(cfg.env.name),
                    "action_names": names, "summary": summary, "failed": failure}
        run.write_json("bk/manifest.json", manifest)
        if failure:
            bk.write_failure(out, variant, failure)
            raise bk.LabelingFailed(variant, failure, out)
        print(f"{variant}: labels in {out} — {json.dumps(summary, default=str)[:400]}")
    return 0
