"""Does LM guidance keep up?  ELLM with the embedded LM vs the same agent without an LM (issue #19).

One invocation runs both arms on the same env, agent, number of envs and budget, **back to back per
seed, in alternating order** (seed 0: no-LM first, seed 1: ELLM first, ...), so both see the same
machine load; the load (``uptime``) before and after each run is recorded.  Every ELLM run starts
with a **cold LM cache** (its own empty temporary cache directory; nothing is warm-started).

Arms (ELLM's text action space, and ELLM's rules on Crafter; PPO, intrinsic-only like ``benchmarks/ellm_crafter.py``):

* ``no-lm``         — ``method=none`` (PPO, no reward, no LM): the unguided speed
* ``ellm-embedded`` — ``method=ellm llm=embedded method.suggester=score`` (Gemma 3 270M in-process; the LM
  worker runs at ``llm.service.worker_nice`` = 4 by default: the learner first)
* ``ellm-embedded-nice0`` (``--arms``) — the same with the LM worker at the learner's priority

Per run: steps/s over training (``charts/sps`` of the learner, last record: model loading and
evaluation are not included), and for ELLM the LM metrics of the last record: ``lm/fresh_fraction``
(share of env-steps whose current state signature already had an answer when the agent acted),
``lm/latency_p50``/``p95``, ``lm/dropped_stale``, ``lm/calls``, distinct signatures answered.
``sps_ratio`` = ELLM steps/s / no-LM steps/s (mean over seeds of the per-seed ratio).

ONI's labelled fraction on MiniHack is not measured here (``oni_labelled_fraction``: null).

Writes ``benchmarks/results/lm_guidance.{json,md}`` (``--results``).

    python benchmarks/lm_guidance.py --env-id crafter --steps 100000 --seeds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ellm_crafter import CRAFTER_ONLY  # ELLM's Crafter-only rule changes (refused on craftax)
from llmguide.core.rundir import read_metrics

COMMON = ["env.actions=text", "agent=ppo", "eval.episodes=0", "progress=false", "method.extrinsic_coef=0.0"]
ARMS = {
    "no-lm": ["method=none"],
    "ellm-embedded": ["method=ellm", "llm=embedded", "method.suggester=score"],
    # the same with the LM worker at the learner's priority (llm.service.worker_nice=0)
    "ellm-embedded-nice0": ["method=ellm", "llm=embedded", "method.suggester=score", "llm.service.worker_nice=0"],
    # the LM on every core (llm.n_threads=2 here) instead of the default auto (every core but the learner's)
    "ellm-embedded-threads2": ["method=ellm", "llm=embedded", "method.suggester=score", "llm.n_threads=2"],
}
MAIN = "ellm-embedded"   # the arm behind sps_ratio / fresh_fraction
LM_KEYS = ("lm/fresh_fraction", "lm/latency_p50", "lm/latency_p95", "lm/dropped_stale", "lm/queue_depth",
           "lm/calls", "lm/requests", "lm/deduplicated", "lm/completed", "lm/fallbacks", "ellm/memo_hits",
           "ellm/submitted", "ellm/answered", "ellm/requests", "ellm/warm_start", "ellm/fresh_fraction")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_arm(label: str, seed: int, args: argparse.Namespace, out: Path) -> dict:
    name = f"{label}-s{seed}"
    rules = CRAFTER_ONLY if args.env_id == "crafter" else []
    overrides = [*ARMS[label], *COMMON, *rules, f"env={args.env_id}", f"seed={seed}", f"total_steps={args.steps}",
                 f"num_envs={args.num_envs}", f"env.max_steps={args.max_steps}", f"run.dir={out}",
                 f"run.name={name}", "run.overwrite=true", f"log_every={max(args.steps // 20, 500)}", *args.extra]
    cache = Path(tempfile.mkdtemp(prefix="lm_guidance_cache_"))   # cold: an empty cache per run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LLMGUIDE_CACHE_DIR": str(cache)}
    before, t0 = uptime(), time.time()
    with open(out / f"{name}.log", "w") as log:
        code = subprocess.call([sys.executable, "-m", "llmguide.cli", "train", *overrides], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    wall, after = time.time() - t0, uptime()
    shutil.rmtree(cache, ignore_errors=True)
    rec: dict = {"arm": label, "seed": seed, "exit": code, "wall_s": round(wall, 1), "uptime_before": before,
                 "uptime_after": after}
    if code != 0 or not (out / name / "metrics.jsonl").exists():
        return rec
    records = read_metrics(out / name)
    sps = [r["charts/sps"] for r in records if "charts/sps" in r]
    steps = [r.get("step", 0) for r in records if "charts/sps" in r]
    rec["sps"] = float(sps[-1]) if sps else None
    rec["steps"] = int(steps[-1]) if steps else None
    lm = [r for r in records if "lm/calls" in r]
    if lm:
        last = lm[-1]
        rec.update({k: float(last[k]) for k in LM_KEYS if k in last})
        rec["fresh_curve"] = [[int(r.get("step", 0)), float(r.get("lm/fresh_fraction", 0.0))] for r in lm]
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", "--task", dest="env_id", default="crafter", help="env group: crafter (or craftax)")
    p.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=400, help="episode cap (ELLM's reference: 400)")
    p.add_argument("--out", default="runs/bench_lm_guidance")
    p.add_argument("--results", default="benchmarks/results", help="folder for lm_guidance.{md,json}")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every run")
    p.add_argument("--arms", default="no-lm,ellm-embedded", help=f"comma-separated subset of {list(ARMS)}")
    p.add_argument("--resummarize", default=None, help="rewrite the results from this lm_guidance.json (no runs)")
    p.add_argument("--notes", default=None, help="a Markdown file appended to lm_guidance.md")
    args = p.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    notes = Path(args.notes).read_text() if args.notes else ""
    if args.resummarize:
        old = json.loads(Path(args.resummarize).read_text())
        args.steps, args.env_id, args.num_envs, args.seeds = old["steps"], old["env"], old["num_envs"], old["seeds"]
        arms = list(dict.fromkeys(r["arm"] for r in old["runs"]))
        Path(args.results).mkdir(parents=True, exist_ok=True)
        return 1 if summarize(old["runs"], arms, args, Path(args.results), notes) else 0

    out, res = Path(args.out), Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    res.mkdir(parents=True, exist_ok=True)
    runs = []
    started = time.time()
    for seed in range(args.seeds):
        order = arms if seed % 2 == 0 else list(reversed(arms))
        for label in order:
            rec = run_arm(label, seed, args, out)
            runs.append(rec)
            print(f"[{time.time() - started:6.0f}s] {label}-s{seed}: exit {rec['exit']}, "
                  f"{rec.get('sps') or 0:.0f} steps/s, fresh {rec.get('lm/fresh_fraction', float('nan')):.3f}, "
                  f"load {rec['uptime_after'].split('load average:')[-1].strip()}", flush=True)

    failed = summarize(runs, arms, args, res, notes)
    return 1 if failed else 0


def late_fresh(curve: list, tail: float = 0.2) -> float | None:
    """Fresh fraction over the last ``tail`` of the run, from the cumulative curve [[step, fraction], ...]."""
    if not curve or len(curve) < 2:
        return None
    s_end, f_end = curve[-1]
    start = next(((s, f) for s, f in curve if s >= (1 - tail) * s_end and s < s_end), None)
    if start is None:
        return None
    s_a, f_a = start
    return (f_end * s_end - f_a * s_a) / (s_end - s_a)


def summarize(runs: list[dict], arms: list[str], args: argparse.Namespace, res: Path, notes: str = "") -> list[str]:
    """Write lm_guidance.{json,md} from the run records; return the failed runs."""
    for r in runs:
        if r.get("fresh_curve"):
            r["fresh_fraction_last20"] = late_fresh(r["fresh_curve"])
    by = {(r["arm"], r["seed"]): r for r in runs}
    per_arm: dict[str, dict] = {}
    for arm in arms:
        if arm == "no-lm":
            continue
        ratios, fresh = [], []
        for seed in range(args.seeds):
            a, b = by.get((arm, seed), {}), by.get(("no-lm", seed), {})
            if a.get("sps") and b.get("sps"):
                ratios.append(a["sps"] / b["sps"])
            if "lm/fresh_fraction" in a:
                fresh.append(a["lm/fresh_fraction"])
        per_arm[arm] = {"sps_ratio": float(np.mean(ratios)) if ratios else None,
                        "fresh_fraction": float(np.mean(fresh)) if fresh else None}
    main_arm = per_arm.get(MAIN) or next(iter(per_arm.values()), {"sps_ratio": None, "fresh_fraction": None})
    failed = [f"{r['arm']}-s{r['seed']}" for r in runs if r["exit"] != 0 or not r.get("sps")]
    summary = {
        "steps": args.steps,
        "sps_ratio": main_arm["sps_ratio"],
        "fresh_fraction": main_arm["fresh_fraction"],
        "oni_labelled_fraction": None,
        "main_arm": MAIN if MAIN in per_arm else next(iter(per_arm), None),
        "arms": per_arm,
        "env": args.env_id, "num_envs": args.num_envs, "seeds": args.seeds,
        "targets": {"sps_ratio": 0.9, "fresh_fraction": 0.8},
        "protocol": "both arms back to back per seed in alternating order, one invocation; cold LM cache per ELLM run",
        "runs": runs, "failed": failed,
    }
    (res / "lm_guidance.json").write_text(json.dumps(summary, indent=2))
    (res / "lm_guidance.md").write_text("")
    rows = ["| run | steps/s | fresh fraction | fresh, last 20% | LM latency p50 / p95 (s) | dropped stale | LM calls | "
            "wall (s) | load after (1/5/15 min) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lat = f"{r['lm/latency_p50']:.2f} / {r['lm/latency_p95']:.2f}" if "lm/latency_p50" in r else "–"
        fresh_txt = f"{r['lm/fresh_fraction']:.3f}" if "lm/fresh_fraction" in r else "–"
        late = f"{r['fresh_fraction_last20']:.3f}" if r.get("fresh_fraction_last20") is not None else "–"
        rows.append(f"| {r['arm']}-s{r['seed']} | {r.get('sps') or 0:.0f} | {fresh_txt} | {late} | {lat} | "
                    f"{r.get('lm/dropped_stale', 0):.0f} | {r.get('lm/calls', 0):.0f} | {r['wall_s']:.0f} | "
                    f"{r['uptime_after'].split('load average:')[-1].strip()} |")
    sr, ff = summary["sps_ratio"], summary["fresh_fraction"]
    text = "\n".join([
        "# LM guidance that keeps up (issue #19)", "",
        f"{args.env_id}, ELLM's text actions and rules, PPO with {args.num_envs} envs, {args.steps:,} env steps per run, "
        f"episodes capped at {args.max_steps} steps, seeds 0..{args.seeds - 1}; ELLM with the embedded LM (Gemma 3 "
        "270M, closed-vocabulary scoring) vs the same agent without an LM, back to back per seed in one invocation "
        "(alternating order), each ELLM run with an empty LM cache.", "",
        f"**sps_ratio = {sr:.3f}** (target ≥ 0.9), **fresh_fraction = {ff:.3f}** (target ≥ 0.8)"
        if sr is not None and ff is not None else "**incomplete** (see failed runs)", "",
        *[f"- {arm}: sps_ratio {v['sps_ratio'] or 0:.3f}, fresh_fraction {v['fresh_fraction'] or 0:.3f}"
          for arm, v in per_arm.items()], "",
        *rows, "", f"Failed runs: {', '.join(failed) or 'none'}.  ONI labelled fraction on MiniHack: not measured.", "",
        notes])
    (res / "lm_guidance.md").write_text(text)
    print(text)
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
