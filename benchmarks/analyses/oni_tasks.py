"""Which sparse MiniHack/NetHack tasks can a message-based intrinsic reward (ONI, Motif) act on?

A uniformly random policy plays ``--episodes`` episodes of each task (the same env wrapper as the
benchmark: ``NetHackText``, the task's own action set).  Per task it reports the success rate, and per
distinct message (numbers kept; the exact bytes ONI's Retrieval table keys on): the share of episodes in
which it appears, the success rate of the episodes with it and without it (the lift), and whether the
oracle (``methods.oni.oracle.helpful``, no goal: any progress event) calls it helpful.  A task suits ONI when
random success is low and a message the oracle pays for is rare and lifts success: the intrinsic reward
then marks the step that matters.  No task-specific code: the same analysis runs on every id.

    nice -n 10 .venv/bin/python benchmarks/analyses/oni_tasks.py --episodes 300 \\
        --out benchmarks/results/oni_tasks/<name>/task_survey.json \\
        MiniHack-River-Narrow-v0 MiniHack-LavaCross-Levitate-Potion-Inv-Full-v0 ...

Writes ``--out`` (JSON, merged with what it holds) and the table beside it (``task_survey.md`` for
``task_survey.json``; ``--markdown`` prints it). The survey behind ``benchmarks/studies/oni.py``'s task choice is
``benchmarks/results/oni_lavacross_potion/legacy-300k/task_survey.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np


def survey(env_id: str, episodes: int, seed: int = 0, top: int = 8) -> dict:
    from llmguide.envs.nethack.env import NetHackText
    from llmguide.envs.nethack.oracle import NetHackOracle
    from llmguide.methods.oni.oracle import helpful

    family = "nethack" if env_id.startswith("NetHack") else "minihack"
    env = NetHackText(env_id, family=family, reward_clip=10.0)
    oracle = NetHackOracle()
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    wins, lengths, seen = [], [], []
    for ep in range(episodes):
        _, info = env.reset(seed=seed + ep)
        msgs = {info["message"]} if info["message"] else set()
        done, t = False, 0
        while not done:
            _, _, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
            t += 1
            if info["message"]:
                msgs.add(info["message"])
            done = term or trunc
        wins.append(bool(info.get("success")))
        lengths.append(t)
        seen.append(msgs)
    env.close()
    wins_a = np.array(wins)
    counts = Counter(m for s in seen for m in s)
    rows = []
    for m, n in counts.items():
        has = np.array([m in s for s in seen])
        rows.append({"message": m, "episodes_with": n, "share": round(n / episodes, 4),
                     "success_with": round(float(wins_a[has].mean()), 4),
                     "success_without": round(float(wins_a[~has].mean()), 4) if (~has).any() else None,
                     "oracle_helpful": helpful(oracle, m)})
    helpful_any = np.array([any(helpful(oracle, m) for m in s) for s in seen])
    lift = sorted(rows, key=lambda r: (r["success_with"] - (r["success_without"] or 0.0)) * min(r["episodes_with"], 30),
                  reverse=True)
    return {"env_id": env_id, "episodes": episodes, "success": round(float(wins_a.mean()), 4),
            "successes": int(wins_a.sum()), "mean_length": round(float(np.mean(lengths)), 1),
            "actions": int(env.action_space.n), "distinct_messages": len(counts),
            "episodes_with_oracle_helpful": round(float(helpful_any.mean()), 4),
            "success_with_oracle_helpful": round(float(wins_a[helpful_any].mean()), 4) if helpful_any.any() else None,
            "success_without_oracle_helpful": round(float(wins_a[~helpful_any].mean()), 4) if (~helpful_any).any() else None,
            "oracle_helpful": sorted((r for r in rows if r["oracle_helpful"]), key=lambda r: -r["episodes_with"])[:top],
            "top_lift": lift[:top], "seconds": round(time.perf_counter() - t0, 1)}


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def table(result: dict) -> str:
    """Markdown: per task, random success and the message with the largest success lift (appearing in ≥ 2% of
    episodes), with whether the oracle pays for it, and the same for 'any oracle-helpful message'."""
    rows = ["| task | actions | random success (episodes) | mean length | message with the largest success lift | "
            "in episodes | success with / without it | oracle: helpful | episodes with any oracle-helpful message | "
            "success with / without one |", "|---|---|---|---|---|---|---|---|---|---|"]
    for env_id, r in result.items():
        if "error" in r:
            rows.append(f"| {env_id} | – | not run: {r['error'][:60]} | | | | | | | |")
            continue
        top = next((x for x in r["top_lift"] if x["share"] >= 0.02), None)
        key = (f"`{top['message'][:70]}` | {top['share']:.3f} | {_fmt(top['success_with'])} / "
               f"{_fmt(top['success_without'])} | {'yes' if top['oracle_helpful'] else 'no'}") if top else "– | | |"
        rows.append(f"| {env_id.removeprefix('MiniHack-')} | {r['actions']} | {r['success']:.3f} ({r['episodes']}) | "
                    f"{r['mean_length']:.0f} | {key} | {r['episodes_with_oracle_helpful']:.3f} | "
                    f"{_fmt(r['success_with_oracle_helpful'])} / {_fmt(r['success_without_oracle_helpful'])} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_ids", nargs="+")
    p.add_argument("--episodes", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/oni_tasks.json"))
    p.add_argument("--markdown", action="store_true", help="print the table of --out and exit")
    args = p.parse_args()
    if args.markdown:
        print(table(json.loads(args.out.read_text())))
        return
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    for env_id in args.env_ids:
        try:
            result[env_id] = survey(env_id, args.episodes, args.seed)
        except Exception as exc:  # noqa: BLE001  (an id that fails to build is reported, not fatal)
            result[env_id] = {"env_id": env_id, "error": repr(exc)}
        r = result[env_id]
        print(json.dumps({k: v for k, v in r.items() if k not in ("top_lift", "oracle_helpful")}), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text("# Which tasks can a message-based reward act on? "
                                               f"(a random policy)\n\n{table(result)}\n")


if __name__ == "__main__":
    main()
