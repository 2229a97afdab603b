"""BK pipeline: ``collect`` (RND-driven PPO saves episodes) → ``label`` (LM → potential) → ``train``.

Each step reads and writes run directories, so any step can be re-run::

    llmguide collect env=babyai env.task=GoToRedBall method=bk_code total_steps=50000 run.name=bk-data
    llmguide label   env=babyai method=bk_code method.data=runs/bk-data run.name=bk-code-labels
    llmguide train   env=babyai method=bk_code method.labels=runs/bk-code-labels run.name=bk-code-s0

``label`` writes ``<run>/bk/`` (BK-Code: ``final.py``, ``steps.jsonl``, ``code-*.py``; BK-Pref:
``labels.jsonl`` with raw answers, ``pref_model.pt``; BK-Goal: ``answers.jsonl``, ``library.json``)
and ``<run>/bk/manifest.json`` (method, data folders and their file hash, LM, prompt versions, seed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from llmguide.core.config import one_of, register_rule
from llmguide.core.errors import ConfigError, LLMGuideError
from llmguide.core.rundir import RunDir, atomic_write_text
from llmguide.core.seeding import seed_everything
from llmguide.data import EpisodeDataset, EpisodeRecorder, EpisodeWriter
from llmguide.pipelines.runner import Parts, Recipe, open_run

log = logging.getLogger(__name__)

register_rule("method.code.isolation", one_of("os", "python"))

VARIANTS = ("bk_code", "bk_pref", "bk_goal")

BABYAI_NOTES = """Notes on obs for this game (BabyAI): obs['image'][c, row, col] is one-hot over channels:
0-10 object type (0 unseen, 1 empty, 2 wall, 3 floor, 4 door, 5 key, 6 ball, 7 box, 8 goal, 9 lava, 10 agent),
11-16 colour (red, green, blue, purple, yellow, grey), 17-19 door state (open, closed, locked).
The agent is at row 6, column 3, facing up: the cell in front is row 5, column 3.
obs['vector'][:4] is the facing direction (one-hot)."""


# --- helpers ----------------------------------------------------------------------------------
def _variant(cfg: DictConfig) -> str:
    name = str(cfg.method.name)
    if name not in VARIANTS:
        raise ConfigError("method.name", f"the BK pipeline handles {list(VARIANTS)}, got {name!r}")
    return name


def _positive(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, f"method.{key}", default=None)
    if value is None or value <= 0:
        raise ConfigError(f"method.{key}", f"must be > 0, got {value!r}")
    return value


def _paths(value: Any, key: str) -> list[Path]:
    if value in (None, ""):
        raise ConfigError(key, "is required: the run directory written by the previous step "
                               f"(e.g. {key}=runs/NAME)")
    items = list(value) if isinstance(value, list | ListConfig) else str(value).split(",")
    return [Path(str(p).strip()) for p in items if str(p).strip()]


def _make_envs(cfg: DictConfig):
    from llmguide.envs import make_vector_env

    return make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.get("vector", "sync")))


def action_names(cfg: DictConfig) -> list[str] | None:
    """The env's action strings (e.g. BabyAI "turn left", ...), or None if it has none."""
    from llmguide.envs import make_env

    env = make_env(cfg.env, int(cfg.seed))
    try:
        names = getattr(env.unwrapped, "action_strings", None) or getattr(env.unwrapped, "action_names", None)
        return [str(n) for n in names] if names else None
    finally:
        env.close()


def _data_hash(dataset: EpisodeDataset) -> str:
    digest = hashlib.sha256()
    for f in dataset.files:
        digest.update(f.name.encode())
        digest.update(str(f.stat().st_size).encode())
    return digest.hexdigest()[:16]


# --- collect -----------------------------------------------------------------------------------
def collect(cfg: DictConfig) -> int:
    """RND-driven PPO for ``total_steps``; every finished episode is saved to ``<run>/dataset/``."""
    from llmguide.learners.ppo import PPO
    from llmguide.rewards.rnd import RND

    _variant(cfg)
    seed_everything(int(cfg.seed))
    c = cfg.method.collect
    with open_run(cfg) as run:
        writer = EpisodeWriter(run.path / "dataset", writer=f"s{int(cfg.seed)}-{uuid.uuid4().hex[:6]}",
                               meta={"env": str(cfg.env.name), "task": cfg.env.get("task"), "seed": int(cfg.seed)})
        max_eps = int(c.get("max_episodes", 0) or 0)
        envs = EpisodeRecorder(_make_envs(cfg), writer, keep_every=int(c.get("keep_every", 1)),
                               max_episodes=max_eps or None)
        try:
            rnd = RND(envs.single_observation_space, envs.num_envs, gamma=float(cfg.agent.gamma), seed=int(cfg.seed),
                      device=str(cfg.device))
            agent = PPO(envs, cfg.agent, reward_modules=[(float(c.intrinsic_coef), rnd)],
                        extrinsic_coef=float(c.extrinsic_coef), run=run, seed=int(cfg.seed), device=str(cfg.device))
            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress))
        finally:
            envs.close()
        stats = EpisodeDataset(run.path / "dataset").stats()
        run.write_json("collect_summary.json", {**stats, "saved_by_this_run": envs.saved,
                                                "finished_episodes": envs.finished})
        print(f"collected {envs.saved} episodes into {run.path / 'dataset'} "
              f"(dataset now {stats['episodes']} episodes, {stats['transitions']} transitions)")
    return 0


# --- label -------------------------------------------------------------------------------------
def label(cfg: DictConfig) -> int:
    """Build the variant's potential from the dataset(s) named by ``method.data``."""
    from llmguide.rewards import bk

    variant = _variant(cfg)
    seed_everything(int(cfg.seed))
    dataset = EpisodeDataset(_paths(cfg.method.get("data"), "method.data"))
    episodes = dataset.episodes()
    if not episodes:
        raise LLMGuideError(f"no readable episodes in {dataset.roots}")
    names = action_names(cfg)
    rng = np.random.default_rng(int(cfg.seed))
    from llmguide.llm.factory import make_llm

    lm = make_llm(cfg.llm, str(cfg.env.name))
    with open_run(cfg) as run:
        out = run.path / "bk"
        out.mkdir(parents=True, exist_ok=True)
        try:
            if variant == "bk_code":
                from llmguide.sandbox import Sandbox, SandboxLimits

                k = cfg.method.code
                sandbox = Sandbox(SandboxLimits(timeout=float(k.timeout), memory_mb=int(k.memory_mb), isolation=str(k.isolation)),
                                  scratch_root=out / "scratch")
                states = bk.sample_states(episodes, int(_positive(cfg, "code.sample_states")), rng)
                notes = BABYAI_NOTES if str(cfg.env.name) == "babyai" else ""
                res = bk.write_potential_code(lm, states, sandbox, out, env_notes=notes,
                                              iterations=int(_positive(cfg, "code.iterations")),
                                              fix_retries=int(k.fix_retries), max_tokens=int(k.max_tokens),
                                              temperature=float(k.temperature), seed=int(cfg.seed))
                summary: dict[str, Any] = {"ok": res.ok, "lm_calls": res.lm_calls, "steps": len(res.steps)}
                versions = sorted({s["prompt_version"] for s in res.steps})
            elif variant == "bk_pref":
                k = cfg.method.pref
                summary = bk.label_preferences(lm, episodes, int(_positive(cfg, "pref.num_pairs")), out,
                                               segment_length=int(k.segment_length), action_names=names,
                                               batch_size=int(k.batch_size), max_tokens=int(k.max_tokens),
                                               temperature=float(k.temperature), seed=int(cfg.seed))
                fit = bk.fit_preference_model(episodes, bk.read_labels(out / "labels.jsonl"), out / "pref_model.pt",
                                              epochs=int(k.epochs), lr=float(k.lr), include_ties=bool(k.include_ties),
                                              seed=int(cfg.seed))
                summary["fit"] = {key: v for key, v in fit.items() if key != "history"}
                versions = [summary["prompt_version"]]
            else:
                from llmguide.llm.embeddings import SentenceEmbedder

                k = cfg.method.goal
                library = bk.build_goal_library(lm, episodes, out, iterations=int(_positive(cfg, "goal.iterations")),
                                                window=int(k.window), max_goals=int(k.max_goals), action_names=names,
                                                max_tokens=int(k.max_tokens), temperature=float(k.temperature),
                                                seed=int(cfg.seed))
                potential = bk.GoalPotential(library, SentenceEmbedder(), names, top_k=int(k.top_k))
                caps, texts = bk.dataset_transition_texts(episodes, names, int(k.calibration_samples), rng)
                calib = bk.calibrate_threshold(potential, caps, texts, float(k.fire_rate), float(k.min_threshold))
                library.update(calib)
                atomic_write_text(out / "library.json", json.dumps(library, indent=2))
                summary = {"goals": len(library["goals"]), "keys": len(library["keys"]), **calib}
                versions = [library["prompt_version"]]
        finally:
            lm.close()
        manifest = {"method": variant, "data": [str(r) for r in dataset.roots], "episodes": len(episodes),
                    "data_hash": _data_hash(dataset), "llm": {"backend": str(cfg.llm.backend),
                                                              "model": getattr(lm, "model_id", "?")},
                    "prompt_versions": versions, "seed": int(cfg.seed), "env": str(cfg.env.name),
                    "action_names": names, "summary": summary}
        run.write_json("bk/manifest.json", manifest)
        print(f"{variant}: labels in {out} — {json.dumps(summary, default=str)[:400]}")
    return 0


# --- train -------------------------------------------------------------------------------------
def build_module(cfg: DictConfig, labels_dir: str | Path, gamma: float, run_path: Path | None = None):
    """The shaping reward module of ``method.name`` from a label run directory."""
    from llmguide.rewards import bk
    from llmguide.rewards.shaping import PotentialShaping

    variant = _variant(cfg)
    out = Path(labels_dir) / "bk"
    manifest_file = out / "manifest.json"
    if not manifest_file.exists():
        raise ConfigError("method.labels", f"{labels_dir} holds no BK labels (no {manifest_file}); "
                          f"run `llmguide label method={variant}` first")
    manifest = json.loads(manifest_file.read_text())
    if manifest["method"] != variant:
        raise ConfigError("method.labels", f"{labels_dir} holds {manifest['method']} labels, not {variant}")
    names = manifest.get("action_names")
    scale = float(cfg.method.get("potential_scale", 1.0))
    if variant == "bk_code":
        from llmguide.sandbox import Sandbox, SandboxLimits

        k = cfg.method.code
        sandbox = Sandbox(SandboxLimits(timeout=float(k.timeout), memory_mb=int(k.memory_mb), isolation=str(k.isolation)),
                          scratch_root=(run_path or out) / "scratch")
        code = (out / "final.py").read_text()
        potential = bk.CodePotential(code, sandbox, clip=float(k.clip),
                                     error_log=(run_path / "bk_code_errors.jsonl") if run_path else None)
        return bk.TransitionPotentialShaping(potential, gamma, name="bk_code", scale=scale)
    if variant == "bk_pref":
        pref = bk.PreferencePotential(out / "pref_model.pt")
        module = PotentialShaping(lambda obs: scale * pref(obs), gamma)
        module.name = "bk_pref"
        return module
    from llmguide.llm.embeddings import SentenceEmbedder

    library = json.loads((out / "library.json").read_text())
    potential = bk.GoalPotential(library, SentenceEmbedder(), names, top_k=int(cfg.method.goal.top_k))
    return bk.TransitionPotentialShaping(potential, gamma, name="bk_goal", scale=scale)


class BKRecipe(Recipe):
    """BK-Code / BK-Pref / BK-Goal: PPO on ``extrinsic_coef · r_env + intrinsic_coef · F`` with the
    potential from the label run ``method.labels``."""

    agents = ("ppo",)

    def check(self) -> None:
        super().check()
        _variant(self.cfg)
        self.labels_dir = _paths(self.cfg.method.get("labels"), "method.labels")[0]

    def collect(self) -> int:
        return collect(self.cfg)

    def label(self) -> int:
        return label(self.cfg)

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        cfg = self.cfg
        module = build_module(cfg, self.labels_dir, float(cfg.agent.gamma), run.path if run else None)
        return Parts(envs, [(float(cfg.method.intrinsic_coef), module)], float(cfg.method.extrinsic_coef),
                     metrics=lambda: {f"reward/{module.name}/{k}": v for k, v in module.metrics().items()})
