"""BK pipeline: ``collect`` (RND-driven PPO saves episodes) → ``label`` (LM → potential) → ``train``.

Each step reads and writes run directories, so any step can be re-run::

    llmguide collect env=babyai env.task=Pretraining-S20 method=bk_code total_steps=65536 run.name=bk-data
    llmguide label   env=babyai env.task=GoToLocal-RedBall-S20 method=bk_code method.data=runs/bk-data run.name=bk-code-labels
    llmguide train   env=babyai env.task=GoToLocal-RedBall-S20 method=bk_code method.labels=runs/bk-code-labels

``label`` (:mod:`llmguide.methods.bk.label`) writes ``<run>/bk/`` and ``<run>/bk/manifest.json``; a failed
labelling step raises and leaves ``bk/failed.json``; :func:`check_labels` makes ``train`` refuse it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import one_of, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.methods.bk.inputs import make_sandbox, paths, variant_of
from llmguide.methods.bk.label import label
from llmguide.pipelines.collect import Collection, explore
from llmguide.pipelines.runner import Parts, Recipe, Step

log = logging.getLogger(__name__)

register_rule("method.code.isolation", one_of("os", "python"))
register_rule("method.code.example", one_of("env", "offdomain", "none"))


# --- collect -----------------------------------------------------------------------------------
def collect(cfg: DictConfig) -> int:
    """The exploring collector (:mod:`llmguide.pipelines.collect`) for ``total_steps`` with ``method.collect``
    (PPO on ``extrinsic_coef · r_env + intrinsic_coef · RND``); episodes → ``<run>/dataset/``."""
    variant_of(cfg)
    explore(cfg, Collection.from_block(cfg.method.collect, int(cfg.total_steps)))
    return 0


# --- train -------------------------------------------------------------------------------------
def build_module(cfg: DictConfig, labels_dir: str | Path, gamma: float, run_path: Path | None = None):
    """The shaping reward module of ``method.name`` from a label run directory."""
    from llmguide.methods import bk

    variant = variant_of(cfg)
    k = cfg.method

    def shaping(potential, name: str):
        return bk.TransitionPotentialShaping(potential, gamma, name=name, scale=float(k.get("potential_scale", 1.0)),
                                             normalize=bool(k.get("normalize_potential", True)))

    if variant == "bk_random_phi":   # the knowledge control: same shaping, a random network as Φ
        from llmguide.methods.bk.random_phi import RandomPotential

        r = k.random_phi
        return shaping(RandomPotential(int(r.seed), int(r.hidden), float(r.clip)), "bk_random_phi")
    out = Path(labels_dir) / "bk"
    manifest = check_labels(out, variant)
    names = manifest.get("action_names")

    if variant == "bk_code":
        potential = bk.CodePotential((out / "final.py").read_text(), make_sandbox(cfg, (run_path or out) / "scratch"),
                                     clip=float(k.code.clip),
                                     error_log=(run_path / "bk_code_errors.jsonl") if run_path else None)
        return shaping(potential, "bk_code")
    if variant == "bk_pref":
        pref = bk.PreferencePotential(out / "pref_model.pt")
        return shaping(lambda obs, infos, actions: pref(obs), "bk_pref")
    from llmguide.llm.embeddings import SentenceEmbedder

    library = json.loads((out / "library.json").read_text())
    return shaping(bk.GoalPotential(library, SentenceEmbedder(), names, top_k=int(k.goal.top_k)), "bk_goal")


def check_labels(out: Path, variant: str) -> dict[str, Any]:
    """The manifest of a finished, successful ``variant`` label directory; ConfigError otherwise."""
    manifest_file = out / "manifest.json"
    if not manifest_file.exists():
        raise ConfigError("method.labels", f"{out.parent} holds no BK labels (no {manifest_file}); "
                          f"run `llmguide label method={variant}` first")
    manifest = json.loads(manifest_file.read_text())
    if manifest["method"] != variant:
        raise ConfigError("method.labels", f"{out.parent} holds {manifest['method']} labels, not {variant}")
    failed = manifest.get("failed") or ((out / "failed.json").exists() and
                                        json.loads((out / "failed.json").read_text()).get("reason"))
    if failed:
        raise ConfigError("method.labels", f"{out.parent}: its {variant} labelling failed ({failed}); "
                          "a failed label run is never trained on")
    needed = {"bk_code": "final.py", "bk_pref": "pref_model.pt", "bk_goal": "library.json"}[variant]
    if not (out / needed).exists():
        raise ConfigError("method.labels", f"{out.parent} has no {needed}")
    return manifest


class BKRecipe(Recipe):
    """BK-Code / BK-Pref / BK-Goal: PPO on ``extrinsic_coef · r_env + intrinsic_coef · F`` with the
    potential from the label run ``method.labels``."""

    agents = ("ppo",)
    env_families = ("babyai", "crafter", "craftax")

    @property
    def labels_dir(self) -> Path:
        """The label run this training reads (``method.labels``)."""
        return paths(self.cfg.method.get("labels"), "method.labels")[0]

    def check(self) -> None:
        super().check()
        if variant_of(self.cfg) != "bk_random_phi":   # the random-Φ control needs no labels
            check_labels(self.labels_dir / "bk", variant_of(self.cfg))

    steps = {"collect": Step(collect, "BK-Code/Pref/Goal: collect an episode dataset with an exploration agent"),
             "label": Step(label, "BK-Code/Pref/Goal: label a collected dataset with the LM (program, preferences, "
                                  "goals)", asks_lm=True)}
    prompt_keys = ("max_tokens", "temperature", "top_k", "goal")   # the keys that shape its LM requests

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        cfg = self.cfg
        labels = self.labels_dir if variant_of(cfg) != "bk_random_phi" else Path(".")
        module = build_module(cfg, labels, float(cfg.agent.gamma), run.path if run else None)
        return Parts(envs, [(float(cfg.method.intrinsic_coef), module)], float(cfg.method.extrinsic_coef),
                     metrics=lambda: {f"reward/{module.name}/{k}": v for k, v in module.metrics().items()})
