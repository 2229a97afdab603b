"""ONI and Motif reduced-scale reproduction, side by side with their controls, on any NetHack/MiniHack task.

Arms (every one: PPO with the reference-style policy = glyph-crop CNN + blstats MLP + message-byte MLP
→ GRU, the same env, budget and PPO config; the env reward clipped at ±10 and multiplied by the reference's
extrinsic coefficient for the task: 0.1 on ``*Score*``, 10 on the sparse tasks, ``--extrinsic-coef`` to
override; on NetHack the reference's 28-action ``extended`` set):

- ``none``: extrinsic reward only (the control);
- ``oni_retrieval-oracle`` / ``oni_classification-oracle`` / ``oni_ranking-oracle``: ONI with the
  ground-truth labeller (``llm=oracle``: a message is helpful when it reports progress towards the task's
  goal, from the env's message events; pair preference by that progress), online and asynchronous as with
  an LM; every labeller (oracle or LM) is prompted with the task's goal (``nethack.task_goal``: on
  NetHackScore the reference's "maximize the score ... killing monsters, collecting gold or going down the
  stairs"; MiniHack: none, any progress counts);
- ``oni_retrieval-embedded``: ONI-Retrieval labelled by the embedded LM (Gemma 3 270M, score mode);
  its labels are compared with the oracle's (agreement, confusion);
- ``motif-oracle``: Motif, offline: messages of an RND + extrinsic PPO agent (``--collect-steps``),
  pairs sampled over its observations, oracle preferences, Bradley-Terry reward model, then PPO;
- ``ellm_bow``: the ONI paper's LM-free baseline (bag-of-words cosine to the goal sentence).

Value per seed: success rate (``--metric``; return on ``*Score*`` tasks, which have no success) of the
training episodes that end in the last 10% of the run's budget. Curves: success rate and return vs env
steps, mean and 95% percentile-bootstrap CI over seeds. Per arm it also reports what reached the advantage
(per-rollout extrinsic and intrinsic reward, share of non-zero r_int) and ONI's labelled fraction.
Runs one process at a time (start several with disjoint ``--arms`` / ``--train-seeds`` and one ``--out``
with ``--phase train``, then ``--phase report``); ``--deadline-min`` stops starting runs that would not finish in time, and every arm's budget
and seeds are written as run.

    nice -n 10 .venv/bin/python benchmarks/oni.py --env-id NetHackScore-v0 --seeds 3 --steps 300000
    nice -n 10 .venv/bin/python benchmarks/oni.py --env-id MiniHack-KeyRoom-Fixed-S5-v0 --seeds 3 --steps 300000
    .venv/bin/python benchmarks/oni.py --phase nethack --nethack-steps 20000   # NetHackScore-v0, same recipe

Writes ``<results>/oni.md``, ``oni.json`` (DESIGN.md format) and ``oni.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bk import bootstrap_ci, cli  # noqa: E402  (the reproduction scripts' shared helpers)
from llmguide.core.rundir import safe_torch_load

ARMS = {
    "none": ["method=none"],
    "oni_retrieval-oracle": ["method=oni_retrieval", "llm=oracle"],
    "oni_retrieval-embedded": ["method=oni_retrieval", "llm=embedded"],
    "oni_classification-oracle": ["method=oni_classification", "llm=oracle"],
    "oni_ranking-oracle": ["method=oni_ranking", "llm=oracle"],
    "motif-oracle": ["method=motif", "llm=oracle"],
    "ellm_bow": ["method=ellm_bow"],
}


def extrinsic_coef(env_id: str) -> float:
    """The reference's rule (ONI README): extrinsic coefficient 0.1 on NetHackScore, 10 on the sparse tasks."""
    return 0.1 if "Score" in env_id else 10.0


def step_penalty(args: argparse.Namespace, env_id: str) -> float | None:
    """The reward of a "frozen" step for every arm.  ``auto``: the reference's rule.  Its Score task keeps
    NLE's −0.01 (tasks_nle.py ``NetHackScore``); its sparse tasks reward success only (``NetHackStaircase``
    and ``NetHackOracle`` override ``_reward_fn`` with 50 on success, else 0: no step penalty), so a sparse
    task here gets penalty 0 too.  None: the task's own."""
    if args.step_penalty == "auto":
        return None if "Score" in env_id else 0.0
    return None if args.step_penalty == "task" else float(args.step_penalty)


def common(args: argparse.Namespace, env_id: str) -> list[str]:
    family = "nethack" if env_id.startswith("NetHack") else "minihack"
    coef = args.extrinsic_coef if args.extrinsic_coef is not None else extrinsic_coef(env_id)
    nle = [f"env.action_set={args.actions}"] if family == "nethack" else []  # MiniHack tasks keep their own actions
    penalty = step_penalty(args, env_id)
    nle += [f"env.penalty_step={penalty}"] if penalty is not None else []
    return [f"env={family}", f"env.id={env_id}", "env.message_obs=true", "env.reward_clip=10.0", *nle,
            f"method.extrinsic_coef={coef}",
            f"num_envs={args.num_envs}", "agent.recurrent=gru", f"agent.hidden={args.hidden}",
            f"agent.num_steps={args.num_steps}", f"agent.update_epochs={args.update_epochs}",
            "agent.torch_threads=1", "progress=false", "eval.episodes=0", f"run.dir={args.out}",
            f"log_every={args.num_envs * args.num_steps}"]


def motif_data(args: argparse.Namespace, env_id: str) -> tuple[Path, dict]:
    """Collect (RND agent) → oracle preferences, once per env; returns the data dir and its summary."""
    folder = args.out / f"motif-data-{env_id}"
    stats = folder / "label_stats.json"
    if not stats.exists():
        base = [*common(args, env_id), "method=motif", "llm=oracle", f"method.data_dir={folder}", "seed=0",
                "run.name=motif-collect", "run.overwrite=true"]
        code, secs = cli("collect", [*base, f"method.collect_steps={args.collect_steps}",
                                     f"method.num_pairs={args.num_pairs}"], args.out / "motif-collect.log")
        print(f"motif collect: exit {code}, {secs:.0f}s", flush=True)
        code2, secs2 = cli("label", base, args.out / "motif-label.log")
        print(f"motif label: exit {code2}, {secs2:.0f}s", flush=True)
        if code or code2 or not stats.exists():
            return folder, {"failed": f"motif collect/label exit {code}/{code2} (see {args.out}/motif-*.log)"}
        (folder / "seconds.json").write_text(json.dumps({"collect": secs, "label": secs2}))
    summary = json.loads(stats.read_text())
    for extra, prefix in (("seconds.json", "seconds_"), ("collect_stats.json", "collect_")):
        if (folder / extra).exists():
            summary.update({prefix + k: v for k, v in json.loads((folder / extra).read_text()).items()})
    summary["collect_steps"] = args.collect_steps
    return folder, summary


def train_one(args: argparse.Namespace, arm: str, seed: int, steps: int, env_id: str, extra: list[str]) -> float:
    name = f"{arm}-s{seed}"
    if (args.out / name / "eval.json").exists():
        return 0.0
    code, secs = cli("train", [*common(args, env_id), *ARMS[arm], *extra, f"total_steps={steps}", f"seed={seed}",
                               f"run.name={name}", "run.overwrite=true"], args.out / f"{name}.log")
    print(f"train {name}: exit {code}, {secs:.0f}s", flush=True)
    return secs


def episodes(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "charts/episodic_return" in r]
    return (np.array([r["step"] for r in recs], float), np.array([r.get("charts/success", 0.0) for r in recs], float),
            np.array([r["charts/episodic_return"] for r in recs], float))


def last_lm(run: Path) -> dict:
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "lm/annot_requests" in r or "lm/calls" in r]
    keys = ("lm/annot_requests", "lm/annot_labelled", "lm/annot_known", "lm/annot_positive_fraction",
            "lm/annot_duplicate_requests", "lm/annot_cache_reused", "lm/annot_fallbacks", "lm/annot_unparseable",
            "lm/latency_p50", "lm/latency_p95", "lm/calls")
    return {k.removeprefix("lm/"): recs[-1][k] for k in keys if recs and k in recs[-1]}


def labelled_messages(run: Path) -> dict[str, float | None]:
    """The annotator's labels in the run's final checkpoint (message → label)."""

    ckpt = run / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        return {}
    state = safe_torch_load(ckpt)["agent"].get("reward_modules", [])
    out: dict[str, float | None] = {}
    for entry in state:
        labels = entry.get("state", {}).get("annotator", {}).get("labels", {})
        out.update({m: y for m, y in labels.items() if isinstance(m, str)})
    return out


def agreement(labels: dict[str, float | None], goal: str | None = None) -> dict:
    """Embedded-LM labels vs the oracle's ground truth (towards the same ``goal``) on the same messages."""
    from llmguide.envs.nethack.oracle import NetHackOracle

    oracle = NetHackOracle()
    pairs = [(y > 0.5, oracle.helpful(m, goal)) for m, y in labels.items() if y is not None]
    if not pairs:
        return {"messages": 0}
    lm, gt = np.array(pairs).T
    return {"messages": len(pairs), "agreement": round(float((lm == gt).mean()), 4),
            "lm_yes_oracle_yes": int((lm & gt).sum()), "lm_yes_oracle_no": int((lm & ~gt).sum()),
            "lm_no_oracle_yes": int((~lm & gt).sum()), "lm_no_oracle_no": int((~lm & ~gt).sum()),
            "oracle_helpful": sorted(m for m in labels if oracle.helpful(m, goal))}


def run_seconds(run: Path) -> float:
    """Wall seconds of one run: its config written → its eval.json written."""
    return (run / "eval.json").stat().st_mtime - (run / "config.yaml").stat().st_mtime


def metric_kind(args: argparse.Namespace) -> str:
    """``success`` or ``return``; auto: return on *Score* tasks (they have no success), else success."""
    if args.metric != "auto":
        return args.metric
    return "return" if "Score" in args.env_id else "success"


def random_policy(args: argparse.Namespace, episodes: int = 100, seed: int = 0) -> dict[str, float]:
    """Success rate and episodic return (the arms' ``charts/episodic_return``: the env reward after
    scale and clip, before the extrinsic coefficient) of a uniformly random policy: a reference point."""
    from llmguide.envs import make_env

    family = "nethack" if args.env_id.startswith("NetHack") else "minihack"
    env = make_env({"name": family, "id": args.env_id, "reward_clip": 10.0, "penalty_step": step_penalty(args, args.env_id),
                    **({"action_set": args.actions} if family == "nethack" else {})}, seed)
    rng = np.random.default_rng(seed)
    wins, rets = 0, []
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        done, info, ret = False, {}, 0.0
        while not done:
            _, r, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
            ret += float(r)
            done = term or trunc
        wins += bool(info.get("success"))
        rets.append(ret)
    env.close()
    return {"episodes": episodes, "success": wins / episodes, "return": round(float(np.mean(rets)), 4)}


def diagnostics(run: Path, steps: int) -> dict[str, float]:
    """Per-rollout means of what reached the advantage: the intrinsic reward (all modules, after the
    coefficient), the ONI module's raw r_int, the share of transitions with r_int != 0, and the labelled
    fraction (share of non-empty message occurrences whose label had arrived when r_int was computed)."""
    from llmguide.core.rundir import read_metrics

    recs = [r for r in read_metrics(run) if "charts/intrinsic_reward" in r]
    out: dict[str, float] = {}
    if not recs:
        return out
    st = np.array([r["step"] for r in recs], float)
    wanted = {"intrinsic_reward": "charts/intrinsic_reward", "extrinsic_reward": "charts/extrinsic_reward",
              "r_int_nonzero": "/r_int_nonzero", "labelled_fraction": "/labelled_fraction",
              "labelled_fraction_unique": "/labelled_fraction_unique"}
    for name, key in wanted.items():
        col = [next((v for k, v in r.items() if k == key or (key.startswith("/") and k.startswith("reward/")
                                                                  and k.endswith(key))), np.nan) for r in recs]
        col = np.array(col, float)
        if np.isfinite(col).any():
            out[f"{name}_mean"] = round(float(np.nanmean(col)), 6)
            first, last = col[st <= 0.1 * steps], col[st > 0.9 * steps]
            if np.isfinite(first).any():
                out[f"{name}_first10pct"] = round(float(np.nanmean(first)), 6)
            if np.isfinite(last).any():
                out[f"{name}_last10pct"] = round(float(np.nanmean(last)), 6)
    return out


def summarise(args: argparse.Namespace, arm: str, steps: int, grid: np.ndarray) -> dict | None:
    from llmguide.report import binned_curve

    runs = [(s, args.out / f"{arm}-s{s}") for s in args.seed_list]
    done = [(s, r) for s, r in runs if (r / "eval.json").exists()]
    if not done:
        return None
    kind = metric_kind(args)
    succ, rets, values, values30, lms, diags = [], [], [], [], [], []
    for _, run in done:
        st, su, re = episodes(run)
        succ.append(binned_curve(st, su, grid))
        rets.append(binned_curve(st, re, grid))
        metric = su if kind == "success" else re
        late, late30 = metric[st > 0.9 * steps], metric[st > 0.7 * steps]
        values.append(float(late.mean()) if late.size else float("nan"))
        values30.append((round(float(late30.mean()), 4) if late30.size else float("nan"), int(late.size),
                         int(late30.size)))
        lms.append(last_lm(run))
        diags.append(diagnostics(run, steps))
    succ_c, ret_c = np.nan_to_num(np.array(succ)), np.nan_to_num(np.array(rets))
    lo, hi = bootstrap_ci(succ_c)
    rlo, rhi = bootstrap_ci(ret_c)
    vals = np.array(values)
    vlo, vhi = bootstrap_ci(np.nan_to_num(vals)[:, None])
    v30 = np.array([v for v, _, _ in values30])
    v30lo, v30hi = bootstrap_ci(np.nan_to_num(v30)[:, None])
    success_curve = {"steps": grid.tolist(), "mean": succ_c.mean(0).round(4).tolist(),
                     "ci95_low": np.round(lo, 4).tolist(), "ci95_high": np.round(hi, 4).tolist()}
    return_curve = {"steps": grid.tolist(), "mean": ret_c.mean(0).round(4).tolist(),
                    "ci95_low": np.round(rlo, 4).tolist(), "ci95_high": np.round(rhi, 4).tolist()}
    out = {"seeds": [s for s, _ in done], "values": [round(v, 4) for v in values], "budget_steps": steps,
           "value_ci95": [round(float(vlo[0]), 4), round(float(vhi[0]), 4)],
           "episodes_last10pct": [n for _, n, _ in values30],
           "values_last30pct": [v for v, _, _ in values30], "episodes_last30pct": [n for _, _, n in values30],
           "value_last30pct_ci95": [round(float(v30lo[0]), 4), round(float(v30hi[0]), 4)],
           "curve": success_curve if kind == "success" else return_curve,
           "success_curve": success_curve, "return_curve": return_curve,
           "final_return": [round(float(r[-1]), 4) for r in ret_c], "diagnostics": diags}
    if any(lms):
        out["lm"] = lms
    return out


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None or not np.isfinite(x) else format(x, spec)


def report(args: argparse.Namespace, motif: dict, seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmguide.envs.nethack.oracle import task_goal

    kind = metric_kind(args)
    coef = args.extrinsic_coef if args.extrinsic_coef is not None else extrinsic_coef(args.env_id)
    arms: dict[str, dict] = {}
    rows, diag_rows = [], []
    for arm in args.arms:
        steps = args.arm_steps.get(arm, args.steps)
        grid = np.linspace(steps / args.bins, steps, args.bins)
        s = summarise(args, arm, steps, grid)
        if s is None:
            arms[arm] = {"failed": "not run within the compute budget", "seeds": [], "values": [],
                         "budget_steps": steps}
            rows.append(f"| {arm} | {steps} | not run within the compute budget | | | | | |")
            continue
        if arm == "motif-oracle":
            s["dataset"] = motif
        if arm == "oni_retrieval-embedded":
            labels: dict[str, float | None] = {}
            for seed in s["seeds"]:
                labels.update(labelled_messages(args.out / f"{arm}-s{seed}"))
            s["label_agreement_vs_oracle"] = agreement(labels, task_goal(args.env_id))
        if arm.startswith("oni_") and arm != "oni_ranking-oracle":  # labels: how many distinct messages were helpful
            s["labels_helpful"] = [sum(1 for y in labelled_messages(args.out / f"{arm}-s{seed}").values()
                                       if y is not None and y > 0.5) for seed in s["seeds"]]
        arms[arm] = s
        if steps < args.target_steps:  # this arm alone below the study's budget (--arm-steps)
            s["reduced_budget"] = {"budget_steps": steps, "target_steps": args.target_steps,
                                   "reason": args.reduced_reason or "compute time"}
        s["wall_seconds"] = [round(run_seconds(args.out / f"{arm}-s{seed}")) for seed in s["seeds"]]
        lm = s.get("lm", [{}])
        helpful = s.get("labels_helpful") or [None] * len(lm)
        labelled = "/".join(f"{x.get('annot_known', 0):.0f} ({x.get('annot_requests', 0):.0f}"
                            + (f", {h} yes)" if h is not None else ")") for x, h in zip(lm, helpful, strict=False)) \
            if lm and lm[0] else "–"
        lat = "/".join(f"{1e3 * x['latency_p50']:.1f}" if x.get("calls") else "–" for x in lm) if lm and lm[0] else "–"
        v = np.array(s["values"])
        budget = f"{steps}" + (" (reduced)" if steps < max(args.steps, args.target_steps) else "")
        rows.append(f"| {arm} | {budget} | {np.nanmean(v):.3f} [{s['value_ci95'][0]:.3f}, {s['value_ci95'][1]:.3f}] | "
                    f"{', '.join(f'{x:.3f}' for x in v)} | {', '.join(str(n) for n in s['episodes_last10pct'])} | "
                    f"{np.nanmean(s['values_last30pct']):.3f} [{s['value_last30pct_ci95'][0]:.3f}, "
                    f"{s['value_last30pct_ci95'][1]:.3f}] | {labelled} | {lat} |")
        d = s["diagnostics"]

        def mean_of(key: str, d: list = d) -> float | None:
            xs = [x[key] for x in d if key in x]
            return float(np.mean(xs)) if xs else None
        ext = [mean_of(f"extrinsic_reward_{w}") for w in ("first10pct", "last10pct")]
        ext_s = " / ".join(_fmt(coef * x if x is not None else None, "+.4f") for x in ext)
        diag_rows.append(f"| {arm} | {ext_s} | {_fmt(mean_of('intrinsic_reward_first10pct'), '.4f')} | "
                         f"{_fmt(mean_of('intrinsic_reward_last10pct'), '.4f')} | "
                         f"{_fmt(mean_of('r_int_nonzero_first10pct'), '.4f')} | "
                         f"{_fmt(mean_of('r_int_nonzero_last10pct'), '.4f')} | "
                         f"{_fmt(mean_of('labelled_fraction_mean'))} | {_fmt(mean_of('labelled_fraction_unique_mean'))} |")
    rand = json.loads(args.random_from.read_text())["random_policy"] if args.random_from else \
        random_policy(args, episodes=100)
    seconds = sum(sum(a.get("wall_seconds", [])) for a in arms.values()) + motif.get("seconds_collect", 0) + \
        motif.get("seconds_label", 0)
    metric = ("training success rate" if kind == "success" else "training episodic return (env reward after "
              "scale 1 and clip ±10, before the extrinsic coefficient)") + \
        " over the episodes that end in the last 10% of the budget"
    result = {"task": args.env_id, "budget_steps": args.steps, "metric": metric, "higher_is_better": True,
              "arms": arms,
              "setup": {"num_envs": args.num_envs, "rollout": args.num_steps, "update_epochs": args.update_epochs,
                        "hidden": args.hidden, "policy": "crop CNN + blstats MLP + message MLP -> GRU",
                        "extrinsic_coef": coef, "reward_clip": 10.0, "reward_scale": 1.0,
                        "penalty_step": step_penalty(args, args.env_id),  # None: the task's own (-0.01)
                        "action_set": args.actions if args.env_id.startswith("NetHack") else "task",
                        "intrinsic": "ONI 0.4, Motif 0.1, BoW 0.4; / n_episode(message)^3",
                        "labelling_goal": task_goal(args.env_id),
                        "oracle": "helpful = the message reports an event serving the goal "
                                  "(llmguide.envs.nethack.env.goal_events), prompted through the *_goal templates"},
              "random_policy": rand, "wall_clock_seconds": round(seconds)}
    if args.steps < args.target_steps:
        result["reduced_budget"] = {"target_steps": args.target_steps, "budget_steps": args.steps,
                                    "reason": args.reduced_reason or "compute budget"}
    fractions = [x.get("labelled_fraction_mean") for a in arms.values() if isinstance(a, dict)
                 for x in a.get("diagnostics", []) if "labelled_fraction_mean" in x]
    result["oni_labelled_fraction"] = {
        "definition": "share of the non-empty message occurrences of a rollout whose LM label had arrived when "
                      "their intrinsic reward was computed (per-rollout mean over the run, mean over seeds)",
        **{arm: round(float(np.mean([x["labelled_fraction_mean"] for x in a.get("diagnostics", [])
                                     if "labelled_fraction_mean" in x])), 4)
           for arm, a in arms.items() if any("labelled_fraction_mean" in x for x in a.get("diagnostics", []))}}
    for run in args.labelled_fraction_run:  # e.g. a cold-cache embedded run on another task
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(run / "config.yaml")
        d = diagnostics(run, int(cfg.total_steps))
        if "labelled_fraction_mean" in d:
            fractions.append(d["labelled_fraction_mean"])
            result["oni_labelled_fraction"][f"{cfg.env.id}:{run.name}"] = {
                "steps": int(cfg.total_steps), "llm": str(cfg.llm.backend), "method": str(cfg.method.name),
                "labelled_fraction": d["labelled_fraction_mean"],
                "labelled_fraction_first10pct": d.get("labelled_fraction_first10pct"),
                "labelled_fraction_unique": d.get("labelled_fraction_unique_mean")}
    if not fractions:
        result.pop("oni_labelled_fraction")
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "oni.json").write_text(json.dumps(result, indent=1) + "\n")
    keys = ("success_curve", "return_curve") if kind == "success" else ("return_curve",)  # Score: no success
    fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4.5), squeeze=False)
    axes = list(axes[0])
    for arm, a in arms.items():
        for ax, key in zip(axes, keys, strict=True):
            if key in a:
                c = a[key]
                ax.plot(c["steps"], c["mean"], label=arm)
                ax.fill_between(c["steps"], c["ci95_low"], c["ci95_high"], alpha=0.15)
    for ax, key in zip(axes, keys, strict=True):
        ax.set_ylabel("training success rate (95% bootstrap CI over seeds)" if key == "success_curve"
                      else "training episodic return (95% bootstrap CI over seeds)")
    for ax in axes:
        ax.set_xlabel("env steps")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"ONI / Motif vs extrinsic-only PPO, {args.env_id}")
    fig.tight_layout()
    fig.savefig(args.results / "oni.png", dpi=100)
    emb = arms.get("oni_retrieval-embedded", {}).get("label_agreement_vs_oracle")
    action_set = f"{args.actions} action set, " if args.env_id.startswith("NetHack") else ""
    value_name = "success" if kind == "success" else "return"
    penalty = step_penalty(args, args.env_id)
    penalty_text = ("the task's own reward for a 'frozen' step (NLE/MiniHack: −0.01), as the reference's Score task."
                    if penalty is None else f"reward {penalty:g} for a 'frozen' step instead of NLE/MiniHack's −0.01 "
                    "(the reference's sparse tasks reward success only).")
    md = [f"# ONI and Motif vs extrinsic-only PPO on {args.env_id}", "",
          f"Seeds {args.seed_list}; {args.num_envs} envs × {args.num_steps}-step rollouts, PPO {args.update_epochs} "
          f"epochs, GRU {args.hidden}; policy = crop CNN + blstats MLP + message-byte MLP → GRU for every arm; "
          f"{action_set}env reward clipped at ±10 and × {coef} (the reference's extrinsic coefficient for this "
          f"task) for every arm; {penalty_text} Value per seed: {metric}; 95% CI: percentile bootstrap over seeds. Wall clock "
          f"{seconds / 60:.0f} min of runs (at most two at a time on a shared 2-core CPU). A uniformly random "
          f"policy: success {rand['success']:.3f}, return {rand['return']:+.3f} over {rand['episodes']} episodes "
          "(a reference, not an arm).", "",
          f"Labelling goal of every LM/oracle arm (`nethack.task_goal`, the reference's words): "
          f"\"{task_goal(args.env_id) or 'none (any progress)'}\"; the oracle calls a message helpful when it "
          "reports an event serving that goal (`nethack.goal_events`).", "",
          *([f"**reduced_budget**: {args.steps} steps per run instead of {args.target_steps} "
             f"({result['reduced_budget']['reason']}); every arm at the same budget.", ""]
            if "reduced_budget" in result else []),
          f"| arm | budget (steps) | {value_name}, last 10% [95% CI] | per seed | episodes in it, per seed | "
          f"{value_name}, last 30% [95% CI] | labels known (LM requests, labelled helpful), per seed | LM latency p50 ms |",
          "|---|---|---|---|---|---|---|---|", *rows, "",
          "![curves](oni.png)", "",
          "What reached the advantage (per-rollout means per transition, mean over seeds): the extrinsic reward "
          "after its coefficient, the intrinsic reward after its coefficient "
          "and the count division, the share of transitions with a non-zero intrinsic reward, and the labelled "
          "fraction (share of non-empty message occurrences whose label had arrived when the reward was computed; "
          "per occurrence and per distinct message).", "",
          "| arm | extrinsic × coef, first / last 10% | r_int first 10% | r_int last 10% | nonzero first 10% | nonzero last 10% | labelled fraction | "
          "labelled fraction (distinct) |", "|---|---|---|---|---|---|---|---|", *diag_rows, ""]
    if motif:
        md += [f"Motif dataset: {json.dumps({k: v for k, v in motif.items() if not isinstance(v, dict)})}", ""]
    if emb:
        md += [f"Embedded-LM labels vs oracle on the {emb.get('messages', 0)} messages it labelled: agreement "
               f"{emb.get('agreement', float('nan')):.2f} (LM yes/oracle yes {emb.get('lm_yes_oracle_yes')}, "
               f"LM yes/oracle no {emb.get('lm_yes_oracle_no')}, LM no/oracle yes {emb.get('lm_no_oracle_yes')}, "
               f"LM no/oracle no {emb.get('lm_no_oracle_no')}).", ""]
    if args.notes and args.notes.exists():
        md += [args.notes.read_text()]
    (args.results / "oni.md").write_text("\n".join(md))
    print("\n".join(md), flush=True)


def nethack(args: argparse.Namespace) -> None:
    """NetHackScore-v0 at a reduced budget through the same recipe (extrinsic 0.1, as ONI on Score)."""
    env_id = "NetHackScore-v0"
    out: dict = {"task": env_id, "budget_steps": args.nethack_steps, "arms": {}}
    for arm in ("none", "oni_retrieval-oracle"):
        method = ARMS[arm]  # common(): extrinsic 0.1 on Score, as the reference
        name = f"nethack-{arm}-s0"
        if not (args.out / name / "eval.json").exists():
            code, secs = cli("train", [*common(args, env_id), *method, f"total_steps={args.nethack_steps}",
                                       "seed=0", f"run.name={name}", "run.overwrite=true"], args.out / f"{name}.log")
            print(f"train {name}: exit {code}, {secs:.0f}s", flush=True)
        if (args.out / name / "eval.json").exists():
            _, _, rets = episodes(args.out / name)
            out["arms"][arm] = {"episodes": int(rets.size), "mean_return": float(rets.mean()) if rets.size else 0.0,
                                "lm": last_lm(args.out / name)}
    path = args.results / "oni.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    result["nethack"] = out
    args.results.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(out, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", "--task", dest="env_id", default="MiniHack-KeyRoom-Fixed-S5-v0")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300_000, help="env steps per run")
    p.add_argument("--arm-steps", default="", help="per-arm budgets, e.g. 'ellm_bow=50000,oni_retrieval-embedded=50000'")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=64, help="PPO rollout length per env")
    p.add_argument("--update-epochs", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--extrinsic-coef", type=float, default=None,
                   help="every arm's extrinsic coefficient (default: the reference's 0.1 on *Score*, else 10)")
    p.add_argument("--step-penalty", default="auto",
                   help="every arm's reward for a 'frozen' step: auto (the reference: NLE's -0.01 on *Score*, 0 on "
                        "the sparse tasks, which reward success only), task (the env's own), or a number")
    p.add_argument("--actions", default="extended", choices=("task", "extended"),
                   help="NetHack action set (extended: the reference's 28 actions); MiniHack keeps its own")
    p.add_argument("--metric", default="auto", choices=("auto", "success", "return"),
                   help="value per seed over the last 10%%: success rate, or episodic return (auto: return on "
                        "*Score* tasks, which have no success, else success)")
    p.add_argument("--collect-steps", type=int, default=20_000, help="Motif: env steps of the RND collection agent")
    p.add_argument("--num-pairs", type=int, default=2000)
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--deadline-min", type=float, default=0.0, help="start no run that would end after this (0: none)")
    p.add_argument("--nethack-steps", type=int, default=20_000)
    p.add_argument("--labelled-fraction-run", type=Path, action="append", default=[],
                   help="also report the ONI labelled fraction of this run directory (e.g. a cold-cache LM run)")
    p.add_argument("--notes", type=Path, default=None, help="Markdown appended to oni.md (the reading of the result)")
    p.add_argument("--phase", default="all", choices=("all", "train", "report", "nethack"))
    p.add_argument("--target-steps", type=int, default=300_000,
                   help="the study's intended budget; arms below it are flagged reduced_budget")
    p.add_argument("--reduced-reason", default="", help="why the budget is below --target-steps (oni.json)")
    p.add_argument("--random-from", type=Path, default=None,
                   help="take the random-policy reference from this oni.json (same task and env settings)")
    p.add_argument("--train-seeds", default="", help="train only these of the --seeds (e.g. '1,2'; report: all)")
    p.add_argument("--out", type=Path, default=Path("runs/bench-oni"))
    p.add_argument("--results", type=Path, default=Path("benchmarks/results"))
    args = p.parse_args()
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}; choose from {list(ARMS)}")
    args.arm_steps = {k: int(v) for k, v in (x.split("=") for x in args.arm_steps.split(",") if x)}
    args.seed_list = list(range(args.seeds))
    train_seeds = [int(x) for x in args.train_seeds.split(",") if x] or args.seed_list
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["LLMGUIDE_CACHE_DIR"] = str(args.out / "cache")  # one LM cache for the study (seeds reuse labels)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    if args.phase == "nethack":
        nethack(args)
        return
    motif: dict = {}
    labelled = (args.out / f"motif-data-{args.env_id}" / "label_stats.json").exists()
    if "motif-oracle" in args.arms and (args.phase in ("all", "train") or labelled):
        folder, motif = motif_data(args, args.env_id)
        ARMS["motif-oracle"] = [*ARMS["motif-oracle"], f"method.data_dir={folder}"]
    if args.phase in ("all", "train"):
        rate: list[float] = []  # seconds per env step of the finished runs
        for seed in train_seeds:  # seed-major: whole seeds finish first
            for arm in args.arms:
                if arm == "motif-oracle" and motif.get("failed"):
                    continue
                steps = args.arm_steps.get(arm, args.steps)
                est = steps * (np.median(rate) if rate else 0.0)
                if args.deadline_min and time.perf_counter() - t0 + est > 60 * args.deadline_min:
                    print(f"skip {arm}-s{seed}: would end after the deadline", flush=True)
                    continue
                secs = train_one(args, arm, seed, steps, args.env_id, [])
                if secs:
                    rate.append(secs / steps)
        if args.phase == "train":  # the report comes from one `--phase report` over every arm
            return
    report(args, motif, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
