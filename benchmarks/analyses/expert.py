"""The scripted expert (``llmguide.envs.crafter.expert.agent``) on Crafter or Craftax-Classic: achievements per
episode, the Crafter / Craftax-Classic score, episode length and speed.

Each seed runs ``--episodes`` episodes in parallel (one vector env of that many envs, the expert acting for
all of them) until each env has finished one episode (``--max-steps`` caps an episode). Speed is measured
two ways: env + expert steps per second (wall clock of the whole loop) and expert decisions per second
(time inside ``ExpertPolicy.act`` only).

    python benchmarks/analyses/expert.py --env-id crafter --seeds 5 --episodes 4 --mode plain
    python benchmarks/analyses/expert.py --env-id craftax --seeds 5 --episodes 4 --mode data --exclude make_stone_pickaxe
    python benchmarks/analyses/expert.py --env-id craftax --seeds 5 --episodes 8 --target make_stone_pickaxe

``--target`` plays a sparse single task as the studies do (``env.task``: the episode ends on the target's success,
capped at ``TASK_MAX_STEPS`` unless ``--max-steps``), the expert pursuing only the target's chain and the vitals
(``agent.task_only``, the harness's ``expert`` arm): its success rate per episode is the task's reference row,
in the units of a training success AUC of a policy that does not learn.

Writes ``benchmarks/results/expert/<variant>/result.json`` and ``report.md`` (variant: ``<env>-<mode>``
unless ``--variant``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "expert"


def achievement_key(target: str) -> str:
    """The achievements' key of a task name (``make_stone_pickaxe`` or "make stone pickaxe")."""
    from llmguide.envs.base import normalize_goal

    return normalize_goal(target).replace(" ", "_")


def run_seed(env_id: str, seed: int, episodes: int, mode: str, max_steps: int, exclude: list[str],
             eps: float | None, target: str | None = None) -> dict:
    """``episodes`` parallel episodes of the expert with ``seed``: per-episode achievements and lengths, speeds."""
    from llmguide.envs.crafter.expert.agent import ExpertPolicy
    from llmguide.envs.vector import make_vector_env

    cfg = {"name": env_id, "max_steps": max_steps, "task": target}
    envs = make_vector_env(cfg, episodes, seed, "sync")
    policy = ExpertPolicy(cfg, seed=seed, mode=mode, exclude=exclude, eps=eps, target=target)
    obs, infos = envs.reset(seed=seed)
    done = np.zeros(episodes, bool)
    lengths = np.zeros(episodes, np.int64)
    results: list[dict | None] = [None] * episodes
    goal = achievement_key(target) if target else None   # a task's success ends its episode too
    act_time, steps, start = 0.0, 0, None
    while not done.all():
        if steps == episodes:  # clocks start after the first step (Craftax compiles its step there)
            act_time, start = 0.0, time.perf_counter()
        t0 = time.perf_counter()
        actions = policy.act(obs, infos)
        act_time += time.perf_counter() - t0
        obs, _, term, trunc, infos = envs.step(actions)
        steps += episodes
        lengths += ~done
        for i in np.flatnonzero((term | trunc) & ~done):
            final = infos["final_info"]
            ach = {k: int(v[i]) for k, v in final["achievements"].items() if not k.startswith("_")}
            died = bool(term[i]) and not (goal and ach.get(goal, 0) > 0)
            results[i] = {"seed": seed, "env_index": int(i), "length": int(lengths[i]), "died": died,
                          "achievements": ach, "unlocked": sorted(k for k, v in ach.items() if v > 0)}
            done[i] = True
    wall = time.perf_counter() - start if start is not None else float("nan")
    envs.close()
    return {"episodes": results, "steps": steps - episodes, "wall_s": wall, "act_s": act_time}


def summarize(per_seed: dict[int, dict]) -> dict:
    from llmguide.envs.crafter.rules import ACHIEVEMENTS, achievement_summary

    episodes = [ep for r in per_seed.values() for ep in r["episodes"]]
    summary = achievement_summary([ep["achievements"] for ep in episodes])
    seeds = {}
    for seed, r in per_seed.items():
        counts = [len(ep["unlocked"]) for ep in r["episodes"]]
        seeds[str(seed)] = {"achievements_per_episode": float(np.mean(counts)), "per_episode": counts,
                            "lengths": [ep["length"] for ep in r["episodes"]],
                            "died": sum(ep["died"] for ep in r["episodes"]),
                            "steps_per_s": r["steps"] / r["wall_s"], "expert_decisions_per_s": r["steps"] / r["act_s"]}
    means = [s["achievements_per_episode"] for s in seeds.values()]
    steps = sum(r["steps"] for r in per_seed.values())
    return {
        "achievements_per_episode": summary["achievements_per_episode"],
        "achievements_per_episode_seed_range": [min(means), max(means)],
        "score_percent": summary["crafter_score_percent"],
        "success_rates_percent": {k: summary["success_rates_percent"][k] for k in ACHIEVEMENTS},
        "episodes": summary["episodes"],
        "mean_length": float(np.mean([ep["length"] for ep in episodes])),
        "died_fraction": float(np.mean([ep["died"] for ep in episodes])),
        "steps_per_s": steps / sum(r["wall_s"] for r in per_seed.values()),
        "expert_decisions_per_s": steps / sum(r["act_s"] for r in per_seed.values()),
        "per_seed": seeds,
    }


def target_lines(result: dict) -> list[str]:
    """The reference row of a ``--target`` run: success per episode (overall and per seed), steps to success."""
    target = result["args"].get("target")
    if not target:
        return []
    goal = achievement_key(target)
    eps = result["episodes"]
    hit = [ep for ep in eps if ep["achievements"].get(goal, 0) > 0]
    per_seed = {}
    for ep in eps:
        per_seed.setdefault(ep["seed"], []).append(ep["achievements"].get(goal, 0) > 0)
    rates = ", ".join(f"{seed}: {np.mean(v):.2f}" for seed, v in sorted(per_seed.items()))
    steps = f"{np.mean([ep['length'] for ep in hit]):.0f}" if hit else "–"
    return [f"- **target `{goal}`: success in {len(hit)} of {len(eps)} episodes ({len(hit) / len(eps):.2f})**; per "
            f"seed {rates}; mean steps to success {steps} (cap {result['args']['max_steps']})", ""]


def report(result: dict) -> str:
    s, a = result["summary"], result["args"]
    score = "Craftax-Classic score" if a["env_id"] == "craftax" else "Crafter score"
    lines = [
        f"# Scripted expert on {a['env_id']} ({a['mode']} mode" + (f", task {a['target']})" if a.get("target") else ")"), "",
        f"`python benchmarks/analyses/expert.py --env-id {a['env_id']} --seeds {a['seeds']} --episodes {a['episodes']} "
        f"--mode {a['mode']}" + (f" --exclude {' '.join(a['exclude'])}" if a["exclude"] else "")
        + (f" --target {a['target']}" if a.get("target") else "") + "`", "",
        f"- achievements per episode: **{s['achievements_per_episode']:.2f}** of 22 "
        f"(per-seed means {s['achievements_per_episode_seed_range'][0]:.2f}–{s['achievements_per_episode_seed_range'][1]:.2f}; "
        f"{s['episodes']} episodes)",
        f"- {score}: **{s['score_percent']:.1f} %**",
        f"- episode length {s['mean_length']:.0f} steps on average (cap {a['max_steps']}); "
        f"{100 * s['died_fraction']:.0f} % of episodes end in death",
        f"- speed: {s['steps_per_s']:.0f} env+expert steps/s, {s['expert_decisions_per_s']:.0f} expert decisions/s "
        f"(one process, {result['machine']})", "",
        *target_lines(result),
        "| seed | achievements / episode | per episode | lengths | steps/s |", "|---|---|---|---|---|",
    ]
    for seed, r in s["per_seed"].items():
        lines.append(f"| {seed} | {r['achievements_per_episode']:.2f} | {r['per_episode']} | {r['lengths']} | "
                     f"{r['steps_per_s']:.0f} |")
    lines += ["", "| achievement | success rate % |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in s["success_rates_percent"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", "--task", dest="env_id", choices=["crafter", "craftax"], default="crafter")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    p.add_argument("--episodes", type=int, default=4, help="parallel episodes per seed")
    p.add_argument("--mode", choices=["plain", "data"], default="plain")
    p.add_argument("--max-steps", type=int, default=None, help="episode cap (default 10000; a --target task's own cap)")
    p.add_argument("--target", default=None, help="a sparse single task (env.task), e.g. make_stone_pickaxe")
    p.add_argument("--exclude", nargs="*", default=[], help="achievements the expert never pursues")
    p.add_argument("--eps", type=float, default=None, help="random-action probability (data mode default 0.1)")
    p.add_argument("--variant", default=None)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.max_steps is None:
        from llmguide.envs.crafter.rules import TASK_MAX_STEPS
        args.max_steps = TASK_MAX_STEPS if args.target else 10000
    per_seed = {}
    for seed in range(args.seeds):
        r = run_seed(args.env_id, seed, args.episodes, args.mode, args.max_steps, args.exclude, args.eps,
                     args.target)
        per_seed[seed] = r
        counts = [len(ep["unlocked"]) for ep in r["episodes"]]
        print(f"seed {seed}: achievements/episode {np.mean(counts):.2f} {counts} lengths "
              f"{[ep['length'] for ep in r['episodes']]} ({r['steps'] / r['wall_s']:.0f} steps/s)", flush=True)
    variant = args.variant or f"{args.env_id}-{args.mode}" + (f"-{args.target}" if args.target else "")
    result = {"study": "expert", "variant": variant, "env": args.env_id, "task_id": args.target,
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
                         f"load average {os.getloadavg()[1]:.1f} (shared machine)",
              "summary": summarize(per_seed),
              "episodes": [ep for r in per_seed.values() for ep in r["episodes"]]}
    out = args.out / variant
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    (out / "report.md").write_text(report(result))
    s = result["summary"]
    print(f"{variant}: {s['achievements_per_episode']:.2f} achievements/episode, score {s['score_percent']:.1f} %, "
          f"{s['steps_per_s']:.0f} steps/s -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
