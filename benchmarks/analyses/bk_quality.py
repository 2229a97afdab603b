"""Quality of BK labels against ground truth, and paired AUC differences between BK arms (evaluation
only: nothing here feeds training).

For each BK-Pref / BK-Goal label run ``<runs>/prep/labels-<arm>`` of ``benchmarks/studies/bk.py`` (``--runs``: the
study's run folder; the old flat ``<out>/labels-<variant>-<lm>`` layout is read too):

- **BK-Pref**: the LM's answers (usable, strict A/B, ties) and their agreement with the ground-truth
  ranking of the same segment pairs (the oracle's rule: progress = Φ*(last) − Φ*(first) towards the
  task's target, Φ* = :func:`caption_potential`; equal progress = tie).
- **BK-Pref, BK-Goal**: Spearman correlation, over dataset states, between the potential the label run
  produced and Φ* of the same state; for BK-Goal also how often its Φ fires and the fraction of
  fired transitions where the target is in view, against the base rate.

**Paired differences** (from ``<results>/result.json``, the study's, written by ``bk.py``): per seed (same
seed = same env and init seeds), AUC(arm) − AUC(other) over the arm's own budget (an old result's other arm
cut at that step: ``values_first_<N>``), mean and 95% percentile-bootstrap CI over seeds; for every BK arm
against ``ppo``, every embedded or shuffled arm against its oracle arm, and ``bk_random_phi`` and
``bk_code-wrong-target`` against ``bk_code-oracle``.

Writes ``<results>/bk_quality.json`` (``--results``: the study variant's results folder).

    python benchmarks/analyses/bk_quality.py --runs runs/bench/bk/GoToLocal-RedBall-S20-300k \
        --results benchmarks/results/bk/GoToLocal-RedBall-S20-300k --task GoToLocal-RedBall-S20
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman rank correlation (average ranks for ties), 3 decimals; None if either side is constant."""
    from scipy.stats import spearmanr

    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return round(float(spearmanr(x, y).statistic), 3)


def visible_auroc(phi: np.ndarray, star: np.ndarray) -> dict:
    """How well Φ separates states with the target in view (Φ* > −1) from the others: AUROC (ties count
    half; 0.5 = chance) and the Spearman correlation with Φ* among the in-view states."""
    from scipy.stats import mannwhitneyu

    phi, vis = np.asarray(phi, dtype=float), star > -1.0
    if vis.all() or not vis.any():
        return {"auroc_target_in_view": None, "spearman_among_in_view": None, "in_view": int(vis.sum())}
    u = mannwhitneyu(phi[vis], phi[~vis]).statistic
    return {"auroc_target_in_view": round(float(u / (vis.sum() * (~vis).sum())), 3),
            "spearman_among_in_view": spearman(phi[vis], star[vis]), "in_view": int(vis.sum())}


def target_of(task: str) -> tuple[str, str]:
    from llmguide.envs import make_env
    from llmguide.methods.bk.babyai import mission_target

    env = make_env({"name": "babyai", "task": task}, 0)
    try:
        mission = str(env.reset(seed=0)[1]["mission"])
    finally:
        env.close()
    return mission, mission_target(mission)


def pref_quality(label_dir: Path, episodes, target: str, states: list[tuple[int, int]]) -> dict:
    from llmguide.methods.bk.babyai import caption_potential
    from llmguide.methods.bk.pref import PreferencePotential, read_labels

    recs = read_labels(label_dir / "labels.jsonl")

    def truth(seg: list[int]) -> float:
        ep, s, n = seg
        caps = episodes[ep].captions
        return caption_potential(caps[s + n], target) - caption_potential(caps[s], target)

    usable = [r for r in recs if r["choice"] in ("A", "B", "=")]

    def ranks(text: str) -> set[str]:
        """Distinct preferences stated in an answer ("A > B" and "B < A" are the same one)."""
        out = set()
        for x, op, y in re.findall(r"\b([AB])\s*([<>=])\s*([AB])\b", text or ""):
            out.add("=" if op == "=" else (x if op == ">" else y))
        return out
    gt = []
    for r in usable:
        a, b = truth(r["a"]), truth(r["b"])
        gt.append("=" if abs(a - b) < 1e-9 else ("A" if a > b else "B"))
    lm = [r["choice"] for r in usable]
    strict = [(c, g) for c, g in zip(lm, gt, strict=True) if c != "="]
    both = [(c, g) for c, g in strict if g != "="]
    out = {"pairs": len(recs), "usable": len(usable), "strict": len(strict), "ties": lm.count("="),
           "truth_ties_among_usable": gt.count("="),
           "agree_all": round(float(np.mean([c == g for c, g in zip(lm, gt, strict=True)])), 3) if usable else None,
           "agree_strict_where_truth_strict": round(float(np.mean([c == g for c, g in both])), 3) if both else None,
           "n_strict_where_truth_strict": len(both),
           "usable_stating_several_ranks": sum(len(ranks(r["answer"])) > 1 for r in usable),
           "majority_baseline_agree_all": round(max(gt.count(k) for k in "AB=") / len(gt), 3) if gt else None}
    pot = PreferencePotential(label_dir / "pref_model.pt")
    obs = {k: np.stack([episodes[i].obs[k][t] for i, t in states]) for k in episodes[0].obs}
    phi = pot(obs)
    star = np.array([caption_potential(episodes[i].captions[t], target) for i, t in states])
    out["spearman_phi_vs_truth"] = spearman(np.asarray(phi), star)
    out.update(visible_auroc(phi, star))
    return out


def goal_quality(label_dir: Path, episodes, target: str, names, rng: np.random.Generator, n: int) -> dict:
    from llmguide.llm.embeddings import SentenceEmbedder
    from llmguide.methods.bk.babyai import caption_potential
    from llmguide.methods.bk.goal import GoalPotential, dataset_transition_texts

    library = json.loads((label_dir / "library.json").read_text())
    pot = GoalPotential(library, SentenceEmbedder(), names)
    caps, texts = dataset_transition_texts(episodes, names, n, rng)
    sims = pot.similarities(caps, texts)
    phi = np.where(sims >= pot.threshold, sims, 0.0)
    star = np.array([caption_potential(c, target) for c in caps])
    visible = star > -1.0
    fired = phi > 0
    return {"goals": len(library["goals"]), "goal_list": library["goals"],
            "echoed_example": library.get("echoed_example"), "failed_answers": library.get("failed_answers"),
            "iterations": library.get("iterations"), "prompt_version": library.get("prompt_version"),
            "mentions_target": sum(target in g for g in library["goals"]),
            "transitions": len(caps), "fire_rate": round(float(fired.mean()), 3),
            "target_visible_base_rate": round(float(visible.mean()), 3),
            "target_visible_when_fired": round(float(visible[fired].mean()), 3) if fired.any() else None,
            "spearman_phi_vs_truth": spearman(phi, star),
            "spearman_similarity_vs_truth": spearman(sims, star), **visible_auroc(phi, star)}


def window_values(arm: dict, steps: int) -> dict[int, float] | None:
    """Per-seed AUC of ``arm`` over its first ``steps`` steps, from the study's result.json (None if not available)."""
    if arm.get("budget_steps", steps) == steps:
        values = arm["values"]
    elif f"values_first_{steps}" in arm:
        values = arm[f"values_first_{steps}"]
    else:
        return None
    return dict(zip(arm["seeds"], values, strict=True))


def paired_differences(bk: dict, reps: int = 5000) -> dict[str, dict]:
    arms = bk["arms"]
    budget = bk.get("budget_steps")
    arms = {a: {"budget_steps": budget, **v} for a, v in arms.items()}
    pairs = [(a, "ppo") for a in arms if a != "ppo"]
    pairs += [(a, a.rsplit("-", 1)[0] + "-oracle") for a in arms if a.endswith(("-embedded", "-shuffled"))]
    pairs += [(a, "bk_code-oracle") for a in ("bk_random_phi", "bk_code-wrong-target") if a in arms]
    out = {}
    rng = np.random.default_rng(0)
    for arm, other in pairs:
        a, b = arms.get(arm, {}), arms.get(other, {})
        if not a.get("seeds") or not b.get("seeds"):
            continue
        steps = a["budget_steps"] if a["budget_steps"] <= b["budget_steps"] else b["budget_steps"]
        va, vb = window_values(a, steps), window_values(b, steps)
        if va is None or vb is None:
            continue
        seeds = sorted(set(va) & set(vb))
        d = np.array([va[s] - vb[s] for s in seeds])
        means = d[rng.integers(0, len(d), (reps, len(d)))].mean(axis=1)
        out[f"{arm} - {other}"] = {"steps": steps, "seeds": seeds, "per_seed": d.round(4).tolist(),
                                   "mean": round(float(d.mean()), 4),
                                   "ci95": [round(float(np.percentile(means, 2.5)), 4),
                                            round(float(np.percentile(means, 97.5)), 4)],
                                   "seeds_above": int((d > 0).sum())}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", "--out", dest="runs", type=Path, default=Path("runs/bench/bk/GoToLocal-RedBall-S20-300k"),
                   help="the bk.py study's run folder (label runs in its prep/)")
    p.add_argument("--task", default="GoToLocal-RedBall-S20")
    p.add_argument("--samples", type=int, default=5000)
    p.add_argument("--results", type=Path, default=Path("benchmarks/results/bk/GoToLocal-RedBall-S20-300k"),
                   help="the study variant's results folder (result.json; bk_quality.json is written there)")
    p.add_argument("--differences-only", action="store_true",
                   help="keep the label measures of an existing bk_quality.json, recompute the AUC differences")
    args = p.parse_args()
    if args.differences_only:
        result = json.loads((args.results / "bk_quality.json").read_text())
        result["auc_differences"] = paired_differences(json.loads((args.results / "result.json").read_text()))
        (args.results / "bk_quality.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result["auc_differences"], indent=1))
        return
    from llmguide.data import EpisodeDataset

    mission, target = target_of(args.task)
    result = {"task": args.task, "mission": mission, "target": target, "arms": {}}
    prep = args.runs / "prep" if (args.runs / "prep").is_dir() else args.runs
    for folder in [f for f in sorted(prep.glob("labels-bk_pref-*")) + sorted(prep.glob("labels-bk_goal-*")) if f.is_dir()]:
        arm = folder.name.removeprefix("labels-")
        variant, label_dir = arm.split("-", 1)[0], folder / "bk"
        manifest = json.loads((label_dir / "manifest.json").read_text()) if (label_dir / "manifest.json").exists() \
            else None
        if manifest is None or manifest.get("failed"):
            result["arms"][arm] = {"failed": (manifest or {}).get("failed", "no labels")}
            continue
        episodes = EpisodeDataset([Path(d) for d in manifest["data"]]).episodes()
        rng = np.random.default_rng(0)
        pairs = [(i, t) for i, ep in enumerate(episodes) for t in range(len(ep) + 1)]
        states = [pairs[j] for j in rng.choice(len(pairs), min(args.samples, len(pairs)), replace=False)]
        q = (pref_quality(label_dir, episodes, target, states) if variant == "bk_pref" else
             goal_quality(label_dir, episodes, target, manifest.get("action_names"), rng, args.samples))
        result["arms"][arm] = {"prompt_versions": manifest.get("prompt_versions"), "llm": manifest.get("llm"), **q}
    if (args.results / "result.json").exists():
        result["auc_differences"] = paired_differences(json.loads((args.results / "result.json").read_text()))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "bk_quality.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
