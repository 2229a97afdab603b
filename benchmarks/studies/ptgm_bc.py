"""PTGM's behaviour-cloning gate (issue 52): can a policy imitate the scripted expert, and what does it lack?

PTGM steers a low level pretrained by behaviour cloning (BC); if a cloned policy cannot do what its teacher does,
no high level over it can.  This study clones the scripted expert (``envs/crafter/expert``) on Craftax-Classic and
lets the clone play single tasks, frozen, beside the expert itself:

- **Data** (``--collect-steps`` env steps over 64 envs, ``--collect-max-steps`` per episode, one collection per
  expert mode, seed 0, shared by every seed): the expert in ``plain`` mode (every achievement, cheapest first:
  general play that includes the tasks' chains, never told a task) or ``data`` mode (PTGM's: random feasible
  subgoals, ε-random actions 0.1, random walks).  Every step records the 9x7 view, the inventory vector, the
  seen-map window (``env.seen_map``: what the agent has seen around it, built from its views alone) and the action.
- **Clones** (the arms): an ActorCritic (flat encoder, the shared sparse PPO's width) trained on the action's
  cross-entropy (``llmguide.learners.bc``), with or without a GRU (``seq`` steps of backpropagation through
  time) and with or without the seen-map channel; one factor changed at a time from ``bc-frozen``
  (GRU, seen map, all the plain data).
- **Play**: each clone, frozen, samples its actions on ``env.task`` = each of ``--tasks`` (episode ends on success,
  1,500-step cap): success = the share of ``--episodes`` first episodes (one per env, env seed 1000 + seed) that
  reach the task.  ``expert``: the expert told the task (``target``, the harness's ``expert`` row) on the same
  env seeds; ``teacher-<mode>``: the expert in the data's mode, not told the task (what is cloned).
- **Held-out action accuracy**: every 20th block of 2,048 steps is never trained on; argmax accuracy there.

Seed s = the clone's training seed and its env seeds; the data are one collection (seed 0) for every seed, so the
seed-to-seed spread leaves out the data's own.  Results: ``benchmarks/results/ptgm_bc/<task>-<budget>/`` (one
result.json per task; control ``expert``, so each paired row reads "clone − expert"; ``details.share`` = clone mean /
expert mean).

    python benchmarks/studies/ptgm_bc.py --seeds 3 --collect-steps 300000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import _path  # noqa: E402,F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "ptgm_bc"
NUM_ENVS = 64
# arm -> clone settings: memory (none | gru), seq (BPTT steps), obs (view | map), data (expert mode), fraction of the
# collection's steps (a prefix in time of every env's stream: fewer episodes of the same worlds), dagger (rounds of
# the clone playing while the expert labels what it should have done, each added to the data)
BASE = {"memory": "none", "seq": 1, "obs": "view", "data": "plain", "fraction": 1.0, "dagger": 0}
ARMS = {
    "bc-frozen": BASE,
    "bc-map": {**BASE, "obs": "map"},
    "bc-gru": {**BASE, "memory": "gru", "seq": 32},
    "bc-gru-map": {**BASE, "memory": "gru", "seq": 32, "obs": "map"},
    "bc-gru-seq8": {**BASE, "memory": "gru", "seq": 8},
    "bc-tenth-data": {**BASE, "fraction": 1 / 10},
    "bc-third-data": {**BASE, "fraction": 1 / 3},
    "bc-half-data": {**BASE, "fraction": 1 / 2},
    "bc-data-mode": {**BASE, "data": "data"},
    "bc-dagger": {**BASE, "dagger": 3},
    "bc-dagger-map": {**BASE, "obs": "map", "dagger": 3},
}
ABOUT = {
    "bc-frozen": "PTGM's low level today: no memory (single steps), the 9x7 view + inventory, all the plain data",
    "bc-map": "+ the seen-map channel (15x15 cells around the player as seen so far)",
    "bc-gru": "+ a GRU (32-step BPTT)",
    "bc-gru-map": "+ a GRU and the seen map",
    "bc-gru-seq8": "+ a GRU with 8-step BPTT",
    "bc-tenth-data": "a tenth of the data (the first tenth of every env's stream)",
    "bc-third-data": "a third of the data (the first third of every env's stream)",
    "bc-half-data": "half the data (the first half of every env's stream)",
    "bc-data-mode": "PTGM's data instead: the expert in data mode (random subgoals, ε 0.1, random walks)",
    "bc-dagger": "+ 3 DAgger rounds: the clone plays, the expert labels its states, the clone trains on all",
    "bc-dagger-map": "+ the seen map and 3 DAgger rounds",
}


# --- data ------------------------------------------------------------------------------------------
def record(mode: str, steps: int, max_steps: int, map_size: int, seed: int = 0, actor=None) -> dict:
    """64 envs for ``steps`` env steps, labelled by the expert in ``mode``: time-major (T, N) arrays of the view
    ids, seen-map ids, vector, the expert's action and episode starts.  ``actor(obs, infos, done)``, when given,
    plays instead of the expert, which then only labels (DAgger) and follows the moves made."""
    from llmguide.envs.crafter.expert.agent import ExpertPolicy
    from llmguide.envs.crafter.expert.nav import view_ids
    from llmguide.envs.vector import make_vector_env

    cfg = {"name": "craftax", "task": None, "max_steps": max_steps, "seen_map": {"size": map_size}}
    envs = make_vector_env(cfg, NUM_ENVS, seed)
    expert = ExpertPolicy(cfg, seed=seed, mode=mode)
    obs, infos = envs.reset(seed=seed)
    T = -(-steps // NUM_ENVS)
    out = {"view": np.empty((T, NUM_ENVS, 9, 7), np.int8), "map": np.empty((T, NUM_ENVS, map_size, map_size), np.int8),
           "vector": np.empty((T, NUM_ENVS, obs["vector"].shape[1]), np.float32),
           "action": np.empty((T, NUM_ENVS), np.int8), "first": np.zeros((T, NUM_ENVS), bool)}
    out["first"][0] = True
    done = np.zeros(NUM_ENVS, bool)
    start = time.perf_counter()
    for t in range(T):
        label = expert.act(obs, infos)
        out["view"][t], out["map"][t], out["vector"][t] = view_ids(obs["image"]), obs["map"].argmax(1) - 1, obs["vector"]
        out["action"][t] = label
        taken = label if actor is None else actor(obs, infos, done)
        if actor is not None:
            expert.executed(taken)
            out.setdefault("played", np.empty((T, NUM_ENVS), np.int8))[t] = taken
        obs, _, term, trunc, infos = envs.step(taken)
        done = np.asarray(term) | np.asarray(trunc)
        if t + 1 < T:
            out["first"][t + 1] = done
        if t and t % 500 == 0:
            print(f"  {'label' if actor else 'collect'} {mode}: {t * NUM_ENVS:,} of {T * NUM_ENVS:,} steps "
                  f"({t * NUM_ENVS / (time.perf_counter() - start):.0f}/s)", flush=True)
    envs.close()
    out["meta"] = {"mode": mode, "steps": T * NUM_ENVS, "max_steps": max_steps, "map_size": map_size,
                   "episodes": int(out["first"].sum()), "seconds": time.perf_counter() - start}
    return out


def collect(mode: str, steps: int, max_steps: int, map_size: int, path: Path) -> Path:
    """The expert's own play in ``mode`` (:func:`record`, seed 0) -> ``path`` (npz), once."""
    if path.exists():
        return path
    data = record(mode, steps, max_steps, map_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **{k: v for k, v in data.items() if k != "meta"}, meta=json.dumps(data["meta"]))
    tmp.rename(path)
    return path


class Steps:
    """One collection as env-major streams (every env's steps in order), and the net's observations of them."""

    def __init__(self, path: Path, fraction: float, use_map: bool):
        import torch

        z = np.load(path)
        T = max(1, int(round(len(z["action"]) * fraction)))
        keys = ("view", "vector", "action", "first", *(("map",) if use_map else ()))
        streams = self._streams({k: z[k][:T] for k in keys})
        self.view, self.vector, self.action, self.first = (streams[k] for k in ("view", "vector", "action", "first"))
        self.map = streams.get("map")
        self.meta = json.loads(str(z["meta"]))
        self._torch = torch

    @staticmethod
    def _streams(data: dict) -> dict[str, np.ndarray]:
        """Time-major (T, N, ...) arrays -> env-major (N * T, ...): each env's steps in order, each stream starting
        an episode."""
        first = data["first"].copy()
        first[0] = True
        out = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)).reshape(-1, *v.shape[2:])
               for k, v in {**data, "first": first}.items()}
        out["action"] = out["action"].astype(np.int64)
        return out

    def __len__(self) -> int:
        return len(self.action)

    def extend(self, data: dict) -> None:
        """Append a :func:`record` of the same shape (its streams after ours)."""
        more = self._streams({k: data[k] for k in ("view", "vector", "action", "first", "map")})
        self.view = np.concatenate([self.view, more["view"]])
        self.vector = np.concatenate([self.vector, more["vector"]])
        self.action = np.concatenate([self.action, more["action"]])
        self.first = np.concatenate([self.first, more["first"]])
        if self.map is not None:
            self.map = np.concatenate([self.map, more["map"]])

    def obs(self, idx: np.ndarray):
        """The net's observation of steps ``idx``: one-hot view ``[class, y, x]``, vector, one-hot seen map."""
        from llmguide.envs.crafter.rules import SEMANTIC_NAMES
        from llmguide.envs.crafter.seen_map import CHANNELS

        torch = self._torch
        view = torch.as_tensor(self.view[idx].astype(np.int64)).transpose(-1, -2)   # [x, y] -> [y, x]
        out = {"image": torch.nn.functional.one_hot(view, len(SEMANTIC_NAMES)).permute(0, 3, 1, 2).float(),
               "vector": torch.as_tensor(self.vector[idx])}
        if self.map is not None:   # ids -1.. -> "not seen" first, as obs["map"]
            seen = torch.as_tensor(self.map[idx].astype(np.int64) + 1)
            out["map"] = torch.nn.functional.one_hot(seen, CHANNELS).permute(0, 3, 1, 2).float()
        return out


def make_net(settings: dict, map_size: int, vector_dim: int, hidden: int):
    import gymnasium as gym

    from llmguide.envs.crafter.rules import SEMANTIC_NAMES
    from llmguide.envs.crafter.seen_map import CHANNELS
    from llmguide.learners.networks import ActorCritic

    spaces = {"image": gym.spaces.Box(0.0, 1.0, (len(SEMANTIC_NAMES), 7, 9), np.float32),
              "vector": gym.spaces.Box(-np.inf, np.inf, (vector_dim,), np.float32)}
    if settings["obs"] == "map":
        spaces["map"] = gym.spaces.Box(0.0, 1.0, (CHANNELS, map_size, map_size), np.float32)
    return ActorCritic(gym.spaces.Dict(spaces), 17, hidden=hidden,
                       recurrent=None if settings["memory"] == "none" else "gru", image_encoder="flat")


# --- play ------------------------------------------------------------------------------------------
# the chain of the shared sparse tasks: how far along it an episode got (the report's "chain" columns)
CHAIN = ("collect_wood", "place_table", "make_wood_pickaxe", "collect_stone", "make_stone_pickaxe")


def play(act, task: str, seed: int, episodes: int, map_size: int) -> dict:
    """Each env's first episode on ``task`` (env seed 1000 + ``seed``), played by ``act(obs, infos, done) ->
    actions``: the share that reach the task (``success``), that end in death (``died``: terminated without the
    task), their mean length, and the share that unlocked each achievement of :data:`CHAIN`."""
    from llmguide.envs.vector import make_vector_env

    cfg = {"name": "craftax", "task": task, "max_steps": None, "seen_map": {"size": map_size}}
    envs = make_vector_env(cfg, episodes, 1000 + seed)
    obs, infos = envs.reset(seed=1000 + seed)
    done = np.zeros(episodes, bool)
    finished = np.zeros(episodes, bool)
    success, died = np.zeros(episodes, bool), np.zeros(episodes, bool)
    length = np.zeros(episodes, np.int64)
    chain = {a: np.zeros(episodes, bool) for a in CHAIN}
    while not finished.all():
        obs, reward, term, trunc, infos = envs.step(act(obs, infos, done))
        length += ~finished
        done = np.asarray(term) | np.asarray(trunc)
        new = done & ~finished
        if new.any():
            ach = infos["final_info"]["achievements"]
            success[new] = (np.asarray(ach[task]) > 0)[new]
            died[new] = (np.asarray(term) & ~(np.asarray(ach[task]) > 0))[new]
            for a in CHAIN:
                chain[a][new] = (np.asarray(ach[a]) > 0)[new]
            finished |= new
    envs.close()
    return {"success": float(success.mean()), "episodes": episodes, "died": float(died.mean()),
            "mean_length": float(length.mean()), "chain": {a: float(v.mean()) for a, v in chain.items()}}


def clone_actor(net, seed: int):
    """``act(obs, infos, done)`` of a frozen clone: actions sampled from its policy (seeded), the recurrent state
    zeroed where an env's episode just ended (its returned observation starts the next one)."""
    import torch

    torch.manual_seed(seed)
    state: dict = {"h": None}

    @torch.no_grad()
    def act(obs, infos, done):
        x = {k: torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in obs.items()
             if k in net.encoder.image_keys or k in net.encoder.vector_keys}
        if state["h"] is None:
            state["h"] = net.initial_state(len(done))
        if state["h"] is not None:
            keep = torch.as_tensor(~done, dtype=torch.float32).view(1, -1, 1)
            state["h"] = tuple(h * keep for h in state["h"])
        action, _, _, _, state["h"] = net.get_action_and_value(x, state["h"], None)
        return action.numpy()

    return act


def expert_actor(task: str | None, mode: str, seed: int):
    from llmguide.envs.crafter.expert.agent import ExpertPolicy

    expert = ExpertPolicy({"name": "craftax"}, seed=seed, mode=mode, target=task)
    return lambda obs, infos, done: expert.act(obs, infos)


# --- one arm ---------------------------------------------------------------------------------------
def run_clone(arm: str, seed: int, args, data: dict[str, Path]) -> dict:
    """Train (or reload) the clone of ``arm`` with ``seed`` and play every task; cached in ``<runs>/<arm>/seed-<s>``."""
    import torch

    from llmguide.learners.bc import action_accuracy, clone, held_out

    out = args.runs / arm / f"seed-{seed}"
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    settings = ARMS[arm]
    torch.manual_seed(seed)
    steps = Steps(data[settings["data"]], settings["fraction"], settings["obs"] == "map")
    net = make_net(settings, args.map_size, steps.vector.shape[1], args.hidden)
    t0 = time.perf_counter()
    bc = clone(net, steps.obs, steps.action, steps.first, seq_len=settings["seq"], updates=args.updates,
               batch_steps=args.batch_steps, lr=args.lr, seed=seed)
    bc["dagger"] = []
    n0 = len(steps)
    for r in range(settings.get("dagger", 0)):   # the clone plays, the expert labels, the clone trains on all
        extra = record(settings["data"], args.dagger_steps, args.collect_max_steps, args.map_size,
                       seed=100 * (seed + 1) + r, actor=clone_actor(net, 100 * (seed + 1) + r))
        agree = float(np.mean(extra["action"] == extra["played"])) if "played" in extra else None
        steps.extend(extra)
        more = clone(net, steps.obs, steps.action, steps.first, seq_len=settings["seq"], updates=args.dagger_updates,
                     batch_steps=args.batch_steps, lr=args.lr, seed=seed + 1000 * (r + 1))
        bc["dagger"].append({"round": r + 1, "steps": extra["meta"]["steps"], "data_steps": len(steps),
                             "val_accuracy": more["val_accuracy"], "agreement": agree})
    if bc["dagger"]:   # the held-out accuracy on the expert's own data, as for every other arm
        expert_val = held_out(len(steps)) & (np.arange(len(steps)) < n0)
        bc["val_accuracy"] = action_accuracy(net, steps.obs, steps.action, steps.first, expert_val)
    bc["seconds"] = time.perf_counter() - t0
    result = {"arm": arm, "seed": seed, "settings": settings, "bc": bc, "data": steps.meta, "tasks": {}}
    for task in args.tasks:
        result["tasks"][task] = play(clone_actor(net, seed), task, seed, args.episodes,
                                     args.map_size if settings["obs"] == "map" else 0)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), out / "net.pt")
    done.write_text(json.dumps(result, indent=1))
    print(f"[{arm}] seed {seed}: val accuracy {bc['val_accuracy']:.3f}, "
          + ", ".join(f"{t} {r['success']:.3f}" for t, r in result["tasks"].items()) + f" ({bc['seconds']:.0f} s BC)",
          flush=True)
    return result


def run_expert(name: str, task: str, mode: str, seed: int, args) -> float:
    path = args.runs / name / f"seed-{seed}-{task}.json"
    if path.exists() and "died" in json.loads(path.read_text()):
        return json.loads(path.read_text())["success"]
    out = play(expert_actor(task if name == "expert" else None, mode, seed), task, seed, args.episodes, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out["success"]


def diagnose(arm: str, seed: int, args) -> None:
    """Replay a finished clone (its saved net, the same seeds) where its result predates the death and chain
    columns, and add them; the replay's success must equal the stored one (the clone and the envs are seeded)."""
    import torch

    path = args.runs / arm / f"seed-{seed}" / "result.json"
    result = json.loads(path.read_text())
    todo = [t for t in args.tasks if t in result["tasks"] and "died" not in result["tasks"][t]]
    if not todo:
        return
    settings = ARMS[arm]
    net = make_net(settings, args.map_size, 22, args.hidden)
    net.load_state_dict(torch.load(path.parent / "net.pt"))
    for task in todo:
        out = play(clone_actor(net, seed), task, seed, args.episodes, args.map_size if settings["obs"] == "map" else 0)
        out["replayed"] = True
        if abs(out["success"] - result["tasks"][task]["success"]) > 1e-9:
            out["stored_success"] = result["tasks"][task]["success"]
            print(f"  [{arm}] seed {seed} {task}: the replay's success {out['success']:.3f} differs from the stored "
                  f"{result['tasks'][task]['success']:.3f}", flush=True)
        result["tasks"][task] = {**out, "success": result["tasks"][task]["success"]}
    path.write_text(json.dumps(result, indent=1))


# --- report ----------------------------------------------------------------------------------------
def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def episode_stats(task: str, args, clones: dict[str, dict[int, dict]], values: dict[str, dict[int, float]]) -> dict:
    """Per arm (the experts' too), over the seeds whose play recorded them: died share, mean length, chain shares."""
    records: dict[str, list[dict]] = {}
    for arm in values:
        if arm in clones:
            records[arm] = [r["tasks"][task] for r in clones[arm].values() if "died" in r["tasks"].get(task, {})]
        else:
            files = [args.runs / arm / f"seed-{s}-{task}.json" for s in values[arm]]
            records[arm] = [d for d in (json.loads(f.read_text()) for f in files if f.exists()) if "died" in d]
    return {arm: {"seeds": len(recs), "died": float(np.mean([r["died"] for r in recs])),
                  "mean_length": float(np.mean([r["mean_length"] for r in recs])),
                  "chain": {a: float(np.mean([r["chain"][a] for r in recs])) for a in CHAIN}}
            for arm, recs in records.items() if recs}


def write_report(task: str, args, values: dict[str, dict[int, float]], clones: dict[str, dict[int, dict]]) -> Path:
    from llmguide import stats

    variant = args.variant or f"{task}-{args.collect_steps // 1000}k"
    out = args.results / variant
    out.mkdir(parents=True, exist_ok=True)
    control = "expert"
    paired = {}
    for arm, v in values.items():
        if arm != control and set(v) & set(values[control]):
            paired[f"{arm} - {control}"] = stats.paired(v, values[control], names=(arm, control)).to_json()
    stats.add_holm(paired)
    expert_mean = float(np.mean(list(values[control].values())))
    share = {arm: (float(np.mean(list(v.values()))) / expert_mean if expert_mean > 0 else None)
             for arm, v in values.items()}
    accuracy = {arm: {s: r["bc"]["val_accuracy"] for s, r in by_seed.items()} for arm, by_seed in clones.items()}
    arms = {arm: {"seeds": sorted(v), "values": [v[s] for s in sorted(v)],
                  "about": ABOUT.get(arm, "the expert in the data's mode, not told the task" if arm.startswith("teacher")
                                     else "the expert told the task (target mode)"),
                  **({"settings": ARMS[arm]} if arm in ARMS else {}), "upper_reference": arm == control}
            for arm, v in values.items()}
    lines = [f"# PTGM's BC gate on `{task}`: frozen clones of the scripted expert", "",
             f"`{' '.join(['python', 'benchmarks/studies/ptgm_bc.py', *sys.argv[1:]])}`", "",
             "Value per seed: the share of the first episodes of "
             f"{args.episodes} envs (env seed 1000 + seed) that reach `{task}` (episode ends on success, 1,500-step "
             "cap). The clones are frozen and sample their actions; the data are one collection (seed 0) for every "
             "seed. Control: `expert` (told the task). Share: arm mean / expert mean.", "",
             "| arm | what it is | mean | share of expert | held-out action accuracy | per seed |",
             "|---|---|---|---|---|---|"]
    for arm, a in arms.items():
        acc = accuracy.get(arm)
        acc_text = f"{np.mean(list(acc.values())):.3f}" if acc else "–"
        lines.append(f"| {arm} | {a['about']} | {np.mean(a['values']):.3f} | "
                     f"{share[arm]:.2f} | {acc_text} | " if share[arm] is not None else f"| {arm} | {a['about']} | "
                     f"{np.mean(a['values']):.3f} | – | {acc_text} | ")
        lines[-1] += ", ".join(f"{s}: {x:.3f}" for s, x in zip(a["seeds"], a["values"], strict=True)) + " |"
    lines += ["", "## Paired differences (arm − expert, per seed)", "",
              "| comparison | mean | interval | p (t) | p (Holm) |", "|---|---|---|---|---|"]
    def num(x, spec):
        return "–" if x is None else format(x, spec)

    for name, p in paired.items():
        lo, hi = p.get("interval_low"), p.get("interval_high")
        interval = f"[{num(lo, '+.3f')}, {num(hi, '+.3f')}] ({p.get('interval')})" if lo is not None else "–"
        lines.append(f"| {name} | {p['mean']:+.3f} | {interval} | {num(p.get('p'), '.3g')} | "
                     f"{num(p.get('p_holm'), '.3g')} |")
    data = {arm: r["data"] for arm, by_seed in clones.items() for r in list(by_seed.values())[:1]}
    play_stats = episode_stats(task, args, clones, values)
    if play_stats:
        chain = CHAIN[:CHAIN.index(task) + 1] if task in CHAIN else CHAIN
        lines += ["", "## Where the episodes end", "",
                  "Share of episodes that end in death (terminated without the task), mean episode length, and the "
                  "share that unlocked each step of the chain (mean over the seeds that have them).", "",
                  "| arm | seeds | died | mean length | " + " | ".join(chain) + " |",
                  "|---|---|---|---|" + "---|" * len(chain)]
        for arm, st in play_stats.items():
            lines.append(f"| {arm} | {st['seeds']} | {st['died']:.2f} | {st['mean_length']:.0f} | "
                         + " | ".join(f"{st['chain'][a]:.2f}" for a in chain) + " |")
    lines += ["", "## Data and training", ""]
    for arm, d in data.items():
        bc = next(iter(clones[arm].values()))["bc"]
        rounds = bc.get("dagger") or []
        lines.append(f"- `{arm}`: {d['steps']:,} expert steps in {d['mode']} mode collected; {bc['train_steps']:,} "
                     f"trained on, {bc['val_steps']:,} held out" + (
                         f"; then {len(rounds)} DAgger rounds of {rounds[0]['steps']:,} steps played by the clone and "
                         f"labelled by the expert ({rounds[-1]['data_steps']:,} steps in all; the clone's action agreed "
                         f"with the expert's label in " + ", ".join(f"{r['agreement']:.2f}" for r in rounds)
                         + " of them, round by round)" if rounds else ""))
    lines += ["", f"BC: {args.updates} updates of {args.batch_steps} steps, Adam lr {args.lr}, hidden {args.hidden}; "
              f"seen map {args.map_size}x{args.map_size}.", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    result = {"study": "ptgm_bc", "variant": variant, "env": "craftax", "task": task,
              "budget_steps": args.collect_steps, "metric": f"success on {task} (first episode per env)",
              "metric_key": "success", "value": {"kind": "success_rate", "episodes": args.episodes},
              "higher_is_better": True, "control": control, "arms": arms, "paired": paired,
              "seeds": sorted(values[control]), "failed": [],
              "details": {"share": share, "val_accuracy": accuracy,
                          "val_accuracy_mean": {arm: float(np.mean(list(acc.values()))) for arm, acc in accuracy.items()},
                          "episodes": play_stats,
                          "bc": {arm: {s: {k: r["bc"][k] for k in ("train_steps", "val_steps", "seq_len", "updates",
                                                                    "batch_steps", "seconds")}
                                       for s, r in by_seed.items()} for arm, by_seed in clones.items()},
                          "data": data},
              "notes": [], "produced_by": "benchmarks/studies/ptgm_bc.py", "commit": commit(),
              "command": " ".join(["benchmarks/studies/ptgm_bc.py", *sys.argv[1:]])}
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"ptgm_bc/{variant}: {out / 'report.md'}")
    return out


def harness():
    """benchmarks/harness/, imported when the command line is read (its seeds)."""
    import harness

    return harness


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env-id", default="craftax", choices=("craftax",))
    p.add_argument("--tasks", default="make_wood_pickaxe,make_stone_pickaxe")
    p.add_argument("--task", default=None, help="one task (overrides --tasks)")
    p.add_argument("--seeds", default="3", type=harness().seeds_arg,
                   help="a count (3 = seeds 0,1,2), a list 0,1,2 (2, = seed 2 alone) or a range 0-2")
    p.add_argument("--steps", "--collect-steps", dest="collect_steps", type=int, default=300_000,
                   help="expert steps collected per mode (all 64 envs together)")
    p.add_argument("--collect-max-steps", type=int, default=1000, help="episode cap while collecting")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--episodes", type=int, default=64, help="envs played per seed and task (first episodes)")
    p.add_argument("--map-size", type=int, default=15)
    p.add_argument("--updates", type=int, default=3000)
    p.add_argument("--batch-steps", type=int, default=1024)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--runs", type=Path, default=Path("runs/studies/ptgm_bc"))
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--variant", default=None)
    p.add_argument("--dagger-steps", type=int, default=64_000, help="env steps the clone plays per DAgger round")
    p.add_argument("--dagger-updates", type=int, default=1000, help="BC updates after each DAgger round")
    p.add_argument("--report-only", action="store_true", help="report the clones that finished; train none")
    p.add_argument("--diagnose", action="store_true",
                   help="replay finished clones whose results lack the death and chain columns, and add them")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    args.tasks = [args.task] if args.task else [t for t in args.tasks.split(",") if t]
    seeds = harness().parse_seeds(args.seeds)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"--arms: unknown {unknown}; choose from {list(ARMS)}", file=sys.stderr)
        return 2
    from llmguide.envs.crafter.rules import ACHIEVEMENTS

    bad = [t for t in args.tasks if t not in ACHIEVEMENTS]
    if bad:
        print(f"--tasks: unknown {bad}; choose from {ACHIEVEMENTS}", file=sys.stderr)
        return 2
    modes = sorted({ARMS[a]["data"] for a in arms})
    data = {} if args.report_only else {m: collect(m, args.collect_steps, args.collect_max_steps, args.map_size,
                       args.runs / f"data-{m}-{args.collect_steps}-cap{args.collect_max_steps}-map{args.map_size}.npz")
            for m in modes}
    if args.report_only:   # whatever clones have finished, each arm over its own seeds
        clones = {arm: {s: json.loads((args.runs / arm / f"seed-{s}" / "result.json").read_text()) for s in seeds
                        if (args.runs / arm / f"seed-{s}" / "result.json").exists()} for arm in arms}
        clones = {arm: by_seed for arm, by_seed in clones.items() if by_seed}
    else:
        clones = {arm: {s: run_clone(arm, s, args, data) for s in seeds} for arm in arms}
    if args.diagnose:
        for arm, by_seed in clones.items():
            for s in by_seed:
                diagnose(arm, s, args)
                clones[arm][s] = json.loads((args.runs / arm / f"seed-{s}" / "result.json").read_text())
    for task in args.tasks:
        values = {"expert": {s: run_expert("expert", task, "plain", s, args) for s in seeds}}
        for m in modes:
            values[f"teacher-{m}"] = {s: run_expert(f"teacher-{m}", task, m, s, args) for s in seeds}
        for arm, by_seed in clones.items():
            values[arm] = {s: r["tasks"][task]["success"] for s, r in by_seed.items()}
        write_report(task, args, values, clones)
    return 0


if __name__ == "__main__":
    sys.exit(main())
