"""GLAM's premise, measured: is the untrained LM's prior over BabyAI-Text action strings better than chance?

On held-out BabyAI-Text prompts (the states of BabyAIBot episodes, :func:`llmguide.envs.babyai.bot.bot_episodes`,
rendered with GLAM's prompt, :func:`llmguide.methods.glam.policy.glam_prompt`) the LM scores the six action
strings (summed token log-probs, softmax over the six: GLAM's policy before any training).  Per level and
prompt variant (1 or 3 observations, with or without the action list):

- top-1 agreement with the bot's action, against chance (1/|A|) and the majority baseline (always the
  bot's most frequent action);
- the mean probability given to the bot's action, against 1/|A|;
- per bot action: how often it occurs, the LM's recall of it, the mean probability the LM gives it;
  and how often the LM's argmax is each action.

Then zero-shot episodes (greedy and sampled, one prompt variant) against a uniform random policy.

    nice -n 10 python benchmarks/analyses/glam_prior.py --llm embedded --prompts 60 --episodes 10
    python benchmarks/analyses/glam_prior.py --llm http --llm-set base_url=http://host:8000/v1 --llm-set model=NAME

Writes ``result.json`` and ``report.md`` under ``--out`` (default ``benchmarks/results/glam/prior``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.envs.babyai.env import ACTION_STRINGS
from llmguide.methods.glam.policy import glam_prompt

HELD_OUT_SEED = 7_000_000          # bot episodes and evaluation episodes: seeds no training run uses
VARIANTS = {"k3+list": (3, True), "k1+list": (1, True), "k3-list": (3, False), "k1-list": (1, False)}
DEFAULT_TASKS = ["GoToLocal", "PickupLocal", "PutNextLocal"]


# --- metrics -------------------------------------------------------------------------------------
def softmax(scores: np.ndarray) -> np.ndarray:
    z = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def prior_metrics(scores: np.ndarray, targets: Sequence[int], names: Sequence[str] = ACTION_STRINGS) -> dict:
    """Agreement of the policy ``softmax(scores)`` (``(n, A)`` LM scores) with the bot's actions ``targets``."""
    scores = np.asarray(scores, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.intp)
    n, num_actions = scores.shape
    if n == 0 or len(targets) != n:
        raise ValueError(f"need one target per row, got {len(targets)} for {n} rows")
    probs = softmax(scores)
    argmax = probs.argmax(-1)
    p_bot = probs[np.arange(n), targets]
    bot_freq = np.bincount(targets, minlength=num_actions) / n
    per_action = {}
    for a, name in enumerate(names):
        rows = targets == a
        per_action[name] = {"bot_count": int(rows.sum()),
                            "recall": float((argmax[rows] == a).mean()) if rows.any() else None,
                            "mean_p_when_bot": float(probs[rows, a].mean()) if rows.any() else None,
                            "mean_p": float(probs[:, a].mean()),
                            "lm_argmax_freq": float((argmax == a).mean())}
    return {"n": int(n), "chance": 1.0 / num_actions, "blind_p_bot": blind_p_bot(per_action, n),
            "top1_agreement": float((argmax == targets).mean()),
            "majority_baseline": float(bot_freq.max()),
            "mean_p_bot": float(p_bot.mean()),
            "mean_p_bot_se": float(p_bot.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
            "mean_logp_bot": float(np.log(np.maximum(p_bot, 1e-300)).mean()),
            "mean_entropy": float(-(probs * np.log(np.maximum(probs, 1e-300))).sum(-1).mean()),
            "per_action": per_action}


def blind_p_bot(per_action: dict, n: int) -> float:
    """p(bot action) of the state-blind policy that always plays the LM's mean distribution over these states:
    what a constant bias (e.g. towards "go forward") earns with no knowledge of the state."""
    return float(sum(a["bot_count"] * a["mean_p"] for a in per_action.values()) / max(n, 1))


# --- prompts from bot episodes --------------------------------------------------------------------
def prompt_at(mission: str, captions: Sequence[str], actions: Sequence[int], t: int, k: int, action_list: bool,
              names: Sequence[str] = ACTION_STRINGS) -> str:
    """GLAM's prompt for step ``t`` of an episode: the last ``k`` captions up to ``captions[t]``."""
    start = max(0, t - k + 1)
    return glam_prompt(mission, list(captions[start:t + 1]), [names[a] for a in actions[start:t]], names, action_list)


def bot_states(task: str, num_prompts: int, seed: int, timeout: float = 5.0) -> list[dict]:
    """``num_prompts`` states drawn without replacement from successful bot episodes (held-out seeds)."""
    from llmguide.envs.babyai.bot import bot_episodes
    from llmguide.envs.babyai.env import BabyAIText

    env = BabyAIText(task=task)
    states: list[dict] = []
    episodes = 0
    rng = np.random.default_rng(seed)
    for ep in bot_episodes([env], (seed + i for i in range(10 * num_prompts + 10)), timeout=timeout):
        if ep.error or not ep.success:
            continue
        captions = [info["caption"] for info in ep.infos[:-1]]
        states += [{"mission": ep.mission, "captions": captions, "actions": ep.actions, "t": t}
                   for t in range(len(ep.actions))]
        episodes += 1
        # at most ~4 states per episode on average: many layouts rather than a few long episodes
        if len(states) >= num_prompts and episodes * 4 >= num_prompts:
            break
    env.close()
    idx = rng.choice(len(states), size=min(num_prompts, len(states)), replace=False)
    return [states[int(i)] for i in sorted(idx)]


def score_prompts(lm: Any, prompts: Sequence[str], names: Sequence[str] = ACTION_STRINGS,
                  chunk: int = 8) -> np.ndarray:
    """``(n, A)`` summed log-probs of ``" " + action`` after each prompt."""
    cands = [" " + a for a in names]
    out: list[list[float]] = []
    for i in range(0, len(prompts), chunk):
        batch = list(prompts[i:i + chunk])
        out += lm.score(batch, [cands] * len(batch))
    return np.asarray(out, dtype=np.float64).reshape(len(prompts), len(names))


# --- episodes ------------------------------------------------------------------------------------
def run_episodes(task: str, seeds: Sequence[int], policy: str, lm: Any = None, k: int = 3, action_list: bool = True,
                 rng_seed: int = 0, names: Sequence[str] = ACTION_STRINGS, max_steps: int | None = None) -> dict:
    """Episodes on ``seeds``, stepped in lock-step (one batched score call per step): ``policy`` is
    ``greedy`` / ``sampled`` (the LM's softmax) or ``random`` (uniform); ``max_steps`` caps an episode (a
    failure when reached) below the level's own cap, the same for every policy."""
    from llmguide.envs.babyai.env import BabyAIText
    from llmguide.methods.glam.policy import History

    rng = np.random.default_rng(rng_seed)
    envs = [BabyAIText(task=task) for _ in seeds]
    hist = History(len(envs), k)
    for i, (env, s) in enumerate(zip(envs, seeds, strict=True)):
        _, info = env.reset(seed=int(s))
        hist.reset(i, info["mission"], info["caption"])
    live, success, lengths, contexts = list(range(len(envs))), [False] * len(envs), [0] * len(envs), 0
    while live:
        if policy == "random":
            acts = rng.integers(len(names), size=len(live))
        else:
            prompts = [glam_prompt(hist.goals[i], list(hist.obs[i]), list(hist.actions[i]), names, action_list)
                       for i in live]
            probs = softmax(score_prompts(lm, prompts, names))
            contexts += len(prompts)
            acts = probs.argmax(-1) if policy == "greedy" else [int(rng.choice(len(names), p=p)) for p in probs]
        still = []
        for i, a in zip(live, acts, strict=True):
            _, _, term, trunc, info = envs[i].step(int(a))
            lengths[i] += 1
            if term or trunc or (max_steps is not None and lengths[i] >= max_steps):
                success[i] = bool(info.get("success"))
            else:
                hist.step(i, names[int(a)], info["caption"])
                still.append(i)
        live = still
    for env in envs:
        env.close()
    return {"policy": policy, "episodes": len(envs), "success_rate": float(np.mean(success)),
            "mean_length": float(np.mean(lengths)), "contexts_scored": contexts, "max_steps": max_steps}


# --- LM ------------------------------------------------------------------------------------------
def build_lm(kind: str, settings: Sequence[str], device: str = "cpu") -> Any:
    """The uncached backend ``kind`` (embedded | hf | http), ``settings`` as ``key=value`` llm options."""
    from llmguide.llm.factory import make_backend

    cfg: dict[str, Any] = {"backend": kind}
    if kind == "embedded":
        cfg["n_threads"] = 2
    if kind == "hf":
        cfg["device"] = device
    for item in settings:
        key, _, value = item.partition("=")
        cfg[key] = value
    return make_backend(cfg)


# --- report --------------------------------------------------------------------------------------
def verdict(prior: dict) -> str:
    """One line per the numbers: above chance when the mean p(bot action) beats 1/|A| by 2 SE and
    the top-1 agreement beats chance, and 'beats the majority baseline' only when it does."""
    rows = [m for per in prior.values() for m in per.values()]
    above = [m for m in rows if m["mean_p_bot"] - 2 * m["mean_p_bot_se"] > m["chance"]
             and m["top1_agreement"] > m["chance"]]
    blind = [m for m in rows if "per_action" in m]
    knows = [m for m in blind if m["mean_p_bot"] - 2 * m["mean_p_bot_se"] > blind_p_bot(m["per_action"], m["n"])]
    state = (f"; {len(knows)}/{len(blind)} beat the LM's own state-blind average distribution (by 2 SE), "
             "i.e. show knowledge of the state beyond a constant bias") if blind else ""
    over_major = [m for m in above if m["top1_agreement"] > m["majority_baseline"]]
    counts = (f"{len(above)}/{len(rows)} (level, variant) cells are above chance on both the probability of the "
              f"bot's action (by 2 SE) and top-1 agreement; {len(over_major)}/{len(rows)} also beat the majority "
              f"baseline{state}")
    if not above:
        return f"the LM's prior is not better than chance on BabyAI-Text: {counts}."
    if blind and not knows:
        return (f"the LM's prior is not better than a constant bias on BabyAI-Text: its probability on the bot's "
                f"action never beats its own state-blind average, so where it beats chance a fixed preference "
                f"(e.g. for the bot's commonest action) explains it. {counts[0].upper()}{counts[1:]}.")
    if not over_major:
        return (f"the LM's prior is better than chance in a minority of cells at most and never better than always "
                f"taking the bot's commonest action, a weak start for GLAM: {counts}." if 2 * len(above) < len(rows)
                else f"the LM's prior is better than chance but not better than always taking the bot's commonest "
                     f"action: {counts}.")
    return f"the LM's prior is better than chance and than the majority baseline in some cells: {counts}."


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def write_report(result: dict, out: Path) -> None:
    lines = [f"# GLAM prior probe: {result['lm']}", "",
             f"Held-out BabyAI-Text prompts from BabyAIBot episodes (seeds from {HELD_OUT_SEED}), "
             f"{result['prompts']} states per level; the LM's softmax over the six action strings vs the bot's action. "
             f"Chance = 1/6 = 0.167. Wall time {result['wall_s']:.0f} s.", "",
             f"**Verdict:** {result['verdict']}", "",
             "`state-blind` = p(bot) of a policy that always plays the LM's mean distribution over these states "
             "(a constant bias, no knowledge of the state).", "",
             "| level | variant | n | top-1 agree | majority | mean p(bot) ± SE | state-blind p(bot) | entropy |",
             "|---|---|---|---|---|---|---|---|"]
    for task, per in result["prior"].items():
        for var, m in per.items():
            lines.append(f"| {task} | {var} | {m['n']} | {m['top1_agreement']:.3f} | {m['majority_baseline']:.3f} | "
                         f"{m['mean_p_bot']:.3f} ± {m['mean_p_bot_se']:.3f} | "
                         f"{blind_p_bot(m['per_action'], m['n']):.3f} | {m['mean_entropy']:.2f} |")
    lines += ["", "Per bot action (variant k3+list, all levels pooled): how often the bot takes it, the LM's recall, "
              "mean p when it is the bot's action, mean p overall, how often the LM's argmax is it.", "",
              "| action | bot count | recall | p when bot | mean p | LM argmax freq |", "|---|---|---|---|---|---|"]
    for name, a in result["per_action_pooled"].items():
        lines.append(f"| {name} | {a['bot_count']} | {_fmt(a['recall'])} | {_fmt(a['mean_p_when_bot'])} | "
                     f"{a['mean_p']:.3f} | {a['lm_argmax_freq']:.3f} |")
    if result["episodes"]:
        cap = next((r.get("max_steps") for rows in result["episodes"].values() for r in rows), None)
        lines += ["", f"Zero-shot episodes (prompt {result['episode_variant']}, sampled = the LM's softmax"
                  + (f"; an episode is a failure after {cap} steps, for every policy" if cap else "") + "):", "",
                  "| level | policy | episodes | success | mean length |", "|---|---|---|---|---|"]
        for task, rows in result["episodes"].items():
            for r in rows:
                lines.append(f"| {task} | {r['policy']} | {r['episodes']} | {r['success_rate']:.2f} | "
                             f"{r['mean_length']:.1f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", "--env-id", dest="tasks", nargs="+", default=DEFAULT_TASKS)
    ap.add_argument("--prompts", type=int, default=30, help="held-out bot states per level")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--episodes", type=int, default=4, help="zero-shot episodes per level and policy (0: none)")
    ap.add_argument("--episode-tasks", nargs="*", default=["GoToLocal"])
    ap.add_argument("--episode-variant", default="k1+list", choices=list(VARIANTS))
    ap.add_argument("--episode-max-steps", type=int, default=64,
                    help="zero-shot episodes end as failures after this many steps (every policy; 0: the level's cap)")
    ap.add_argument("--seeds", type=int, default=1, help="bot/evaluation seed blocks (each adds --prompts states)")
    ap.add_argument("--llm", default="embedded", choices=["embedded", "hf", "http"])
    ap.add_argument("--llm-set", action="append", default=[], help="llm option key=value (e.g. base_url=..., model=...)")
    ap.add_argument("--device", default="cpu", help="llm=hf device (cuda refuses cleanly without CUDA)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/glam/prior"))
    ap.add_argument("--report-from", type=Path, default=None,
                    help="no LM: rewrite report.md (and the verdict) from this result.json into --out")
    args = ap.parse_args(argv)
    if args.report_from is not None:
        result = json.loads(args.report_from.read_text())
        result["verdict"] = verdict(result["prior"])
        write_report(result, args.out)
        print(result["verdict"])
        return 0
    if args.device.startswith("cuda"):
        from llmguide.methods.glam.device import require_device

        if (msg := require_device(args.device)) is not None:
            print(msg)
            return 2
    start = time.perf_counter()
    lm = build_lm(args.llm, args.llm_set, args.device)
    prior: dict[str, dict] = {}
    pooled_scores, pooled_targets = [], []
    for task in args.tasks:
        states = [s for b in range(args.seeds) for s in bot_states(task, args.prompts, HELD_OUT_SEED + 100_000 * b)]
        targets = [s["actions"][s["t"]] for s in states]
        prior[task] = {}
        for var in args.variants:
            k, action_list = VARIANTS[var]
            prompts = [prompt_at(s["mission"], s["captions"], s["actions"], s["t"], k, action_list) for s in states]
            scores = score_prompts(lm, prompts)
            prior[task][var] = prior_metrics(scores, targets)
            if var == "k3+list":
                pooled_scores.append(scores)
                pooled_targets += targets
            m = prior[task][var]
            print(f"{task:14s} {var:8s} n={m['n']} agree={m['top1_agreement']:.3f} (major {m['majority_baseline']:.3f}) "
                  f"p(bot)={m['mean_p_bot']:.3f}±{m['mean_p_bot_se']:.3f} chance={m['chance']:.3f}", flush=True)
    pooled = prior_metrics(np.concatenate(pooled_scores), pooled_targets)["per_action"] if pooled_scores else {}
    episodes: dict[str, list] = {}
    result = {"lm": f"{args.llm} {getattr(lm, 'model_id', '')}".strip(), "prompts": args.prompts * args.seeds,
              "prior": prior, "per_action_pooled": pooled, "episodes": episodes,
              "episode_variant": args.episode_variant, "wall_s": time.perf_counter() - start, "verdict": verdict(prior)}
    write_report(result, args.out)   # the prior's table is kept even if the episodes are cut off
    print(result["verdict"], flush=True)
    k, action_list = VARIANTS[args.episode_variant]
    cap = args.episode_max_steps or None
    for task in args.episode_tasks if args.episodes else []:
        seeds = [HELD_OUT_SEED + 50_000 + i for i in range(args.episodes)]
        episodes[task] = [run_episodes(task, seeds, p, lm, k, action_list, max_steps=cap)
                          for p in ("random", "greedy", "sampled")]
        for r in episodes[task]:
            print(f"{task:14s} {r['policy']:8s} success={r['success_rate']:.2f} len={r['mean_length']:.1f}", flush=True)
        result["wall_s"] = time.perf_counter() - start
        write_report(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
