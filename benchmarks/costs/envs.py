"""Steps/s of each raw env vs its llmguide text env, measured in one process.

Only ``step`` calls are timed (resets excluded; both sides replay the same random actions from
the same seeds).  "overhead" = extra time per step of the text env over the raw env, in % of the
raw step; "caption" = the part of it spent building the text (caption, events, oracle facts),
measured by timing the text builder alone on the same states.

    python benchmarks/costs/envs.py --steps 3000 --out runs/bench_envs
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from llmguide.envs import make_env

FAMILIES = {
    "crafter": {"name": "crafter", "obs": "symbolic", "task": None, "max_steps": 10000, "size": 9},
    "babyai": {"name": "babyai", "task": "GoToLocal", "max_steps": None},
    "minihack": {"name": "minihack", "id": "MiniHack-Room-5x5-v0", "max_steps": None},
    "nethack": {"name": "nethack", "id": "NetHackScore-v0", "max_steps": None},
}


def _raw_env(family: str):
    """The underlying env configured like the text env (same level / no render / same obs keys)."""
    if family == "crafter":
        from llmguide.envs.crafter.env import _Core

        env = _Core(area=(64, 64), view=(9, 9), size=(64, 64), length=10000, seed=0)
        return lambda seed: env.reset(), lambda a: _old_api(env.step(a)), 17
    if family == "babyai":
        import minigrid  # noqa: F401  (registers BabyAI-*)

        env = gym.make("BabyAI-GoToLocal-v0").unwrapped
        return lambda seed: env.reset(seed=seed), env.step, 6
    from llmguide.envs.nethack.env import OBS_KEYS, _import_backend

    _import_backend(family)
    env = gym.make(FAMILIES[family]["id"], observation_keys=OBS_KEYS).unwrapped
    return lambda seed: env.reset(seed=seed), env.step, env.action_space.n


def _old_api(out):
    obs, reward, done, info = out
    return obs, reward, done, False, info


class _Stepper:
    """Steps one env through given actions, resetting (untimed) at episode ends."""

    def __init__(self, reset, step):
        self.reset, self.step, self.episode = reset, step, 0
        reset(0)

    def timed(self, actions: np.ndarray) -> float:
        """Seconds spent inside ``step`` for these actions."""
        total = 0.0
        for a in actions:
            t0 = time.perf_counter()
            out = self.step(int(a))
            total += time.perf_counter() - t0
            if out[2] or out[3]:
                self.episode += 1
                self.reset(self.episode)
        return total


def _caption_seconds(family: str, env: gym.Env, actions: np.ndarray) -> float:
    """Time spent building text info alone, on the text env's own states."""
    core = env.unwrapped
    env.reset(seed=0)
    total = 0.0
    for a in actions:
        _, _, term, trunc, _ = env.step(int(a))
        t0 = time.perf_counter()
        if family == "crafter":
            core._info([])
        elif family == "babyai":
            core._info(core.last_obs, [], False)
        else:
            obs = dict(zip(core._env._observation_keys, core._env.last_observation, strict=False))
            core._text(obs, {}, False)
        total += time.perf_counter() - t0
        if term or trunc:
            env.reset()
    return total


def bench(family: str, steps: int, block: int = 250) -> dict:
    """Raw and text env stepped in alternating blocks, so that load changes hit both alike."""
    actions = np.random.default_rng(0).integers(0, 10**6, steps)
    reset, step, n = _raw_env(family)
    acts = actions % n
    text_env = make_env(FAMILIES[family], seed=0)
    raw_side = _Stepper(reset, step)
    text_side = _Stepper(lambda seed: text_env.reset(seed=seed), text_env.step)
    raw_side.timed(acts[:200])  # warm up (JIT, caches)
    text_side.timed(acts[:200])
    raw = text = 0.0
    for start in range(0, steps, block):
        raw += raw_side.timed(acts[start:start + block])
        text += text_side.timed(acts[start:start + block])
    caption = _caption_seconds(family, text_env, acts)
    text_env.close()
    return {
        "family": family,
        "steps": steps,
        "raw_sps": steps / raw,
        "text_sps": steps / text,
        "overhead_percent": 100.0 * (text - raw) / raw,
        "caption_percent_of_raw_step": 100.0 * caption / raw,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--out", default="runs/bench_envs")
    args = parser.parse_args()
    rows = []
    for family in args.families:
        row = bench(family, args.steps)
        rows.append(row)
        print(f"{family:9s} raw {row['raw_sps']:9.0f} steps/s  text {row['text_sps']:9.0f} steps/s  "
              f"overhead {row['overhead_percent']:6.1f}%  caption {row['caption_percent_of_raw_step']:6.1f}%"
              " of a raw step", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "envs.json").write_text(json.dumps(rows, indent=2))
    lines = ["| family | raw steps/s | text steps/s | overhead % | caption % of raw step |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['raw_sps']:.0f} | {r['text_sps']:.0f} | {r['overhead_percent']:.1f} | "
              f"{r['caption_percent_of_raw_step']:.1f} |" for r in rows]
    (out / "envs.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'envs.json'} and {out / 'envs.md'}")


if __name__ == "__main__":
    main()
