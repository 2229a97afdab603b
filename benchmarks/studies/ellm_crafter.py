"""ELLM reproduction: ground-truth achievements per episode during intrinsic-only pretraining.

Arms (ELLM paper's controls, every one intrinsic-only, ``extrinsic_coef=0``, same PPO agent, network,
env and budget; ELLM's text action space and rules, ``env.actions=text env.lenient_rules=true``):

* ``ellm-oracle``   — ELLM with ground-truth suggestions through the LM path (``method=ellm llm=oracle``)
* ``ellm-embedded`` — ELLM with the embedded LM scoring the goal vocabulary (``method=ellm llm=embedded``)
* knowledge controls, the same method with the knowledge taken out: ``ellm-random`` (a random 5 of the
  vocabulary per state signature), ``ellm-shuffled`` (the oracle's suggestions for another state),
  ``ellm-all-goals`` (every goal suggested)
* ``-open`` arms: the same over the open vocabulary of all 139 action strings (``method.vocabulary=actions``),
  where a ranking must know which actions are achievements
* ``novelty``       — every executed action string pays once per episode, no success check (``method=ellm_novelty``)
* ``rnd``, ``apt``  — exploration bonuses with the env reward off
* ``no-reward``     — PPO with no reward at all (the control)
* ``ground-truth``  — PPO on the env's achievement reward: a labelled upper reference, never a baseline

The value per seed is the ground-truth achievements unlocked per episode over the training episodes of
the last 10% of the budget. Runs, statistics and files come from ``benchmarks/harness/``: results in
``benchmarks/results/ellm_<env>/<variant>/``. On ``--env-id craftax`` the rules are Craftax-Classic's
(ELLM's rule changes are Crafter-only).

    python benchmarks/studies/ellm_crafter.py --env-id crafter --seeds 3 --steps 200000 --jobs 2
    python benchmarks/studies/ellm_crafter.py --env-id craftax --num-envs 64 --steps 120000 --seeds 3 --jobs 1 \\
        --extra agent.image_encoder=flat agent.num_steps=32
"""

from __future__ import annotations

import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import Study, main
from harness import plot_summary as plot  # noqa: F401  (ellm_finetune.py imports it from here)

COMMON = ["env.actions=text", "agent=ppo", "eval.episodes=0", "num_envs=4", "env.max_steps=400"]
CRAFTER_ONLY = ["env.lenient_rules=true"]  # ELLM's rule changes patch Crafter's game logic
ELLM = ["method=ellm", "method.suggester=score", "method.match=exact", "method.extrinsic_coef=0.0"]
OPEN = ["method.vocabulary=actions"]   # the LM ranks all 139 action strings, not the 22 achievement ones
ARMS = {  # name -> overrides (all intrinsic-only but the labelled upper reference)
    "no-reward": ["method=none", "method.extrinsic_coef=0.0"],
    # closed vocabulary (the 22 achievement actions): every suggestion is an achievement action, and the oracle's
    # top 5 keeps the feasible goals in list order, so "sleep" (last) is cut: the comparison mostly measures wake_up
    "ellm-oracle": [*ELLM, "llm=oracle"],
    "ellm-random": [*ELLM, "llm=random"],          # a random 5 of the 22 per state signature
    "ellm-shuffled": [*ELLM, "llm=shuffled"],      # the oracle's suggestions for another state
    "ellm-embedded": [*ELLM, "llm=embedded"],
    # open vocabulary (all 139 action strings): the knowledge has to pick the achievement actions
    "ellm-oracle-open": [*ELLM, *OPEN, "llm=oracle"],
    "ellm-random-open": [*ELLM, *OPEN, "llm=random"],
    "ellm-embedded-open": [*ELLM, *OPEN, "llm=embedded"],
    "ellm-all-goals": ["method=ellm_all_goals", "method.match=exact", "method.extrinsic_coef=0.0"],
    # the reference conditions on the text of all ~139 open actions joined: one long sentence embedding per
    # env whenever an action is first executed (~5 steps/s with 64 envs here); we condition on one open action
    "novelty": ["method=ellm_novelty", "method.extrinsic_coef=0.0", "method.goal_choice=random"],
    "rnd": ["method=rnd", "method.extrinsic_coef=0.0"],
    "apt": ["method=apt", "method.extrinsic_coef=0.0"],
    "ground-truth": ["method=none", "method.extrinsic_coef=1.0"],
}

STUDY = Study(
    name="ellm_{env}",
    title="ELLM reproduction: achievements during intrinsic-only pretraining",
    about="ELLM's 139 text actions (and, on Crafter, its rule changes); PPO with the same network, env and "
          "budget in every arm; every arm but the labelled upper reference is trained on its intrinsic reward only.",
    arms=ARMS,
    control="no-reward",
    upper_reference=("ground-truth",),
    metric="charts/achievements_per_episode",
    metric_name="ground-truth achievements unlocked per episode (training episodes)",
    common=COMMON,
    per_env={"crafter": CRAFTER_ONLY},
    env="crafter",
    steps=200_000,
    seeds=3,
    jobs=2,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
