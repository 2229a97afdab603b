"""Our PPO vs Stable-Baselines3 PPO: same env, same network, same rollout settings, steps/s in one run.

Both learners get the identical network (llmguide's DictEncoder + one hidden layer, heads on top;
SB3 through a features extractor wrapping the same modules, ``net_arch=[]``), the same Dict
observation env, ``num_envs`` x ``num_steps`` rollouts, epochs, minibatches and one torch thread.
The machine is shared, so each env is measured in ``--rounds`` alternating rounds (ours, SB3,
SB3, ours, ...) and the table reports the median steps/s and the median of per-round ratios.

    python benchmarks/costs/ppo.py [--steps 8192] [--crafter-steps 2048] [--rounds 3] [--out runs/bench_ppo]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import gymnasium as gym
import torch
from torch import nn


def ours_sps(make_vec, cfg: dict, steps: int, seed: int) -> tuple[float, int]:
    from llmguide.learners.ppo import PPO

    envs = make_vec()
    agent = PPO(envs, cfg, seed=seed)
    params = sum(p.numel() for p in agent.net.parameters())
    start = time.perf_counter()
    agent.learn(steps, progress=False)
    elapsed = time.perf_counter() - start
    envs.close()
    return agent.global_step / elapsed, params


def sb3_sps(make_env, num_envs: int, cfg: dict, steps: int, seed: int) -> tuple[float, int]:
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from llmguide.learners.networks import DictEncoder, layer_init

    class SameFeatures(BaseFeaturesExtractor):
        """llmguide's DictEncoder + Linear/ReLU core: exactly our PPO's trunk."""

        def __init__(self, observation_space: gym.spaces.Dict, hidden: int):
            super().__init__(observation_space, features_dim=hidden)
            self.encoder = DictEncoder(observation_space, hidden)
            self.core = nn.Sequential(layer_init(nn.Linear(self.encoder.out_dim, hidden)), nn.ReLU())

        def forward(self, obs):
            return self.core(self.encoder(obs))

    venv = DummyVecEnv([make_env for _ in range(num_envs)])
    hidden = cfg["hidden"]
    model = SB3PPO(
        "MultiInputPolicy", venv, learning_rate=cfg["lr"], n_steps=cfg["num_steps"],
        batch_size=num_envs * cfg["num_steps"] // cfg["num_minibatches"], n_epochs=cfg["update_epochs"],
        gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=0.2, ent_coef=0.01, vf_coef=0.5,
        max_grad_norm=0.5, normalize_advantage=True, seed=seed, device="cpu", verbose=0,
        policy_kwargs=dict(features_extractor_class=SameFeatures, features_extractor_kwargs={"hidden": hidden},
                           net_arch=[], share_features_extractor=True, normalize_images=False),
    )
    params = sum(p.numel() for p in model.policy.parameters())
    start = time.perf_counter()
    model.learn(steps)
    elapsed = time.perf_counter() - start
    venv.close()
    return model.num_timesteps / elapsed, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds per env")
    parser.add_argument("--steps", type=int, default=8192, help="env steps per learner on CartPole")
    parser.add_argument("--crafter-steps", type=int, default=2048, help="env steps per learner on Crafter (0: skip)")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_ppo")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from llmguide.envs.toy import DictObs, vector_env

    cfg = dict(lr=2.5e-4, num_steps=args.num_steps, num_minibatches=4, update_epochs=4, hidden=args.hidden,
               clip_vloss=True, anneal_lr=False, torch_threads=1)
    cases = [("CartPole-v1 (Dict obs)", lambda: DictObs(gym.make("CartPole-v1")), args.steps)]
    if args.crafter_steps > 0:
        try:
            from llmguide.envs import make_env as make_text_env

            crafter_cfg = {"name": "crafter", "id": "llmguide/Crafter-v0", "obs": "symbolic", "task": None,
                           "max_steps": 10000, "size": 9}
            cases.append(("llmguide Crafter symbolic", lambda: make_text_env(crafter_cfg, args.seed), args.crafter_steps))
        except ImportError as err:
            print(f"crafter skipped: {err}")

    rows = []
    for name, make_env, steps in cases:
        ours_runs, sb3_runs = [], []
        for r in range(args.rounds):
            order = ["ours", "sb3"] if r % 2 == 0 else ["sb3", "ours"]
            for who in order:
                if who == "ours":
                    sps, ours_params = ours_sps(lambda make_env=make_env: vector_env(make_env, args.num_envs),
                                                cfg, steps, args.seed + r)
                    ours_runs.append(sps)
                else:
                    sps, sb3_params = sb3_sps(make_env, args.num_envs, cfg, steps, args.seed + r)
                    sb3_runs.append(sps)
        ratios = [o / s for o, s in zip(ours_runs, sb3_runs, strict=True)]
        ours, sb3 = statistics.median(ours_runs), statistics.median(sb3_runs)
        row = {"env": name, "steps": steps, "rounds": args.rounds, "num_envs": args.num_envs,
               "num_steps": args.num_steps, "hidden": args.hidden, "params_ours": ours_params,
               "params_sb3": sb3_params, "sps_ours": round(ours, 1), "sps_sb3": round(sb3, 1),
               "ratio_ours_over_sb3": round(statistics.median(ratios), 3),
               "ratios_per_round": [round(x, 3) for x in ratios]}
        rows.append(row)
        print(json.dumps(row))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    lines = ["| env | steps x rounds | envs x rollout | params ours / SB3 | steps/s ours (median) | "
             "steps/s SB3 (median) | ratio ours/SB3 (median of rounds) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['env']} | {r['steps']} x {r['rounds']} | {r['num_envs']} x {r['num_steps']} | {r['params_ours']} / "
                     f"{r['params_sb3']} | {r['sps_ours']} | {r['sps_sb3']} | {r['ratio_ours_over_sb3']} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
