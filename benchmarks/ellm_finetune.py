"""ELLM downstream: fine-tune intrinsically pretrained agents on one task (the paper's finetuning study).

Starts from the pretraining runs of ``benchmarks/ellm_crafter.py`` (``--pretrained``, runs named
``<arm>-s<seed>``) and trains each on the task reward of ``env.task`` only (``method.mode=finetune``:
weights loaded, optimiser fresh, the goal input fixed to the task's text, ELLM reward off). Arms:

* ``<arm>-pretrained`` for every pretrained ELLM-recipe arm given in ``--arms`` (e.g. ``ellm-oracle``,
  ``novelty``, ``ellm-embedded``): fine-tuned from that arm's seed-s checkpoint;
* ``scratch`` — the same PPO agent, env, action space and task reward from random weights.

Same budget, env, network and rollout for every arm. Value per seed: success AUC (mean success of the
training episodes over ``--bins`` equal step bins), 95% bootstrap CIs over seeds. Writes
``benchmarks/results/ellm_finetune_<env-id>.{md,json,png}`` in the format of DESIGN.md.

    python benchmarks/ellm_finetune.py --env-id craftax --task place_table --steps 60000 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bk import bootstrap_ci, success_curve  # the shared reproduction helpers (benchmarks/bk.py)
from ellm_crafter import ARMS, COMMON, CRAFTER_ONLY, plot

SCRATCH = ["method=none", "method.extrinsic_coef=1.0"]


def overrides_for(arm: str, seed: int, args: argparse.Namespace) -> list[str]:
    base = [*COMMON, *(CRAFTER_ONLY if args.env_id == "crafter" else []), f"env={args.env_id}",
            f"env.task={args.task}", f"seed={seed}", f"total_steps={args.steps}", f"num_envs={args.num_envs}",
            f"env.max_steps={args.max_steps}", f"run.dir={args.out}", f"run.name={arm}-s{seed}",
            "run.overwrite=true", *args.extra]
    if arm == "scratch":
        return [*SCRATCH, *base]
    source = arm.removesuffix("-pretrained")
    pretrained = Path(args.pretrained) / f"{source}-s{seed}"
    if not (pretrained / "checkpoints" / "latest.pt").exists():
        raise SystemExit(f"no pretrained checkpoint for {arm} seed {seed}: {pretrained} (run ellm_crafter.py first)")
    return [*ARMS[source], *base, "method.mode=finetune", f"method.pretrained={pretrained}"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", default="craftax", help="env group the pretraining ran on: crafter or craftax")
    p.add_argument("--task", default="place_table", help="the downstream task (env.task)")
    p.add_argument("--steps", type=int, default=60_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--arms", default="ellm-oracle,novelty", help="pretrained arms (ellm_crafter.py labels)")
    p.add_argument("--pretrained", default="runs/bench_ellm_craftax", help="ellm_crafter.py --out folder")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--out", default="runs/bench_ellm_finetune")
    p.add_argument("--results", default="benchmarks/results")
    p.add_argument("--extra", nargs="*", default=[], help="overrides for every run (match the pretraining's)")
    args = p.parse_args()

    out, res = Path(args.out), Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    res.mkdir(parents=True, exist_ok=True)
    arms = [f"{a}-pretrained" for a in args.arms.split(",") if a] + ["scratch"]
    jobs = [(arm, s) for s in range(args.seeds) for arm in arms]
    plans = {job: overrides_for(*job, args) for job in jobs}   # every checkpoint exists before any compute
    started, failed = time.time(), []
    for (arm, seed), overrides in plans.items():
        with open(out / f"{arm}-s{seed}.log", "w") as log:
            code = subprocess.call([sys.executable, "-m", "llmguide.cli", "train", *overrides, "eval.episodes=0",
                                    "progress=false"], stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
        print(f"[{time.time() - started:6.0f}s] {arm}-s{seed}: exit {code}", flush=True)
        if code != 0:
            failed.append(f"{arm}-s{seed}")

    steps_axis = ((np.arange(args.bins) + 0.5) * args.steps / args.bins).tolist()
    summary = {"task": f"{args.env_id} {args.task}, fine-tuning on the task reward only", "budget_steps": args.steps,
               "metric": f"success AUC (mean training success over {args.bins} step bins)",
               "higher_is_better": True, "pretrained": args.pretrained, "arms": {}}
    rows = ["| arm | success AUC, mean [95% CI] | seeds | per seed |", "|---|---|---|---|"]
    for arm in arms:
        done = [s for s in range(args.seeds) if f"{arm}-s{s}" not in failed]
        if not done:
            continue
        curves = np.array([success_curve(out / f"{arm}-s{s}", args.steps, args.bins) for s in done])
        values = curves.mean(axis=1)
        lo, hi = bootstrap_ci(curves)
        vlo, vhi = bootstrap_ci(values[:, None])
        summary["arms"][arm] = {"seeds": done, "values": values.tolist(),
                                "curve": {"steps": steps_axis, "mean": curves.mean(0).tolist(),
                                          "ci95_low": lo.tolist(), "ci95_high": hi.tolist()}}
        rows.append(f"| {arm} | {values.mean():.3f} [{vlo[0]:.3f}, {vhi[0]:.3f}] | {len(done)} | "
                    f"{', '.join(f'{v:.3f}' for v in values)} |")
    stem = f"ellm_finetune_{args.env_id}"
    (res / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    plot(summary, res / f"{stem}.png", ylabel="training success rate")
    text = "\n".join([
        f"# ELLM downstream: fine-tuning on {args.task} ({args.env_id})", "",
        f"Each pretrained arm starts from its `{args.pretrained}/<arm>-s<seed>` checkpoint (intrinsic-only "
        "pretraining, benchmarks/ellm_crafter.py) and is trained on the task reward only; `scratch` is the "
        f"same agent from random weights. {args.steps:,} env steps per run, {args.num_envs} envs, episodes "
        f"capped at {args.max_steps} steps, seeds 0..{args.seeds - 1}.", "",
        *rows, "", f"Failed runs: {', '.join(failed) or 'none'}.", "", f"![success]({stem}.png)", ""])
    (res / f"{stem}.md").write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
