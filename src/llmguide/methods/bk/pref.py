"""BK-Pref: the LM ranks pairs of segments (``A > B | B > A | A = B``, :func:`label_preferences`);
a Bradley-Terry model ``score(segment) = sum_t phi(s_t)`` is fitted (:func:`fit_preference_model`)
and ``Φ(s) = phi(s)`` standardised on the data (:class:`PreferencePotential`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from llmguide.core.rundir import atomic_torch_save, atomic_write_text, safe_torch_load
from llmguide.data import Episode
from llmguide.llm.base import LanguageModel
from llmguide.llm.parsing import ParseStats, parse_preference
from llmguide.methods.bk.common import flat_features, window_text
from llmguide.methods.bk.prompts import template as bk_template
from llmguide.rewards.preference import decided_accuracy, fit_bradley_terry

log = logging.getLogger(__name__)

PREF_LABEL = {"B": 1.0, "A": 0.0, "=": 0.5}          # P(B preferred); unparseable -> -1 (dropped)

@dataclass
class Segment:
    """``length`` transitions of episode ``episode`` starting at state ``start``."""

    episode: int
    start: int
    length: int

    def as_list(self) -> list[int]:
        return [self.episode, self.start, self.length]


def sample_segment(episodes: Sequence[Episode], length: int, rng: np.random.Generator) -> Segment:
    i = int(rng.integers(len(episodes)))
    n = len(episodes[i])
    h = min(length, n)
    return Segment(i, int(rng.integers(n - h + 1)), h)


def segment_text(ep: Episode, seg: Segment, action_names: Sequence[str] | None) -> str:
    s, e = seg.start, seg.start + seg.length
    return window_text(ep.captions[s:e + 1], [int(a) for a in ep.actions[s:e]], action_names)


def label_preferences(lm: LanguageModel, episodes: Sequence[Episode], num_pairs: int, out_dir: str | Path,
                      segment_length: int = 5, action_names: Sequence[str] | None = None, batch_size: int = 8,
                      max_tokens: int = 96, temperature: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Ask the LM to rank ``num_pairs`` random segment pairs; labels and raw answers → ``labels.jsonl``.

    Label = P(B preferred): ``B > A`` → 1, ``A > B`` → 0, ``A = B`` → 0.5; an LM failure or an
    unparseable answer → -1 (kept in the file, dropped when fitting) and counted.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = bk_template("bk_pref")
    rng = np.random.default_rng(seed)
    stats = ParseStats()
    counts = {"A": 0, "B": 0, "=": 0, "unparsed": 0, "lm_error": 0}
    with open(out / "labels.jsonl", "w", encoding="utf-8") as f:
        for start in range(0, num_pairs, batch_size):
            pairs = [(sample_segment(episodes, segment_length, rng), sample_segment(episodes, segment_length, rng))
                     for _ in range(min(batch_size, num_pairs - start))]
            prompts = [template.render(a=segment_text(episodes[a.episode], a, action_names),
                                       b=segment_text(episodes[b.episode], b, action_names)) for a, b in pairs]
            completions = lm.generate(prompts, max_tokens=max_tokens, temperature=temperature, seed=seed + start)
            for k, ((a, b), comp) in enumerate(zip(pairs, completions, strict=True)):
                choice = None if comp.error else parse_preference(comp.text, stats)
                if comp.error:
                    counts["lm_error"] += 1
                elif choice is None:
                    counts["unparsed"] += 1
                else:
                    counts[choice] += 1
                record = {"pair": start + k, "a": a.as_list(), "b": b.as_list(), "answer": comp.text,
                          "choice": choice, "label": PREF_LABEL.get(choice or "", -1.0), "error": comp.error,
                          "prompt_version": template.version}
                f.write(json.dumps(record) + "\n")
            f.flush()
    summary = {"pairs": num_pairs, **counts, "usable": num_pairs - counts["unparsed"] - counts["lm_error"],
               "prompt_version": template.version, **stats.as_dict()}
    atomic_write_text(out / "label_summary.json", json.dumps(summary, indent=2))
    if summary["usable"] == 0:
        log.warning("BK-Pref: none of %d LM answers gave a usable label (see %s)", num_pairs, out / "labels.jsonl")
    return summary


def read_labels(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


class PreferenceNet(nn.Module):
    """``phi(s)``: an MLP on the flattened observation; segment score = sum of phi over its states."""

    def __init__(self, in_dim: int, hidden: int = 128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).squeeze(-1)


def _segment_states(ep: Episode, seg: Segment) -> np.ndarray:
    """Features of the states a segment reaches, s_{start+1} .. s_{start+length}."""
    obs = {k: v[seg.start + 1: seg.start + seg.length + 1] for k, v in ep.obs.items()}
    return flat_features(obs)


def fit_preference_model(episodes: Sequence[Episode], labels: Sequence[dict[str, Any]], out_path: str | Path,
                         epochs: int = 20, lr: float = 3e-4, batch_size: int = 32, hidden: int = 128,
                         holdout: float = 0.1, include_ties: bool = True, seed: int = 0) -> dict[str, Any]:
    """Bradley-Terry fit (:func:`~llmguide.rewards.preference.fit_bradley_terry`):
    ``P(B > A) = sigmoid(score_B − score_A)``; keeps the best held-out epoch.

    Ties are soft targets 0.5 (``include_ties``) or dropped; label -1 is always dropped.  The saved
    model standardises phi with its mean/std over every dataset state.  With no usable label the
    model file says so and :class:`PreferencePotential` gives Φ = 0.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    usable = [r for r in labels if r["label"] >= 0 and (include_ties or r["label"] != 0.5)]
    in_dim = flat_features({k: v[:1] for k, v in episodes[0].obs.items()}).shape[-1]
    net = PreferenceNet(in_dim, hidden)
    sample_ndims = {k: int(v.ndim - 1) for k, v in episodes[0].obs.items()}
    info: dict[str, Any] = {"labels": len(labels), "usable": len(usable), "in_dim": in_dim, "hidden": hidden,
                            "sample_ndims": sample_ndims}
    if not usable:
        log.warning("BK-Pref: no usable preference labels; the potential is Φ = 0")
        atomic_torch_save({"usable": 0, "in_dim": in_dim, "hidden": hidden, "state": net.state_dict(),
                           "mean": 0.0, "std": 1.0, "info": info}, out_path)
        return info
    H = max(max(r["a"][2], r["b"][2]) for r in usable)

    def padded(key: str) -> tuple[torch.Tensor, torch.Tensor]:
        feats = torch.zeros(len(usable), H, in_dim)
        mask = torch.zeros(len(usable), H)
        for j, r in enumerate(usable):
            x = _segment_states(episodes[r[key][0]], Segment(*r[key]))
            feats[j, : len(x)] = torch.from_numpy(x)
            mask[j, : len(x)] = 1.0
        return feats, mask

    (xa, ma), (xb, mb) = padded("a"), padded("b")
    target = torch.tensor([r["label"] for r in usable], dtype=torch.float32)
    order = rng.permutation(len(usable))
    n_hold = int(round(holdout * len(usable))) if len(usable) >= 10 else 0
    hold, train = order[:n_hold], order[n_hold:]

    def scores(idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(score_B, score_A), segment scores sum_t phi(s_t) (padding masked), for the pairs ``idx``:
        B is the kernel's "first" side, as the label is P(B preferred)."""
        return (net(xb[idx]) * mb[idx]).sum(-1), (net(xa[idx]) * ma[idx]).sum(-1)

    epochs_run = fit_bradley_terry(net, scores, target, train, hold if len(hold) else train,
                                   optimizer=torch.optim.AdamW(net.parameters(), lr=lr), epochs=epochs,
                                   batch_size=batch_size, shuffle=rng.shuffle, clip_norm=1.0, form="sigmoid",
                                   holdout_loss=False, keep_best=True)
    history = [{"epoch": e["epoch"], "loss": e["loss"], "accuracy": e["holdout_accuracy"]} for e in epochs_run]
    with torch.no_grad():
        all_phi = torch.cat([net(torch.from_numpy(flat_features(ep.obs))) for ep in episodes])
    mean, std = float(all_phi.mean()), float(all_phi.std()) if len(all_phi) > 1 else 1.0
    info.update({"train_accuracy": decided_accuracy(scores, target, train),
                 "holdout_accuracy": decided_accuracy(scores, target, hold) if len(hold) else None,
                 "holdout": int(len(hold)), "phi_mean": mean, "phi_std": std, "history": history})
    atomic_torch_save({"usable": len(usable), "in_dim": in_dim, "hidden": hidden, "state": net.state_dict(),
                       "mean": mean, "std": max(std, 1e-6), "info": info}, out_path)
    return info


class PreferencePotential:
    """``Φ(obs) = (phi(obs) − mean) / std`` over ``(..., obs)`` batches; Φ = 0 if no label was usable."""

    def __init__(self, path: str | Path):
        data = safe_torch_load(path)
        self.usable = int(data["usable"])
        self.net = PreferenceNet(int(data["in_dim"]), int(data["hidden"]))
        self.net.load_state_dict(data["state"])
        self.net.eval()
        self.mean, self.std = float(data["mean"]), float(data["std"])
        self.in_dim = int(data["in_dim"])
        self.sample_ndims: dict[str, int] = dict(data["info"]["sample_ndims"])

    @torch.no_grad()
    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        key = next(iter(self.sample_ndims))
        lead = np.asarray(obs[key]).ndim - self.sample_ndims[key]
        feats = flat_features(obs, batch_dims=lead)
        if self.usable == 0:
            return np.zeros(feats.shape[:-1])
        if feats.shape[-1] != self.in_dim:
            raise ValueError(f"preference model expects {self.in_dim} observation features, got {feats.shape[-1]} "
                             "(was it fitted on another env?)")
        phi = self.net(torch.from_numpy(feats.reshape(-1, self.in_dim))).numpy().reshape(feats.shape[:-1])
        return (phi - self.mean) / self.std


