"""A PPO row comparable with the Crafter scoreboard (issue 47): Craftax-Classic on its achievement reward.

Crafter's benchmark protocol: the game's own reward (+1 per achievement unlocked for the first time in an episode,
and the health reward), the default 10,000-step episodes, 1M env steps, and the **Crafter score**: the geometric
mean of the 22 achievements' success rates (%) over every training episode, ``exp(mean ln(1 + s_i)) - 1``. The
scoreboard (Hafner 2022): random 1.6 %, PPO 4.6 %, DreamerV3 14.5 % (on Crafter itself; Craftax-Classic is its
JAX reimplementation, with a few different costs).

Arms: ``ppo`` (the network and PPO of every Craftax study here: flat encoder over the symbolic view, 64 envs)
and ``ppo-rnd`` (RND on top, extrinsic and intrinsic value heads). Value per seed: achievements per episode over
the last 10 % of training; the report's details add each run's Crafter score over all its training episodes and
over the last 10 %, beside the scoreboard.

    python benchmarks/studies/craftax_score.py --seeds 5 --steps 1000000
"""

from __future__ import annotations

import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import Study, main

SCOREBOARD = {"Random": 1.6, "PPO (Hafner 2022)": 4.6, "DreamerV3": 14.5}
ARMS = {
    "ppo": ["method=none", "method.extrinsic_coef=1.0"],
    "ppo-rnd": ["method=rnd", "method.extrinsic_coef=1.0", "agent.two_value_heads=true"],
}


def crafter_scores(plan) -> dict[str, dict[int, dict[str, float]]]:
    """``{arm: {seed: {"all": score %, "last10": score %}}}`` from each finished run's training episodes."""
    import numpy as np

    from harness import finished_runs
    from llmguide.envs.crafter.rules import ACHIEVEMENTS, crafter_score
    from llmguide.report.runs import FINAL_FRACTION, load_run

    out: dict[str, dict[int, dict[str, float]]] = {}
    for arm in plan.arms:
        for seed, path in finished_runs(plan, arm).items():
            episodes = [r for r in load_run(path).records if "charts/achievements_per_episode" in r]
            if not episodes:
                continue
            last = max(r["step"] for r in episodes) * (1 - FINAL_FRACTION)
            scores = {}
            for name, subset in (("all", episodes), ("last10", [r for r in episodes if r["step"] >= last])):
                rates = [100 * float(np.mean([r.get(f"achievements/{a}", 0.0) for r in subset])) for a in ACHIEVEMENTS]
                scores[name] = crafter_score(rates)
            out.setdefault(arm, {})[seed] = scores
    return out


def details(plan):
    """The Crafter score of each arm (mean over seeds, per seed) beside the scoreboard."""
    scores = crafter_scores(plan)
    lines = ["## Crafter score", "", "Geometric mean of the 22 achievements' success rates (%) over a run's training "
             "episodes (Crafter's protocol: all of them) and over its last 10 %; mean over seeds, then each seed. "
             "Scoreboard (Crafter, 1M steps): " + ", ".join(f"{k} {v} %" for k, v in SCOREBOARD.items()) + ".", "",
             "| arm | score, all episodes (%) | score, last 10 % (%) | per seed (all) |", "|---|---|---|---|"]
    summary = {}
    for arm, by_seed in scores.items():
        every = [s["all"] for s in by_seed.values()]
        last = [s["last10"] for s in by_seed.values()]
        summary[arm] = {"crafter_score_all": sum(every) / len(every), "crafter_score_last10": sum(last) / len(last),
                        "per_seed": by_seed}
        lines.append(f"| {arm} | {summary[arm]['crafter_score_all']:.2f} | {summary[arm]['crafter_score_last10']:.2f} "
                     "| " + ", ".join(f"{s}: {v['all']:.2f}" for s, v in sorted(by_seed.items())) + " |")
    return [*lines, ""], {"crafter_score": summary, "scoreboard": SCOREBOARD}


STUDY = Study(
    name="craftax_score",
    title="PPO on Craftax-Classic's achievement reward, beside the Crafter scoreboard",
    about="Craftax-Classic with its own reward and the default 10,000-step episodes; the same PPO as every Craftax "
          "study here (flat encoder, 64 envs). Compare the Crafter score with the scoreboard, not the raw return.",
    arms=ARMS,
    control="ppo",
    metric="charts/achievements_per_episode",
    metric_name="achievements unlocked per episode (training episodes)",
    common=["agent=ppo", "agent.image_encoder=flat", "num_envs=64", "eval.episodes=0", "env.task=null",
            "env.max_steps=null"],
    env="craftax",
    steps=1_000_000,
    seeds=5,
    jobs=1,
    order="seed",
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
