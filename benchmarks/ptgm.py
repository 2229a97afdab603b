"""PTGM reduced-scale reproduction on BabyAI: PTGM vs flat PPO, BC-finetune, PTGM without KL and PTGM
with a random codebook, on a target task whose mission the task-agnostic data never contains.

Pipeline (each step a CLI verb into ``--out``): ``collect`` (BabyAI bot, ``method.collect.tasks``
round robin) → ``codebook`` (hindsight goals, PCA + KMeans) → ``pretrain`` (goal-conditioned BC low
level, goal priors) → ``train`` for every arm × seed.  Every arm has the same PPO settings, network
(``agent.image_encoder``, hidden 256), env, seeds and budget **in env steps**: the options arms count
the low-level steps (``OptionPPO``), and their rollout is ``128 / option_steps`` high-level steps per
env so every arm updates after the same number of env steps.  ``bc-finetune`` and the PTGM arms use
the same pretrained low level; ``ppo`` learns from scratch.

Writes ``<results>/ptgm.md``, ``ptgm.json`` (DESIGN.md format; value per seed = success AUC, the
mean success rate of finished training episodes over ``--bins`` equal env-step bins) and ``ptgm.png``.
Runs that exist are kept, so phases can be re-run (``--phase collect|pretrain|train|report``).

    nice -n 5 python benchmarks/ptgm.py --task BabyAI-UnlockPickup-v0 --seeds 3 --steps 100000

Craftax (``--env-id craftax``; 64 envs): the data come from an exploring PPO+RND agent trained on RND
only (``--collect-steps`` env steps; no task reward reaches the data; ``--data`` reuses a collect run), the
goals are ``--goal-space`` (``view_inventory``: the future semantic view + inventory, the first study;
``inventory_delta``: the inventory change to the future state + the events in between, "what happens next"),
and the arms train on Craftax-Classic's own reward (all 22 achievements; or one
achievement with ``--craftax-task``).  The options arms use asynchronous options per env
(``AsyncOptionPPO``).  Value per seed: achievements per episode of the training episodes, averaged over
``--bins`` env-step bins (success AUC with ``--craftax-task``); results ``<results>/ptgm_craftax.*``
(``ptgm_craftax_<goal space>.*`` for the other goal spaces, with a table of what each code means).

    nice -n 10 python benchmarks/ptgm.py --env-id craftax --seeds 3 --steps 200000 --arms ppo,ptgm,ptgm-no-kl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bk import bootstrap_ci, success_curve  # the shared reproduction helpers (benchmarks/bk.py)
from llmguide.methods.ptgm.goals import GOAL_SPACES

ARMS = ("ppo", "bc-finetune", "ptgm", "ptgm-no-kl", "ptgm-random-codes", "ptgm-kl-loss")
METHOD = {"ppo": "none", "bc-finetune": "ptgm_bc_finetune", "ptgm": "ptgm", "ptgm-no-kl": "ptgm_no_kl",
          "ptgm-random-codes": "ptgm_random_codes", "ptgm-kl-loss": "ptgm"}
OPTIONS_ARMS = ("ptgm", "ptgm-no-kl", "ptgm-random-codes", "ptgm-kl-loss")


def common(args: argparse.Namespace) -> list[str]:
    env = [f"env={args.family}"] + ([f"env.max_steps={args.max_steps}"] if args.max_steps else [])
    return [*env, f"num_envs={args.num_envs}", f"agent.image_encoder={args.image_encoder}",
            "agent.torch_threads=1", "progress=false", f"run.dir={args.out}", "run.overwrite=true"]


def collect_keys(args: argparse.Namespace) -> list[str]:
    if args.family == "babyai":
        return [f"method.collect.episodes={args.collect_episodes}"]
    # the exploring agent: RND only (task-agnostic), PPO rollout `--rollout` steps per env
    return [f"method.collect.agent_steps={args.collect_steps}", "method.collect.extrinsic_coef=0.0",
            "method.collect.intrinsic_coef=1.0", f"agent.num_steps={args.rollout}"]


def task_keys(args: argparse.Namespace) -> list[str]:
    if args.family == "babyai":
        return [f"env.task={args.task}"]
    return [f"env.task={args.craftax_task}"] if args.craftax_task else []


def ptgm_keys(args: argparse.Namespace) -> list[str]:
    keys = [f"method.codebook.k={args.k}", f"method.option_steps={args.option_steps}",
            f"method.lowlevel.epochs={args.ll_epochs}", f"method.prior.epochs={args.ll_epochs}"]
    return keys + ([f"method.goals.space={args.goal_space}"] if args.family != "babyai" else [])


def cli(verb: str, overrides: list[str], log: Path) -> tuple[int, float]:
    t = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call([sys.executable, "-m", "llmguide.cli", verb, *overrides], stdout=f, stderr=f)
    if code:
        tail = log.read_text().strip().splitlines()[-3:]
        print(f"{verb} failed (exit {code}): {' | '.join(tail)}", flush=True)
    return code, time.perf_counter() - t


def pretraining(args: argparse.Namespace) -> dict:
    """collect → codebook → pretrain (each skipped when its run exists); returns the pretrain manifest."""
    out = args.out
    steps = [("collect", "data", "collect_summary.json", collect_keys(args)),
             ("codebook", "codes", "ptgm/codebook.json", [f"method.data={out / 'data'}"]),
             ("pretrain", "pre", "ptgm/manifest.json", [f"method.data={out / 'data'}",
                                                        f"method.codebook.run={out / 'codes'}"])]
    for verb, name, marker, extra in steps:
        if (out / name / marker).exists():
            continue
        code, secs = cli(verb, [*common(args), "method=ptgm", *ptgm_keys(args), *extra, f"run.name={name}"],
                         out / f"{verb}.log")
        print(f"{verb}: exit {code}, {secs:.0f}s", flush=True)
        if code:
            raise SystemExit(f"{verb} failed; see {out / f'{verb}.log'}")
    return json.loads((out / "pre" / "ptgm" / "manifest.json").read_text())


def train_one(args: argparse.Namespace, arm: str, seed: int) -> None:
    name = run_name(args, arm, seed)
    if (args.out / name / "eval.json").exists():
        return
    method = [f"method={METHOD[arm]}"]
    if arm != "ppo":
        method += [f"method.pretrained={args.out / 'pre'}", *ptgm_keys(args)]
    if arm in ("ptgm", "ptgm-kl-loss"):
        method.append(f"method.kl.coef={args.kl_coef}")
    if arm == "ptgm-kl-loss":   # our variant: α·KL(π ‖ prior) in the PPO loss instead of PTGM's per-step reward
        method.append("method.kl.mode=loss")
    rollout = max(1, args.rollout // args.option_steps) if arm in OPTIONS_ARMS else args.rollout
    if arm in OPTIONS_ARMS:  # PTGM's high-level PPO has no entropy term: the KL to the prior regularises it
        method.append(f"agent.ent_coef={args.options_ent_coef}")
    code, secs = cli("train", [*common(args), *task_keys(args), *method, f"agent.num_steps={rollout}",
                               f"total_steps={args.steps}", f"seed={seed}", f"eval.episodes={args.eval_episodes}",
                               f"run.name={name}"], args.out / f"{name}.log")
    print(f"train {name}: exit {code}, {secs:.0f}s", flush=True)


def run_name(args: argparse.Namespace, arm: str, seed: int) -> str:
    return f"{args.task}-{arm}-s{seed}"


def _kl_stats(run: Path) -> dict:
    """KL to the prior (first / last update) and how much the high level moved: its entropy (first / last)
    and the median approx-KL of its PPO updates (the last updates run at an annealed lr near 0)."""
    from llmguide.core.rundir import read_metrics

    recs = read_metrics(run)
    kl = [r["charts/intrinsic_reward/kl_prior"] for r in recs if "charts/intrinsic_reward/kl_prior" in r]
    ups = [r for r in recs if "losses/approx_kl" in r]
    out = {"kl_first": round(float(kl[0]), 4), "kl_last": round(float(kl[-1]), 4)} if kl else {}
    if ups:
        out |= {"entropy_first": round(float(ups[0]["losses/entropy"]), 4),
                "entropy_last": round(float(ups[-1]["losses/entropy"]), 4),
                "approx_kl_median": float(f"{np.median([r['losses/approx_kl'] for r in ups]):.3g}"),
                "updates": len(ups)}
    return out


def cluster_table(args: argparse.Namespace, rows: int = 32) -> list[str]:
    """Markdown table of what each KMeans code means (codebook.json's per-cluster mean changes / events)."""
    path = args.out / "codes" / "ptgm" / "codebook.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    clusters = summary.get("clusters_kmeans")
    if not clusters:
        return []
    total = sum(c["size"] for c in clusters) or 1
    out = ["| code | share of goals | mean change to the goal state / events in between (top 4) |", "|---|---|---|"]
    for c in sorted(clusters, key=lambda c: -c["size"])[:rows]:
        top = ", ".join(f"{n} {v:+.2f}" for n, v in c["top"]) or "(nothing changes)"
        out.append(f"| {c['code']} | {c['size'] / total:.3f} | {top} |")
    return out


def achievements_curve(run: Path, steps: int, bins: int) -> np.ndarray:
    """Mean achievements per episode of the training episodes that finished in each of ``bins`` step bins."""
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "charts/achievements_per_episode" in r]
    edges = np.linspace(0, steps, bins + 1)
    s = np.array([r["step"] for r in recs], dtype=float)
    v = np.array([r["charts/achievements_per_episode"] for r in recs], dtype=float)
    s, v = s[s <= steps], v[s <= steps]
    idx = np.clip(np.digitize(s, edges) - 1, 0, bins - 1)
    out = np.array([v[idx == b].mean() if (idx == b).any() else np.nan for b in range(bins)])
    return np.where(np.isnan(out), np.nanmean(out) if np.isfinite(out).any() else 0.0, out)


def metric(args: argparse.Namespace) -> tuple[str, str, str]:
    """(name, eval.json key, plot label) of the value per seed."""
    if args.family == "craftax" and not args.craftax_task:
        return (f"achievements-per-episode AUC (mean over {args.bins} env-step bins of the training episodes' unlocked "
                "achievements)", "achievements_per_episode", "achievements / episode (training)")
    return (f"success AUC (mean training success rate over {args.bins} env-step bins)", "success_rate",
            "training success rate")


def report(args: argparse.Namespace, manifest: dict, seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps_axis = ((np.arange(args.bins) + 0.5) * args.steps / args.bins).tolist()
    arms, rows = {}, []
    for arm in args.arms:
        done = [(s, args.out / run_name(args, arm, s)) for s in args.seed_list
                if (args.out / run_name(args, arm, s) / "eval.json").exists()]
        if not done:
            arms[arm] = {"failed": "not trained within the compute budget", "seeds": [], "values": []}
            rows.append(f"| {arm} | not trained within the compute budget | | | |")
            continue
        fn = achievements_curve if metric(args)[1] == "achievements_per_episode" else success_curve
        curves = np.array([fn(r, args.steps, args.bins) for _, r in done])
        aucs = curves.mean(axis=1)
        lo, hi = bootstrap_ci(curves)
        alo, ahi = bootstrap_ci(aucs[:, None])
        evals = [json.loads((r / "eval.json").read_text()) for _, r in done]
        final = [float(e.get(metric(args)[1], 0.0)) for e in evals]
        arms[arm] = {"seeds": [s for s, _ in done], "values": aucs.round(4).tolist(),
                     "auc_ci95": [round(float(alo[0]), 4), round(float(ahi[0]), 4)],
                     "final_eval_success": final, "env_steps": [int(e["step"]) for e in evals],
                     "curve": {"steps": steps_axis, "mean": curves.mean(0).round(4).tolist(),
                               "ci95_low": np.round(lo, 4).tolist(), "ci95_high": np.round(hi, 4).tolist()}}
        if arm in OPTIONS_ARMS:
            arms[arm]["kl_to_prior"] = [_kl_stats(r) for _, r in done]
        rows.append(f"| {arm} | {aucs.mean():.3f} [{alo[0]:.3f}, {ahi[0]:.3f}] | {np.mean(final):.2f} | {len(done)} | "
                    f"{', '.join(f'{a:.3f}' for a in aucs)} |")
    ll = manifest.get("lowlevel", {}).get("history", [{}])[-1]
    pri = {k: manifest.get(f"prior_{k}", {}).get("history", [{}])[-1].get("val_acc") for k in ("kmeans", "random")}
    task = args.task if args.family == "babyai" else f"craftax ({args.craftax_task or 'all achievements'})"
    result = {"task": task, "budget_steps": args.steps, "metric": metric(args)[0], "higher_is_better": True,
              "arms": arms, "seeds": args.seed_list, "reduced_budget": bool(args.reduced_budget),
              "pretraining": {"collect_episodes": args.collect_episodes if args.family == "babyai" else None,
                              "collect_agent_steps": args.collect_steps if args.family != "babyai" else None,
                              "samples": manifest.get("samples"),
                              "k": args.k, "option_steps": args.option_steps, "kl_coef": args.kl_coef,
                              "options_ent_coef": args.options_ent_coef,
                              "lowlevel_last_epoch": ll, "prior_val_acc": pri,
                              "goal_space": args.goal_space if args.family != "babyai" else "future view"},
              "wall_clock_seconds": round(seconds)}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, a in arms.items():
        if "curve" in a:
            c = a["curve"]
            ax.plot(c["steps"], c["mean"], label=arm)
            ax.fill_between(c["steps"], c["ci95_low"], c["ci95_high"], alpha=0.15)
    ax.set_xlabel("env steps (low-level steps for the options arms)")
    ax.set_ylabel(f"{metric(args)[2]} (95% bootstrap CI)")
    ax.set_title(f"PTGM vs baselines, {task}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.results / f"{args.name}.png", dpi=100)
    value = "achievements/episode AUC" if metric(args)[1] == "achievements_per_episode" else "success AUC"
    final_name = "achievements/episode" if metric(args)[1] == "achievements_per_episode" else "success"
    table = [f"| arm | {value}, mean [95% CI] | final greedy eval {final_name} | seeds | AUC per seed |",
             "|---|---|---|---|---|", *rows]
    if args.family == "babyai":
        data = (f"{args.collect_episodes} BabyAI-bot episodes over the `method.collect.tasks` missions "
                f"({manifest.get('samples')} steps)")
    else:
        goals = {"view_inventory": "future one-hot view + inventory counts",
                 "inventory_delta": "inventory_delta: the inventory change from the current to the goal state (16 "
                                    "items incl. vitals) + counts of the events in between (22 achievements, take "
                                    "damage, die), sign·log(1+|x|) compressed",
                 "inventory_delta_view": "inventory_delta + the goal view's 19 class fractions"}[args.goal_space]
        data = (f"the finished episodes of an exploring PPO agent trained on RND only for {args.collect_steps} env "
                f"steps ({manifest.get('samples')} steps kept; no task reward); goals = {goals}, hindsight 5-30 steps "
                "ahead; options asynchronous per env (AsyncOptionPPO, γ per option)")
    md = [f"# PTGM vs baselines on {task}", "",
          f"Budget: {args.steps} env steps per run (options arms count low-level steps), seeds {args.seed_list}, "
          f"{args.num_envs} envs, PPO defaults (agent=ppo, image_encoder={args.image_encoder}); rollout {args.rollout} "
          f"env steps per env (options arms: {max(1, args.rollout // args.option_steps)} options of L={args.option_steps} "
          "per env). "
          f"Data: {data}; codebook k={args.k} (PCA 32 + scikit-learn KMeans); KL coef "
          f"{args.kl_coef}, direction KL(π_high ‖ π_prior); high-level entropy coefficient {args.options_ent_coef} "
          f"(PTGM's high level has no entropy term; the flat arms keep PPO's). Low-level BC last epoch: {json.dumps(ll)}; prior val "
          f"accuracy {json.dumps(pri)}. Value per seed: {metric(args)[0]}; 95% CIs: percentile bootstrap over seeds. "
          "Final eval: "
          f"{args.eval_episodes} greedy episodes. Wall clock {seconds / 60:.0f} min.", "", *table, "",
          f"![success]({args.name}.png)", ""]
    codes = cluster_table(args) if args.family != "babyai" else []
    if codes:
        md += ["## What the codes mean (KMeans codebook; mean over the goals of each cluster)", "", *codes, ""]
    (args.results / f"{args.name}.md").write_text("\n".join(md))
    print("\n".join(md))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", "--env-id", dest="task", default="BabyAI-UnlockPickup-v0")
    p.add_argument("--steps", type=int, default=100_000, help="env steps per run (low-level steps for options arms)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--num-envs", type=int, default=None, help="default 8 (BabyAI), 64 (craftax)")
    p.add_argument("--collect-episodes", type=int, default=2400, help="BabyAI: bot episodes")
    p.add_argument("--collect-steps", type=int, default=200_000, help="craftax: env steps of the exploring agent")
    p.add_argument("--craftax-task", default=None, help="craftax: one achievement as the task (default: all 22)")
    p.add_argument("--max-steps", type=int, default=None, help="env.max_steps override (default: the env's)")
    p.add_argument("--rollout", type=int, default=None,
                   help="env steps per env per PPO update (default 128 BabyAI, 32 craftax); options arms: / L")
    p.add_argument("--goal-space", default="view_inventory",
                   choices=GOAL_SPACES,
                   help="craftax: method.goals.space (view_inventory: future view + inventory, the first study; "
                        "inventory_delta: inventory change + events to the goal state)")
    p.add_argument("--data", type=Path, default=None,
                   help="an existing collect run to reuse (linked as <out>/data; the collect step is skipped)")
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--option-steps", type=int, default=8)
    p.add_argument("--kl-coef", type=float, default=0.05)
    p.add_argument("--options-ent-coef", type=float, default=0.0,
                   help="entropy coefficient of the high-level PPO (options arms); PTGM's has none (0)")
    p.add_argument("--ll-epochs", type=int, default=8, help="BC epochs of the low level and the priors")
    p.add_argument("--image-encoder", default="flat", choices=("flat", "cnn"))
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS}")
    p.add_argument("--train-seeds", default=None,
                   help="comma-separated subset of the seeds to train in this process (e.g. a 2nd process on seed 2); "
                        "the report covers all --seeds")
    p.add_argument("--reduced-budget", action="store_true",
                   help="flag the results as run at a budget below the one intended (DESIGN.md reduced_budget)")
    p.add_argument("--phase", default="all", choices=("all", "pretrain", "train", "report"))
    p.add_argument("--out", type=Path, default=Path("runs/bench-ptgm"))
    p.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--name", default=None, help="results file stem: <results>/<name>.{md,json,png} "
                                                 "(default ptgm; ptgm_craftax on craftax)")
    args = p.parse_args()
    args.family = "craftax" if args.task.lower().startswith("craftax") else "babyai"
    craftax = args.family == "craftax"
    args.num_envs = args.num_envs or (64 if craftax else 8)
    args.rollout = args.rollout or (32 if craftax else 128)
    space = "" if args.goal_space == "view_inventory" else f"_{args.goal_space}"
    args.name = args.name or (f"ptgm_craftax{space}" if craftax else "ptgm")
    if craftax and args.out == Path("runs/bench-ptgm"):
        args.out = Path(f"runs/bench-ptgm-craftax{space.replace('_', '-')}")
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = set(args.arms) - set(ARMS)
    if unknown:
        p.error(f"unknown arms {sorted(unknown)}; choose from {ARMS}")
    args.seed_list = list(range(args.seeds))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.data is not None and not (args.out / "data").exists():
        (args.out / "data").symlink_to(args.data.resolve(), target_is_directory=True)
    t0 = time.perf_counter()
    manifest = pretraining(args) if args.phase != "report" else json.loads(
        (args.out / "pre" / "ptgm" / "manifest.json").read_text())
    if args.phase in ("all", "train"):
        train = [int(x) for x in args.train_seeds.split(",")] if args.train_seeds else args.seed_list
        for seed in train:                    # seed-major: whole seeds finish first
            for arm in args.arms:
                train_one(args, arm, seed)
    if args.phase in ("all", "report"):
        report(args, manifest, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
