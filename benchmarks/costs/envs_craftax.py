"""env=craftax throughput: raw Craftax-Classic vs our text vector env vs stock Crafter (PPO on both: craftax_speed.py).

Env steps/s (random actions, resets included, compile and warm-up excluded), measured in
``--rounds`` interleaved rounds on this shared machine (the table shows the median):

* ``craftax raw, 1 call/step``: Craftax's own ``CraftaxClassicSymbolicEnvNoAutoReset`` vmapped over
  N envs with the optimistic reset (N/16 fresh worlds per step), one jitted call per step and the
  flat observation brought to the host: the like-for-like baseline of our wrapper;
* ``craftax raw, scan``: the same step inside ``lax.scan`` of ``--scan`` steps per call (nothing
  leaves JAX; the upper bound);
* ``env=craftax``: :class:`~llmguide.envs.craftax.env.CraftaxVectorEnv` (observations, caption keys,
  events, per-env infos with captions), and the same plus ``split_infos`` (what PPO reads per step);
* ``crafter stock``: ``crafter.Env`` (renders 64x64 pixels), one env in a Python loop;
* ``env=crafter``: llmguide's symbolic Crafter as PPO gets it (sync vector env, 4 envs).

PPO end to end on both envs (same network, same rollout length) is ``benchmarks/costs/craftax_speed.py``. Scores are
never compared here: Craftax-Classic is not Crafter.

    python benchmarks/costs/envs_craftax.py [--num-envs 256] [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"


def raw_craftax(num_envs: int, scan: int):
    """(step-per-call fn, scan fn) over Craftax's own symbolic env with the optimistic reset."""
    import jax
    import jax.numpy as jnp
    from craftax.craftax_classic.envs.craftax_symbolic_env import CraftaxClassicSymbolicEnvNoAutoReset

    from llmguide.envs.craftax.env import _canon

    env = CraftaxClassicSymbolicEnvNoAutoReset()
    params = env.default_params
    k = max(1, num_envs // 16)

    def one(carry, actions):
        states, key = carry
        key, k1, k2 = jax.random.split(key, 3)
        obs, after, reward, done, _ = jax.vmap(env.step_env, (0, 0, 0, None))(
            jax.random.split(k1, num_envs), states, actions, params)
        fresh_obs, fresh = jax.vmap(env.reset_env, (0, None))(jax.random.split(k2, k), params)
        pick = (jnp.cumsum(done) - 1) % k

        def choose(a, b):
            return jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), b[pick], a)

        states = _canon(jax.tree_util.tree_map(choose, after, fresh))
        return (states, key), (choose(obs, fresh_obs), reward, done)

    def init(seed):
        key = jax.random.PRNGKey(seed)
        _, states = jax.vmap(env.reset_env, (0, None))(jax.random.split(key, num_envs), params)
        return _canon(states), key

    step = jax.jit(one)

    @jax.jit
    def many(carry, key):
        actions = jax.random.randint(key, (scan, num_envs), 0, 17)
        carry, (obs, reward, done) = jax.lax.scan(one, carry, actions)
        return carry, reward.sum()

    return init, step, many


_RAW: dict[tuple[int, int], tuple] = {}


def time_raw(num_envs: int, steps: int, scan: int, seed: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    if (num_envs, scan) not in _RAW:  # compiled once, reused by every round
        _RAW[(num_envs, scan)] = raw_craftax(num_envs, scan)
    init, step, many = _RAW[(num_envs, scan)]
    carry = init(seed)
    rng = np.random.default_rng(seed)
    acts = [jnp.asarray(rng.integers(0, 17, num_envs), jnp.int32) for _ in range(steps)]
    for a in acts[:2]:  # compile and warm up
        carry, out = step(carry, a)
    jax.block_until_ready(out)
    start = time.perf_counter()
    for a in acts:
        carry, out = step(carry, a)
        out = jax.device_get(out)
    per_call = steps * num_envs / (time.perf_counter() - start)
    key = jax.random.PRNGKey(seed)
    for _ in range(2):
        carry, total = many(carry, key)
    jax.block_until_ready(total)
    calls = max(1, steps // scan)
    start = time.perf_counter()
    for i in range(calls):
        carry, total = many(carry, jax.random.fold_in(key, i))
    jax.block_until_ready(total)
    return {"craftax raw, 1 call/step": per_call,
            "craftax raw, scan": calls * scan * num_envs / (time.perf_counter() - start)}


def time_wrapper(num_envs: int, steps: int, seed: int) -> dict[str, float]:
    from llmguide.envs import make_vector_env, split_infos

    env = make_vector_env({"name": "craftax"}, num_envs, seed)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    acts = [rng.integers(0, 17, num_envs) for _ in range(steps)]
    for a in acts[:2]:
        env.step(a)
    out = {}
    for label, split in (("env=craftax (infos, captions)", False), ("env=craftax + split_infos", True)):
        start = time.perf_counter()
        for a in acts:
            infos = env.step(a)[4]
            if split:
                split_infos(infos, num_envs)
        out[label] = steps * num_envs / (time.perf_counter() - start)
    out["caption keys seen"] = len(env.text.captions)
    out["caption lookups"] = env.text.lookups
    return out


def time_crafter(steps: int, seed: int) -> dict[str, float]:
    import crafter

    from llmguide.envs import make_vector_env

    rng = np.random.default_rng(seed)
    env = crafter.Env(seed=seed)
    env.reset()
    start = time.perf_counter()
    for a in rng.integers(0, 17, steps):
        if env.step(int(a))[2]:
            env.reset()
    stock = steps / (time.perf_counter() - start)
    vec = make_vector_env({"name": "crafter"}, 4, seed)
    vec.reset(seed=seed)
    n = max(1, steps // 4)
    start = time.perf_counter()
    for _ in range(n):
        vec.step(rng.integers(0, 17, 4))
    ours = n * 4 / (time.perf_counter() - start)
    vec.close()
    return {"crafter stock (crafter.Env, 1 env)": stock, "env=crafter (symbolic, 4 envs)": ours}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200, help="timed steps per round (batched calls)")
    ap.add_argument("--scan", type=int, default=50)
    ap.add_argument("--crafter-steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        seed = args.seed + r
        row = {**time_raw(args.num_envs, args.steps, args.scan, seed), **time_wrapper(args.num_envs, args.steps, seed),
               **time_crafter(args.crafter_steps, seed)}
        rounds.append(row)
        print(f"round {r}: " + ", ".join(f"{k}={v:.0f}" for k, v in row.items()), flush=True)
    env_sps = {k: statistics.median(row[k] for row in rounds) for k in rounds[0]}
    load = os.getloadavg()
    result = {"num_envs": args.num_envs, "steps_per_round": args.steps, "rounds": args.rounds, "env_sps": env_sps,
              "env_sps_rounds": rounds, "load_average": load, "python": platform.python_version()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "envs_craftax.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# env=craftax throughput (Craftax-Classic; not Crafter scores)", "",
        f"{args.num_envs} Craftax envs, median of {args.rounds} interleaved rounds, CPU, shared 2-core box "
        f"(load average at the end {load[0]:.1f}). Env steps/s with random actions, resets included.", "",
        "| env | steps/s | × env=crafter | × craftax raw (1 call/step) |", "|---|---|---|---|",
    ]
    raw_key, ours_key, crafter_key = "craftax raw, 1 call/step", "env=craftax (infos, captions)", \
        "env=crafter (symbolic, 4 envs)"
    ratios = {k: statistics.median(row[k] / row[crafter_key] for row in rounds) for k in env_sps
              if not k.startswith("caption")}
    vs_raw = {k: statistics.median(row[k] / row[raw_key] for row in rounds) for k in ratios}
    for k, v in env_sps.items():
        if not k.startswith("caption"):
            lines.append(f"| {k} | {v:,.0f} | {ratios[k]:.1f} | {vs_raw[k]:.2f} |")
    lines += ["", "Ratios are medians of the per-round ratios (both sides measured back to back), so they "
              "are steadier than the steps/s columns on this shared machine.", "",
              f"Caption strings built per round (distinct caption keys): {env_sps['caption keys seen']:,.0f} "
              f"of {env_sps['caption lookups']:,.0f} captions handed out; env=craftax runs at "
              f"{vs_raw[ours_key]:.2f}× raw Craftax (1 call/step).", ""]
    (args.out / "envs_craftax.md").write_text("\n".join(lines) + "\n")
    print((args.out / "envs_craftax.md").read_text())


if __name__ == "__main__":
    main()
