"""BK-Goal: the LM grows a goal list from captioned windows (:func:`build_goal_library`);
``Φ(s') = max cos(e(transition text), e(goal))`` over the goals retrieved for the caption of ``s'``,
when above a threshold calibrated on the dataset (:func:`calibrate_threshold`), else 0.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.rundir import atomic_write_text
from llmguide.data import Episode
from llmguide.llm.base import LanguageModel
from llmguide.llm.parsing import ParseStats, parse_bullets
from llmguide.methods.bk.common import action_name, transition_text
from llmguide.methods.bk.pref import sample_segment, segment_text
from llmguide.methods.bk.prompts import template as bk_template

log = logging.getLogger(__name__)

def _normalize_goal(goal: str) -> str:
    return re.sub(r"\s+", " ", goal.strip().strip(".").lower())


def example_goals(body: str) -> set[str]:
    """The goals of the template's own worked example (its literal ``- goal`` lines): an answer that
    repeats them copies the prompt, not knowledge about the window, so they are dropped."""
    return {_normalize_goal(m.group(1)) for m in re.finditer(r"^- ([^$\n]+)$", body, re.MULTILINE)}


def build_goal_library(lm: LanguageModel, episodes: Sequence[Episode], out_dir: str | Path, iterations: int = 20,
                       window: int = 3, max_goals: int = 30, action_names: Sequence[str] | None = None,
                       max_tokens: int = 128, temperature: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Grow a goal list: each iteration shows one captioned window and the current list and asks for
    an improved markdown list.  Each window caption (a retrieval key) maps to the goals answered for it.

    Goals that only repeat the template's worked example (:func:`example_goals`) are dropped and
    counted (``echoed_example``).  Saves ``answers.jsonl`` (raw answers) and ``library.json`` (goals,
    keys, key → goal ids).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = bk_template("bk_goal")
    rng = np.random.default_rng(seed)
    stats = ParseStats()
    goals: list[str] = []
    keys: list[str] = []
    key_goals: list[list[int]] = []
    failures = echoed = 0
    copied = example_goals(template.body)
    with open(out / "answers.jsonl", "w", encoding="utf-8") as f:
        for it in range(iterations):
            seg = sample_segment(episodes, window, rng)
            ep = episodes[seg.episode]
            text = segment_text(ep, seg, action_names)
            current = "\n".join(f"- {g}" for g in goals) or "(empty)"
            comp = lm.generate([template.render(window=text, goals=current)], max_tokens=max_tokens,
                               temperature=temperature, seed=seed + it)[0]
            parsed = [] if comp.error else [_normalize_goal(g) for g in parse_bullets(comp.text, stats)]
            parsed = [g for g in dict.fromkeys(parsed) if 2 <= len(g) <= 120]
            echoed += sum(g in copied for g in parsed)
            parsed = [g for g in parsed if g not in copied]
            if not parsed:
                failures += 1
            ids = []
            for g in parsed:
                if g not in goals and len(goals) < max_goals:
                    goals.append(g)
                if g in goals:
                    ids.append(goals.index(g))
            if ids:
                keys.append(ep.captions[seg.start + seg.length])
                key_goals.append(ids)
            f.write(json.dumps({"iteration": it, "window": text, "answer": comp.text, "error": comp.error,
                                "goals": parsed, "prompt_version": template.version}) + "\n")
    library = {"goals": goals, "keys": keys, "key_goals": key_goals, "iterations": iterations,
               "failed_answers": failures, "echoed_example": echoed, "prompt_version": template.version,
               **stats.as_dict()}
    atomic_write_text(out / "library.json", json.dumps(library, indent=2))
    if not goals:
        log.warning("BK-Goal: the LM produced no goal in %d iterations; Φ = 0 (see %s)", iterations,
                    out / "answers.jsonl")
    return library


class GoalPotential:
    """``Φ(s') = max cos(e(transition text), e(g))`` over goals retrieved for caption(s'), if ≥ threshold."""

    def __init__(self, library: dict[str, Any], embedder: Any, action_names: Sequence[str] | None = None,
                 top_k: int = 3, threshold: float | None = None):
        self.goals = list(library.get("goals", []))
        self.keys = list(library.get("keys", []))
        self.key_goals = [list(ids) for ids in library.get("key_goals", [])]
        self.embedder = embedder
        self.action_names = action_names
        self.top_k = int(top_k)
        self.threshold = float(threshold if threshold is not None else library.get("threshold", 0.5))
        self.goal_emb = embedder.embed(self.goals) if self.goals else np.zeros((0, 1), np.float32)
        self.key_emb = embedder.embed(self.keys) if self.keys else np.zeros((0, 1), np.float32)

    def similarities(self, captions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Max cosine of each text to the goals retrieved for its caption (all goals without keys)."""
        if not self.goals:
            return np.zeros(len(texts))
        sims = np.asarray(self.embedder.embed(list(texts))) @ self.goal_emb.T        # (B, G)
        if self.keys:
            near = np.argsort(-(np.asarray(self.embedder.embed(list(captions))) @ self.key_emb.T), axis=1)
            mask = np.zeros_like(sims, dtype=bool)
            for b, row in enumerate(near[:, : self.top_k]):
                for k in row:
                    mask[b, self.key_goals[k]] = True
            sims = np.where(mask, sims, -1.0)
        return sims.max(axis=1)

    def metrics(self) -> dict[str, float]:
        """Embedding cache of the potential (each distinct caption / transition text is encoded once;
        the misses are what makes BK-Goal slower than the other variants)."""
        stats = getattr(self.embedder, "cache_stats", None)
        if not isinstance(stats, dict):
            return {}
        return {"embed_hit_rate": float(stats["hit_rate"]), "embed_misses": float(stats["misses"])}

    def __call__(self, obs: dict[str, np.ndarray], infos: list[dict], actions: np.ndarray) -> np.ndarray:
        captions = [str(i.get("caption", "")) for i in infos]
        texts = [transition_text(c, i.get("events") or [], action_name(a, self.action_names))
                 for c, i, a in zip(captions, infos, actions, strict=True)]
        sims = self.similarities(captions, texts)
        return np.where(sims >= self.threshold, sims, 0.0)


def dataset_transition_texts(episodes: Sequence[Episode], action_names: Sequence[str] | None,
                             limit: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(captions of reached states, transition texts) for up to ``limit`` random dataset transitions."""
    pairs = [(i, t) for i, ep in enumerate(episodes) for t in range(len(ep))]
    if len(pairs) > limit:
        pairs = [pairs[j] for j in rng.choice(len(pairs), limit, replace=False)]
    captions = [episodes[i].captions[t + 1] for i, t in pairs]
    texts = [transition_text(episodes[i].captions[t + 1], episodes[i].events[t],
                             action_name(int(episodes[i].actions[t]), action_names)) for i, t in pairs]
    return captions, texts


def calibrate_threshold(potential: GoalPotential, captions: Sequence[str], texts: Sequence[str],
                        fire_rate: float = 0.1, floor: float = 0.3) -> dict[str, float]:
    """Threshold = the (1 − fire_rate) quantile of dataset similarities (at least ``floor``)."""
    sims = potential.similarities(captions, texts) if texts else np.zeros(0)
    if len(sims) == 0 or not potential.goals:
        return {"threshold": 1.01, "fire_rate": 0.0, "samples": int(len(sims))}
    threshold = max(float(np.quantile(sims, 1.0 - fire_rate)), floor)
    return {"threshold": threshold, "fire_rate": float((sims >= threshold).mean()), "samples": int(len(sims)),
            "sim_mean": float(sims.mean()), "sim_max": float(sims.max())}
