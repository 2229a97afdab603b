"""Sampled rollouts of finished ONI-benchmark runs: action shares, oracle-helpful messages per episode, return,
success rate.

    .venv/bin/python benchmarks/analyses/oni_rollouts.py runs/bench/oni/NetHackScore-v0-300k/none/seed-0 \
        runs/bench/oni/NetHackScore-v0-300k/oni_retrieval-oracle/seed-0

(run folders of a ``benchmarks/studies/oni.py`` study: ``<runs>/<arm>/seed-<s>``; ``benchmarks/results/oni_lavacross_potion/
legacy-300k/rollouts.txt`` is this script's output on the old layout's runs)

Each run's final checkpoint acts (sampled, not greedy) on ``--episodes`` held-out seeds (500, 501, ...);
a message is counted as helpful by :class:`~llmguide.envs.nethack.env.NetHackOracle` (the ``llm=oracle`` ground
truth, towards the run's labelling goal), grouped by its first three words.
"""

from __future__ import annotations

import argparse
import collections
import warnings

import numpy as np
import torch

from llmguide.core.rundir import safe_torch_load


def rollouts(run: str, episodes: int, seed: int = 500) -> dict:
    from omegaconf import OmegaConf

    from llmguide.envs import make_env
    from llmguide.envs.nethack.oracle import NetHackOracle
    from llmguide.methods.oni.oracle import helpful as is_helpful
    from llmguide.methods.oni.recipe import method_goal
    from llmguide.pipelines import recipe_class

    cfg = OmegaConf.load(f"{run}/config.yaml")
    state = safe_torch_load(f"{run}/checkpoints/latest.pt")["agent"]
    agent = recipe_class(cfg)(cfg).load_for_eval(state)
    env = make_env(cfg.env, seed)
    names, oracle, goal = env.unwrapped.action_strings, NetHackOracle(), method_goal(cfg)
    acts: collections.Counter[str] = collections.Counter()
    helpful: collections.Counter[str] = collections.Counter()
    rets, lens, wins = [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        agent.reset_act_state()
        done, ret, n = False, 0.0, 0
        while not done:
            a = int(agent.act({k: v[None] for k, v in obs.items()}, greedy=False)[0])
            obs, r, term, trunc, info = env.step(a)
            ret, n = ret + float(r), n + 1
            acts[names[a]] += 1
            if is_helpful(oracle, info["message"], goal):
                helpful[" ".join(info["message"].split()[:3])] += 1
            done = term or trunc
        rets.append(round(ret, 1))
        lens.append(n)
        wins.append(bool(info.get("success")))
    env.close()
    total = sum(acts.values())
    return {"run": run, "returns": rets, "lengths": lens, "success": float(np.mean(wins)), "helpful_per_episode": sum(helpful.values()) / episodes,
            "helpful": helpful.most_common(12), "actions": [(k, round(v / total, 3)) for k, v in acts.most_common(10)]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--episodes", type=int, default=4)
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for run in args.runs:
        out = rollouts(run, args.episodes)
        print(out["run"], "success", out["success"], "return", out["returns"], "mean", np.mean(out["returns"]).round(1),
              "len", out["lengths"])
        print("  helpful/episode", out["helpful_per_episode"], out["helpful"])
        print("  actions", out["actions"], flush=True)


if __name__ == "__main__":
    main()
