"""ELLM downstream: fine-tune intrinsically pretrained agents on one task (the paper's finetuning study).

Starts from the pretraining runs of ``benchmarks/studies/ellm_crafter.py`` (``--pretrained``: its ``--runs`` folder,
``<arm>/seed-<s>/``; the old flat ``<arm>-s<seed>/`` layout is read too) and trains each on the task reward of
``env.task`` only (``method.mode=finetune``: weights loaded, optimiser fresh, the goal input fixed to the
task's text, ELLM reward off). Arms:

* ``<arm>-pretrained`` for every ELLM-recipe arm of ``ellm_crafter.py`` (``--arms ellm-oracle,novelty`` names
  them without the suffix, as before): fine-tuned from that arm's seed-s checkpoint (the preparation links it
  as ``<prep>/pretrained/<arm>/seed-<s>``; an arm with a missing checkpoint is listed as failed);
* ``scratch`` — the same PPO agent, env, action space and task reward from random weights (the control).

Same budget, env, network and rollout for every arm. Value per seed: success AUC (the mean training success
rate over ``--bins`` equal env-step bins). Results in ``benchmarks/results/ellm_finetune_<env>/<task>-<budget>/``.

    python benchmarks/studies/ellm_finetune.py --env-id craftax --task place_table --steps 60000 --seeds 3 \\
        --pretrained runs/bench/ellm_craftax/120k --extra agent.image_encoder=flat agent.num_steps=32
"""

from __future__ import annotations

import sys
from pathlib import Path

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)
from ellm_crafter import ARMS as PRETRAINING
from ellm_crafter import COMMON, CRAFTER_ONLY

from harness import Study, main

FINETUNABLE = [a for a, o in PRETRAINING.items()
               if any(x in ("method=ellm", "method=ellm_all_goals", "method=ellm_novelty") for x in o)]
ARMS = {
    "scratch": ["method=none", "method.extrinsic_coef=1.0"],
    **{f"{a}-pretrained": [*PRETRAINING[a], "method.mode=finetune", f"method.pretrained={{prep}}/pretrained/{a}/seed-${{seed}}"]
       for a in FINETUNABLE},
}


def flags(p) -> None:
    p.add_argument("--pretrained", default=None, help="the --runs folder of benchmarks/studies/ellm_crafter.py (default: "
                   "runs/bench/ellm_<env>/<120k on craftax, 200k on crafter>)")
    p.add_argument("--max-steps", type=int, default=400, help="episode cap")


def configure(args) -> None:
    args.arms = ",".join(a if a in ARMS else f"{a}-pretrained" for a in args.arms.split(",") if a)
    args.pretrained = args.pretrained or f"runs/bench/ellm_{args.env}/{'120k' if args.env == 'craftax' else '200k'}"


def prepare(plan) -> None:
    """Link each arm's pretrained seed-s run as <prep>/pretrained/<arm>/seed-<s>; a missing one fails the arm."""
    root = Path(plan.args.pretrained).resolve()
    for arm in plan.arms:
        if arm == "scratch":
            continue
        source, missing = arm.removesuffix("-pretrained"), []
        for s in plan.seeds:
            found = next((r for r in (root / source / f"seed-{s}", root / f"{source}-s{s}")
                          if (r / "checkpoints" / "latest.pt").exists()), None)
            if found is None:
                missing.append(s)
                continue
            link = plan.prep / "pretrained" / source / f"seed-{s}"
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(found, target_is_directory=True)
        if missing:
            plan.fail(arm, f"no pretrained checkpoint of {source} for seeds {missing} in {root} "
                           "(run benchmarks/studies/ellm_crafter.py first)")


STUDY = Study(
    name="ellm_finetune_{env}",
    title="ELLM downstream: fine-tuning intrinsically pretrained agents on one task",
    about="Each pretrained arm starts from its intrinsic-only pretraining checkpoint (benchmarks/studies/ellm_crafter.py) and "
          "is trained on the task reward only; `scratch` is the same agent from random weights.",
    arms=ARMS,
    control="scratch",
    default_arms=("ellm-oracle-pretrained", "novelty-pretrained", "scratch"),
    metric="charts/success",
    metric_name="success AUC (mean training success rate over equal env-step bins)",
    value="auc",
    bins=20,
    common=[*COMMON, "env.max_steps={max_steps}", "num_envs=64"],
    per_env={"crafter": CRAFTER_ONLY},
    env="craftax",
    task="place_table",
    steps=60_000,
    seeds=3,
    flags=flags,
    configure=configure,
    prepare=prepare,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
