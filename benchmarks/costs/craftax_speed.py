"""env=craftax vs env=crafter end to end: PPO steps/s, ELLM-oracle for 1M steps, peak memory.

One invocation, one network, one rollout length per env for both envs (``--encoder``, ``--num-steps``):

* PPO (``method=none``) through the CLI on ``env=crafter`` (``--crafter-envs`` envs) and ``env=craftax``
  (``--craftax-envs`` envs), ``--rounds`` interleaved rounds; steady steps/s = between the first and
  the last update record (start-up and JAX compilation excluded; the wall time includes them);
* ELLM with the ground-truth suggester (``method=ellm_oracle``, ELLM's text actions, intrinsic only) on
  ``env=craftax`` for ``--ellm-steps`` steps: wall seconds including start-up and compilation;
* peak resident memory of the largest run (``getrusage`` of the child processes).

Writes ``benchmarks/results/craftax.{json,md}``. Scores on env=craftax are Craftax-Classic scores.
Steps/s on a shared machine vary 2-3x with load: read the ratio, which both sides share.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llmguide.core.rundir import read_metrics


def train(name: str, overrides: list[str], workdir: Path) -> dict[str, float]:
    """One ``llmguide train`` process; steady steps/s from its update records, wall seconds, peak RSS."""
    cmd = [sys.executable, "-m", "llmguide.cli", "train", *overrides, "eval.episodes=0", "progress=false",
           f"run.dir={workdir}", f"run.name={name}", "run.overwrite=true"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    updates = [r for r in read_metrics(workdir / name) if "charts/sps" in r]
    first, last = updates[0], updates[-1]
    steady = (last["step"] - first["step"]) / max(last["time"] - first["time"], 1e-9)
    return {"steps": int(last["step"]), "steady_sps": steady, "wall_s": wall,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=65_536, help="PPO steps per env=craftax run")
    p.add_argument("--crafter-steps", type=int, default=8_192, help="PPO steps per env=crafter run")
    p.add_argument("--ellm-steps", type=int, default=1_000_000, help="ELLM-oracle steps on env=craftax (0: skip)")
    p.add_argument("--craftax-envs", type=int, default=256)
    p.add_argument("--crafter-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=32, help="PPO rollout length per env (both envs)")
    p.add_argument("--encoder", default="flat", choices=["flat", "cnn"], help="agent.image_encoder (both envs)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seeds", type=int, default=1, help="unused: speed is one seed (kept for the common CLI)")
    p.add_argument("--out", default="runs/bench_craftax")
    p.add_argument("--results", default="benchmarks/results")
    args = p.parse_args()

    work, res = Path(args.out), Path(args.results)
    work.mkdir(parents=True, exist_ok=True)
    res.mkdir(parents=True, exist_ok=True)
    agent = ["agent=ppo", f"agent.image_encoder={args.encoder}", f"agent.num_steps={args.num_steps}"]
    runs: dict[str, list[dict]] = {"crafter": [], "craftax": []}
    for r in range(args.rounds):
        runs["crafter"].append(train(f"ppo-crafter-{r}", ["env=crafter", "method=none", *agent,
                                                          f"num_envs={args.crafter_envs}",
                                                          f"total_steps={args.crafter_steps}"], work))
        runs["craftax"].append(train(f"ppo-craftax-{r}", ["env=craftax", "method=none", *agent,
                                                          f"num_envs={args.craftax_envs}",
                                                          f"total_steps={args.steps}"], work))
        print(f"round {r}: crafter {runs['crafter'][-1]['steady_sps']:.0f} steps/s, "
              f"craftax {runs['craftax'][-1]['steady_sps']:.0f} steps/s", flush=True)
    ppo_sps = {env: statistics.median(x["steady_sps"] for x in v) for env, v in runs.items()}
    ratios = [cx["steady_sps"] / cr["steady_sps"] for cr, cx in zip(runs["crafter"], runs["craftax"], strict=True)]

    ellm = None
    if args.ellm_steps > 0:
        ellm = train("ellm-oracle-craftax", ["env=craftax", "env.actions=text", "env.max_steps=400",
                                             "method=ellm_oracle", "method.extrinsic_coef=0.0", *agent,
                                             f"num_envs={args.craftax_envs}", f"total_steps={args.ellm_steps}"], work)
        print(f"ELLM-oracle {ellm['steps']:,} steps in {ellm['wall_s']:.0f} s", flush=True)
    load = os.getloadavg()[0]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {"ppo_sps": ppo_sps, "ppo_ratio_craftax_over_crafter": statistics.median(ratios),
              "ellm_oracle_1m_seconds": None if ellm is None else ellm["wall_s"] * 1_000_000 / ellm["steps"],
              "ellm_oracle_steps": None if ellm is None else ellm["steps"],
              "ellm_oracle_steady_sps": None if ellm is None else ellm["steady_sps"],
              "peak_rss_mb": peak, "load_average_at_end": load,
              "setup": {"encoder": args.encoder, "num_steps": args.num_steps, "craftax_envs": args.craftax_envs,
                        "crafter_envs": args.crafter_envs, "rounds": args.rounds}, "runs": runs}
    (res / "craftax.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# env=craftax vs env=crafter (Craftax-Classic scores, not Crafter scores)", "",
        f"PPO through the CLI, `agent.image_encoder={args.encoder}`, rollout {args.num_steps} steps per env, "
        f"median of {args.rounds} interleaved rounds; steady = between the first and the last update. "
        f"Shared 2-core box, load average {load:.1f} at the end.", "",
        "| env | num_envs | steady steps/s | wall s per run |", "|---|---|---|---|",
        *(f"| env={env} | {args.craftax_envs if env == 'craftax' else args.crafter_envs} | {ppo_sps[env]:,.0f} | "
          f"{statistics.median(x['wall_s'] for x in runs[env]):.0f} |" for env in runs),
        "", f"PPO steps/s ratio env=craftax / env=crafter: **{statistics.median(ratios):.1f}x** "
        f"(per round: {', '.join(f'{x:.1f}' for x in ratios)}).", ""]
    if ellm is not None:
        lines += [f"ELLM-oracle (text actions, intrinsic only) on env=craftax: {ellm['steps']:,} steps in "
                  f"{ellm['wall_s']:.0f} s wall ({ellm['steady_sps']:,.0f} steps/s steady) → "
                  f"**{result['ellm_oracle_1m_seconds'] / 60:.1f} min per 1M steps**.", ""]
    lines += [f"Peak resident memory of one run: {peak:,.0f} MB.", ""]
    (res / "craftax.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
