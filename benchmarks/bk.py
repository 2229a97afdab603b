"""BK reduced-scale reproduction: PPO vs BK-{Code,Pref,Goal} × {oracle, embedded LM} on BabyAI-Text.

Pipeline as the reference: RND-driven collection on ``Pretraining-S20`` (episodes saved along
training) → one label run per (variant, LM) → PPO with each potential, and plain PPO, over
``--seeds`` seeds.  Every arm has the same PPO config (reference: lr 3e-4 constant, clip 0.1,
8 envs × 128 steps), network, env, budget and ``extrinsic_coef`` (10); the PPO control gets
everything except the shaping.  An arm whose labelling failed is listed as failed with the reason.

Writes ``<results>/bk.md``, ``bk.json`` (DESIGN.md format; value per seed = success AUC, the mean
success rate of finished training episodes over ``--bins`` equal step bins) and ``bk.png``.
Phases can be run separately (``--phase collect|label|train|report``); runs that exist are kept.

    nice python benchmarks/bk.py --task GoToLocal-RedBall-S20 --seeds 3 --steps 300000 --jobs 2

Crafter single tasks (``--env crafter`` or ``--env craftax``, Craftax-Classic in JAX): the data is
RND-driven PPO on the env with all achievements (``env.task=null``), the arms train on ``--task``
(e.g. ``place_table``; reward 1 and episode end on success), ``agent.image_encoder=flat``; results go
to ``<results>/bk_<env>.{md,json,png}`` and runs to ``runs/bench-bk-<env>`` (the BabyAI default path
and ``bk.json`` are unchanged)::

    nice python benchmarks/bk.py --env craftax --task place_table --num-envs 64 --num-steps 64 \
        --steps 300000 --arms ppo,bk_code-oracle,bk_pref-oracle,bk_goal-oracle
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VARIANTS = ("bk_code", "bk_pref", "bk_goal")
LMS = ("oracle", "embedded")
ARMS = ("ppo", *(f"{v}-{lm}" for lm in LMS for v in VARIANTS))
PPO = ["agent.lr=3e-4", "agent.anneal_lr=false", "agent.clip_coef=0.1", "agent.num_steps=128"]
ENVS = ("babyai", "crafter", "craftax")
CRAFTER_FAMILY = ("crafter", "craftax")
# per env: task, collection task, extra overrides of every run (Crafter: the cheap flat encoder on the symbolic view)
ENV_DEFAULTS = {"babyai": ("GoToLocal-RedBall-S20", "Pretraining-S20", []),
                "crafter": ("place_table", "null", ["agent.image_encoder=flat"]),
                "craftax": ("place_table", "null", ["agent.image_encoder=flat"])}


def common(args: argparse.Namespace) -> list[str]:
    if args.env == "babyai":
        return ["env=babyai", f"num_envs={args.num_envs}", *PPO, "progress=false", f"run.dir={args.out}"]
    return [f"env={args.env}", f"num_envs={args.num_envs}", *PPO, f"agent.num_steps={args.num_steps}",
            *ENV_DEFAULTS[args.env][2], "progress=false", f"run.dir={args.out}"]


def cli(verb: str, overrides: list[str], log: Path) -> tuple[int, float]:
    t = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call([sys.executable, "-m", "llmguide.cli", verb, *overrides], stdout=f, stderr=f)
    return code, time.perf_counter() - t


def collect(args: argparse.Namespace) -> None:
    if (args.out / "data" / "collect_summary.json").exists():
        return
    code, secs = cli("collect", [*common(args), f"env.task={args.collect_task}", "method=bk_code",
                                 f"total_steps={args.collect_steps}", "run.name=data", "run.overwrite=true"],
                     args.out / "collect.log")
    print(f"collect: exit {code}, {secs:.0f}s")


LABEL_EXTRA = {"bk_code": ["method.code.iterations={code_iters}", "method.code.fix_retries={fix_retries}",
                           "method.code.max_tokens={code_tokens}"], "bk_pref": ["method.pref.num_pairs={pairs}"],
               "bk_goal": ["method.goal.iterations={goal_iters}"]}


def label_one(args: argparse.Namespace, variant: str, lm: str) -> dict:
    name = f"labels-{variant}-{lm}"
    manifest = args.out / name / "bk" / "manifest.json"
    if not manifest.exists():
        extra = [e.format(**{**vars(args), "pairs": args.pairs if lm != "oracle" else args.oracle_pairs})
                 for e in LABEL_EXTRA[variant]]
        code, secs = cli("label", [*common(args), f"env.task={args.task}", f"method={variant}", f"llm={lm}",
                                   f"method.data={args.out / 'data'}", f"run.name={name}", "run.overwrite=true",
                                   *extra], args.out / f"{name}.log")
        print(f"label {variant}-{lm}: exit {code}, {secs:.0f}s")
        (args.out / name / "label_seconds.txt").write_text(f"{secs:.1f}\n") if (args.out / name).exists() else None
    if not manifest.exists():
        tail = (args.out / f"{name}.log").read_text()[-600:]
        return {"failed": f"label crashed: {tail.strip().splitlines()[-1] if tail.strip() else '?'}"}
    return json.loads(manifest.read_text())


def train_one(args: argparse.Namespace, arm: str, seed: int) -> None:
    name = f"{arm}-s{seed}"
    if (args.out / name / "eval.json").exists():
        return
    if arm == "ppo":
        method = ["method=none", "method.extrinsic_coef=10.0"]
    else:
        variant, lm = arm.split("-")
        method = [f"method={variant}", f"method.labels={args.out / f'labels-{variant}-{lm}'}"]
    code, secs = cli("train", [*common(args), f"env.task={args.task}", *method, f"total_steps={args.steps}",
                               f"seed={seed}", f"run.name={name}", "run.overwrite=true"], args.out / f"{name}.log")
    print(f"train {name}: exit {code}, {secs:.0f}s", flush=True)


def success_curve(run: Path, steps: int, bins: int) -> np.ndarray:
    """Mean success of the training episodes that finished in each of ``bins`` equal step bins."""
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "charts/success" in r]
    edges = np.linspace(0, steps, bins + 1)
    s = np.array([r["step"] for r in recs], dtype=float)
    v = np.array([r["charts/success"] for r in recs], dtype=float)
    s, v = s[s <= steps], v[s <= steps]                 # a longer run is cut at ``steps``
    idx = np.clip(np.digitize(s, edges) - 1, 0, bins - 1)
    out = np.array([v[idx == b].mean() if (idx == b).any() else np.nan for b in range(bins)])
    return np.where(np.isnan(out), np.nanmean(out) if np.isfinite(out).any() else 0.0, out)


def run_stats(run: Path) -> dict[str, float]:
    """Throughput and shaping scale of one run: final ``charts/sps``, wall-clock seconds of training,
    and (BK arms) the mean normalisation factor applied to Φ and the mean |shaping reward| per rollout."""
    from llmguide.core.rundir import read_metrics

    recs = read_metrics(run)
    sps = [r["charts/sps"] for r in recs if "charts/sps" in r]
    times = [r["time"] for r in recs if "time" in r]
    out = {"sps": round(float(sps[-1]), 1) if sps else float("nan"),
           "train_seconds": round(float(times[-1] - times[0]), 1) if len(times) > 1 else float("nan")}
    factors = [v for r in recs for k, v in r.items() if k.endswith("/phi_factor")]
    shaping = [abs(v) for r in recs for k, v in r.items() if k.startswith("charts/intrinsic_reward/")]
    if factors:
        out["phi_factor_mean"] = float(np.mean(factors))
        out["abs_rollout_mean_shaping"] = float(np.mean(shaping)) if shaping else float("nan")
    return out


def run_budget(run: Path) -> int:
    """``total_steps`` the run was trained for (from its saved config)."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(run / "config.yaml").total_steps)


def bootstrap_ci(x: np.ndarray, reps: int = 5000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean over seeds (axis 0), per column."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), (reps, len(x)))
    means = x[idx].mean(axis=1)
    return np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0)


def report(args: argparse.Namespace, labels: dict[str, dict], seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms, rows, run_minutes, short_runs = {}, [], 0.0, {}
    for arm in args.arms:
        info = labels.get(arm, {})
        if info.get("failed"):
            arms[arm] = {"failed": info["failed"], "seeds": [], "values": [],
                         "label_summary": {k: v for k, v in info.get("summary", {}).items() if not isinstance(v, dict)}}
            rows.append(f"| {arm} | failed: {info['failed']} | | | | | | | |")
            continue
        runs = [args.out / f"{arm}-s{s}" for s in args.seed_list]
        done = [(s, r) for s, r in zip(args.seed_list, runs, strict=True) if (r / "eval.json").exists()]
        if not done:
            arms[arm] = {"failed": "not trained within the compute budget (labelling succeeded)", "seeds": [],
                         "values": [], "label_summary": {k: v for k, v in info.get("summary", {}).items()
                                                         if not isinstance(v, dict)}}
            rows.append(f"| {arm} | not trained within the compute budget (labelling succeeded) | | | | | | | |")
            continue
        budget = min(run_budget(r) for _, r in done)
        reduced = budget < args.steps
        if reduced:
            short_runs[arm] = [r for _, r in done]
        curves = np.array([success_curve(r, min(budget, args.steps), args.bins) for _, r in done])
        aucs = curves.mean(axis=1)
        lo, hi = bootstrap_ci(curves)
        alo, ahi = bootstrap_ci(aucs[:, None])
        final = [float(np.mean(np.asarray(json.loads((r / "eval.json").read_text())["episode_returns"]) > 0))
                 for _, r in done]                      # greedy end-of-training eval (5 episodes)
        width = min(budget, args.steps) / args.bins      # first bin whose training success reaches 0.8 (its end)
        reach = [next((int((b + 1) * width) for b, v in enumerate(c) if v >= 0.8), None) for c in curves]
        stats = [run_stats(r) for _, r in done]
        speed = {k: round(float(np.mean([st[k] for st in stats])), 6) for k in stats[0]}
        run_minutes += sum(st["train_seconds"] for st in stats) / 60
        arms[arm] = {"seeds": [s for s, _ in done], "values": aucs.round(4).tolist(),
                     "auc_ci95": [round(float(alo[0]), 4), round(float(ahi[0]), 4)],
                     "final_eval_success": final, "run_stats_mean": speed,
                     "budget_steps": min(budget, args.steps), "reduced_budget": reduced,
                     "steps_to_success_0.8": reach,
                     "late_success": curves[:, -max(1, args.bins // 5):].mean(1).round(4).tolist(),
                     "curve": {"steps": ((np.arange(args.bins) + 0.5) * min(budget, args.steps) / args.bins).tolist(),
                               "mean": curves.mean(0).round(4).tolist(),
                               "ci95_low": np.round(lo, 4).tolist(), "ci95_high": np.round(hi, 4).tolist()}}
        if arm != "ppo":
            arms[arm]["label_summary"] = {k: v for k, v in info.get("summary", {}).items() if not isinstance(v, dict)}
        rows.append(f"| {arm}{f' (reduced budget: {budget} steps)' if reduced else ''} | "
                    f"{aucs.mean():.3f} [{alo[0]:.3f}, {ahi[0]:.3f}] | {len(done)} | "
                    f"{', '.join(f'{a:.3f}' for a in aucs)} | {speed['sps']:.0f} | {speed['train_seconds'] / 60:.1f} | "
                    f"{speed.get('phi_factor_mean', float('nan')):.3g} | "
                    f"{speed.get('abs_rollout_mean_shaping', float('nan')):.2g} | "
                    f"{', '.join('—' if x is None else f'{x // 1000}k' for x in reach)} |")
    for item in args.not_run:             # arms not attempted, with the reason (never numbers)
        arm, _, reason = item.partition("=")
        arms[arm] = {"not_run": reason or "not run", "seeds": [], "values": []}
        rows.append(f"| {arm} | not run: {reason or 'not run'} | | | | | | | |")
    short_md = []
    for short in sorted({arms[a]["budget_steps"] for a in short_runs}):   # each reduced budget's window
        short_md += [f"Success AUC over the first {short} steps of every run (the reduced-budget arms' whole "
                     "budget; the other arms' same runs cut at that step):", "",
                     "| arm | success AUC, mean [95% CI] | seeds |", "|---|---|---|"]
        for arm, a in arms.items():
            if a.get("seeds") and a["budget_steps"] >= short:
                runs = [args.out / f"{arm}-s{s}" for s in a["seeds"]]
                au = np.array([success_curve(r, short, args.bins).mean() for r in runs])
                lo_s, hi_s = bootstrap_ci(au[:, None])
                a[f"values_first_{short}"] = au.round(4).tolist()
                short_md.append(f"| {arm} | {au.mean():.3f} [{lo_s[0]:.3f}, {hi_s[0]:.3f}] | {len(au)} |")
        short_md.append("")
    result = {"task": args.task, "budget_steps": args.steps, "metric": "success AUC (mean training success rate "
              f"over {args.bins} step bins)", "higher_is_better": True, "arms": arms,
              "collect": {"task": args.collect_task, "steps": args.collect_steps},
              "train_run_minutes_total": round(run_minutes, 1), "driver_seconds": round(seconds)}
    args.results.mkdir(parents=True, exist_ok=True)
    result["env"] = args.env
    (args.results / f"{args.stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, a in arms.items():
        if "curve" in a:
            c = a["curve"]
            ax.plot(c["steps"], c["mean"], label=arm)
            ax.fill_between(c["steps"], c["ci95_low"], c["ci95_high"], alpha=0.15)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training success rate (95% bootstrap CI over seeds)")
    ax.set_title(f"BK vs PPO, {args.env_label} {args.task}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.results / f"{args.stem}.png", dpi=100)
    table = ["| arm | success AUC, mean [95% CI] | seeds | per seed | steps/s | min/run | Φ factor | "
             "mean \\|F\\| per rollout | steps to 0.8 success, per seed |", "|---|---|---|---|---|---|---|---|---|", *rows]
    labels_md = [f"- `{arm}`: " + json.dumps({k: v for k, v in a.get("label_summary", {}).items()
                                              if not str(k).startswith("parse/")}, default=str)
                 for arm, a in arms.items() if "label_summary" in a]
    md = [f"# BK vs PPO on {args.env_label} {args.task}", "",
          f"Budget: {args.steps} env steps per run, seeds {args.seed_list}, {args.num_envs} envs × "
          f"{args.num_steps if args.env != 'babyai' else 128} steps, "
          f"PPO lr 3e-4 constant, clip 0.1, extrinsic_coef 10 for every arm. Data: RND-driven PPO on "
          f"{args.collect_label} ({args.collect_steps} steps per collection seed). Value per seed: success AUC "
          f"(mean training success rate over {args.bins} equal step bins); 95% CIs: percentile bootstrap over "
          f"seeds. Training compute: {run_minutes:.0f} run-minutes in total (2 runs at a time, niced, "
          f"1 torch thread each, on a 2-core box shared with other sessions).", "", *table, "", *short_md, f"![success]({args.stem}.png)", "",
          "Labelling summaries:", "", *labels_md, ""]
    if args.notes and args.notes.exists():
        md += ["", args.notes.read_text().strip(), ""]
    (args.results / f"{args.stem}.md").write_text("\n".join(md))
    print("\n".join(md))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="babyai", choices=ENVS,
                   help="env group: babyai (BabyAI-Text), crafter, or craftax (Craftax-Classic, JAX, batched)")
    p.add_argument("--task", "--env-id", dest="task", default=None,
                   help="training task (default: GoToLocal-RedBall-S20 on babyai, place_table on crafter/craftax)")
    p.add_argument("--collect-task", default=None,
                   help="collection task (default: Pretraining-S20 on babyai, null = all achievements on Crafter)")
    p.add_argument("--num-steps", type=int, default=128, help="PPO rollout length per env (crafter/craftax)")
    p.add_argument("--steps", type=int, default=300_000, help="PPO env steps per run")
    p.add_argument("--collect-steps", type=int, default=65_536)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--pairs", type=int, default=200, help="BK-Pref pairs labelled by an LM (reference: 5000)")
    p.add_argument("--oracle-pairs", type=int, default=2000, help="BK-Pref pairs labelled by the oracle (cheap)")
    p.add_argument("--goal-iters", type=int, default=20)
    p.add_argument("--code-iters", type=int, default=5)
    p.add_argument("--fix-retries", type=int, default=2, help="BK-Code fix attempts (with the error) per iteration")
    p.add_argument("--code-tokens", type=int, default=384)
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--jobs", type=int, default=2, help="train runs at a time")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS}")
    p.add_argument("--train-arms", default=None, help="arms to train (default: --arms)")
    p.add_argument("--not-run", action="append", default=[], metavar="ARM=REASON",
                   help="an arm that was not attempted, listed in the results with the reason (repeatable)")
    p.add_argument("--phase", default="all", choices=("all", "collect", "label", "train", "report"))
    p.add_argument("--notes", type=Path, default=None,
                   help="hand-written discussion appended to the .md (default: benchmarks/results/<stem>_notes.md)")
    p.add_argument("--out", type=Path, default=None, help="runs directory (default: runs/bench-bk[-<env>])")
    p.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args()
    task, collect_task, _ = ENV_DEFAULTS[args.env]
    args.task = args.task or task
    args.collect_task = args.collect_task or collect_task
    args.stem = "bk" if args.env == "babyai" else f"bk_{args.env}"     # results file names
    args.collect_label = (f"{args.collect_task}" if args.collect_task not in ("null", "none")
                          else "the env with every achievement rewarded (env.task=null)")
    args.env_label = {"babyai": "BabyAI-Text", "crafter": "Crafter", "craftax": "Craftax-Classic"}[args.env]
    args.out = args.out or Path("runs/bench-bk" if args.env == "babyai" else f"runs/bench-bk-{args.env}")
    args.notes = args.notes or Path(f"benchmarks/results/{args.stem}_notes.md")
    args.arms = [a for a in args.arms.split(",") if a]
    args.seed_list = list(range(args.seeds))
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.phase in ("all", "collect"):
        collect(args)
    labels: dict[str, dict] = {}
    if args.phase in ("all", "label", "train", "report"):
        for arm in (a for a in args.arms if a != "ppo"):
            manifest = args.out / f"labels-{arm}" / "bk" / "manifest.json"
            if args.phase != "report":
                labels[arm] = label_one(args, *arm.split("-"))
            elif manifest.exists():
                labels[arm] = json.loads(manifest.read_text())
            else:
                labels[arm] = {"failed": "labelling not finished within the compute budget"}
    if args.phase in ("all", "train"):
        todo = [a for a in (args.train_arms.split(",") if args.train_arms else args.arms)
                if not labels.get(a, {}).get("failed")]
        todo.sort(key=lambda a: not a.startswith("bk_goal"))      # slowest arm first
        jobs = [(a, s) for s in args.seed_list for a in todo]       # seed-major: whole seeds finish first
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda job: train_one(args, *job), jobs))
    if args.phase in ("all", "report"):
        report(args, labels, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
