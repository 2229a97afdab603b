"""Does LM guidance keep up?  ELLM with the embedded LM vs the same agent without an LM (issue #19).

Both arms run on the same env, agent, number of envs and budget, **seed by seed, in alternating order**
(seed 0: no-LM first, seed 1: ELLM first, ...; ``benchmarks/harness/`` with ``order="alternate"``), so both
see the same machine load. Every ELLM run starts with a **cold LM cache**: its own cache file
(``<runs>/cold_cache/<arm>-seed-<s>.sqlite``), emptied at the start of the study (kept with ``--resume``).

Arms (ELLM's text action space, and ELLM's rules on Crafter; PPO, intrinsic-only like ``benchmarks/studies/ellm_crafter.py``):

* ``no-lm``         — ``method=none`` (PPO, no reward, no LM): the unguided speed (the control)
* ``ellm-embedded`` — ``method=ellm llm=embedded method.suggester=score`` (Gemma 3 270M in-process; the LM
  worker runs at ``llm.service.worker_nice`` = 4 by default: the learner first)
* ``ellm-embedded-nice0`` (``--arms``) — the same with the LM worker at the learner's priority
* ``ellm-embedded-threads2`` (``--arms``) — the LM on every core (``llm.n_threads=2``)

Value per run: steps/s of the learner (``charts/sps``, mean over the last 10% of the run: model loading and
evaluation are not included); the paired difference against ``no-lm`` per seed. The details section adds
``sps_ratio`` (ELLM steps/s / no-LM steps/s at the same seed, mean over seeds; target >= 0.9) and the LM's
last ``lm/fresh_fraction`` (share of env-steps whose state signature already had an answer when the agent
acted; target >= 0.8), latencies and dropped stale answers. Results in ``benchmarks/results/lm_guidance/<env>-<budget>/``.

    python benchmarks/studies/lm_guidance.py --env-id crafter --steps 100000 --seeds 1
"""

from __future__ import annotations

import shutil
import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)
from ellm_crafter import CRAFTER_ONLY  # ELLM's Crafter-only rule changes (refused on craftax)

from harness import Study, budget_name, main

ELLM = ["method=ellm", "llm=embedded", "method.suggester=score"]
ARMS = {
    "no-lm": ["method=none"],
    "ellm-embedded": [*ELLM],
    "ellm-embedded-nice0": [*ELLM, "llm.service.worker_nice=0"],
    "ellm-embedded-threads2": [*ELLM, "llm.n_threads=2"],
}
for _arm, _over in ARMS.items():    # a cold cache per ELLM run
    if "llm=embedded" in _over:
        _over.append(f"llm.cache.path={{runs}}/cold_cache/{_arm}-seed-${{seed}}.sqlite")
LM_KEYS = ("lm/fresh_fraction", "lm/latency_p50", "lm/latency_p95", "lm/dropped_stale", "lm/calls", "ellm/memo_hits")


def flags(p) -> None:
    p.add_argument("--max-steps", type=int, default=400, help="episode cap (ELLM's reference: 400)")


def configure(args) -> None:
    args.log_every = max(args.steps // 20, 500)
    if args.variant is None:
        args.variant = f"{args.env}-{budget_name(args.steps)}"


def prepare(plan) -> None:
    """Empty the cold caches (not with --resume, --dry-run or --report-only)."""
    if not (plan.args.resume or plan.dry_run or plan.report_only):
        shutil.rmtree(plan.runs / "cold_cache", ignore_errors=True)


def details(plan) -> tuple[list[str], dict]:
    """Per ELLM arm: steps/s ratio to no-lm at the same seed, and the LM's last metrics."""
    from harness import seed_runs
    from llmguide.core.rundir import read_metrics

    def last(run, key):
        return next((r[key] for r in reversed(read_metrics(run)) if key in r), None)

    base = {s: last(r, "charts/sps") for s, r in seed_runs(plan, "no-lm").items()}
    out, lines = {}, ["## Keeping up", "", "| arm | seed | steps/s | sps ratio | fresh fraction | latency p50 / p95 (s) | "
                                      "dropped stale | LM calls |", "|---|---|---|---|---|---|---|---|"]
    for arm in plan.arms:
        if arm == "no-lm":
            continue
        per_seed = {}
        for s, run in sorted(seed_runs(plan, arm).items()):
            sps = last(run, "charts/sps")
            rec = {"sps": sps, "sps_ratio": sps / base[s] if sps and base.get(s) else None,
                   **{k: last(run, k) for k in LM_KEYS}}
            per_seed[s] = rec
            lines.append(f"| {arm} | {s} | {sps or 0:.0f} | {rec['sps_ratio'] or 0:.3f} | "
                         f"{rec['lm/fresh_fraction'] or 0:.3f} | {rec['lm/latency_p50'] or 0:.2f} / "
                         f"{rec['lm/latency_p95'] or 0:.2f} | {rec['lm/dropped_stale'] or 0:.0f} | {rec['lm/calls'] or 0:.0f} |")
        ratios = [r["sps_ratio"] for r in per_seed.values() if r["sps_ratio"] is not None]
        fresh = [r["lm/fresh_fraction"] for r in per_seed.values() if r["lm/fresh_fraction"] is not None]
        out[arm] = {"sps_ratio": sum(ratios) / len(ratios) if ratios else None,
                    "fresh_fraction": sum(fresh) / len(fresh) if fresh else None, "seeds": per_seed}
    summary = [f"- {arm}: sps_ratio {v['sps_ratio'] or 0:.3f} (target >= 0.9), fresh_fraction "
               f"{v['fresh_fraction'] or 0:.3f} (target >= 0.8)" for arm, v in out.items()]
    return [*lines, "", *summary, ""], {"arms": out, "targets": {"sps_ratio": 0.9, "fresh_fraction": 0.8}}


STUDY = Study(
    name="lm_guidance",
    title="LM guidance that keeps up: ELLM with the embedded LM vs the same agent without an LM",
    about="ELLM's text actions (and rules on Crafter), PPO, intrinsic-only; arms seed by seed in alternating order "
          "in one invocation; each ELLM run with an empty LM cache.",
    arms=ARMS,
    control="no-lm",
    default_arms=("no-lm", "ellm-embedded"),
    metric="charts/sps",
    metric_name="learner steps per second",
    common=["env.actions=text", "agent=ppo", "eval.episodes=0", "method.extrinsic_coef=0.0", "num_envs=4",
            "env.max_steps={max_steps}", "log_every={log_every}"],
    per_env={"crafter": CRAFTER_ONLY},
    env="crafter",
    steps=100_000,
    seeds=1,
    order="alternate",
    flags=flags,
    configure=configure,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
