"""LM backend costs on this machine: generation tokens/s, scoring candidates/s, shared-prefix vs naive
scoring, and cache-hit latency.

For each backend (``embedded`` llama.cpp, ``hf`` transformers float32) it measures, in one run:

- generation: completion tokens per second at temperature 0 (``--gen-tokens`` per prompt);
- scoring: candidates per second with the shared prefix (context evaluated once per context) and
  with the naive reference (one full forward per candidate), and their ratio;
- cache: the latency of a ``CachedLM`` hit against a backend call (embedded backend).

- ELLM over the open vocabulary (``--ellm``): candidates/s when scoring all 139 action strings for distinct
  state captions with the prompt each model is used with (Gemma: ``ellm_goal_score``, completion-style; Qwen:
  ``ellm_actions_score_listed``, chat), seconds per generated answer (Qwen: ``ellm_actions_listed``), and, with
  ``--data`` (a collection run), the queries that cover 95 % of its steps and the time to answer them.

``--backends``: ``embedded`` (Gemma 3 270M), ``qwen`` (``make qwen``), ``hf``.

Wall-clock is noisy on a shared machine; the ratios compare measurements taken in the same run.
Writes ``<out>/llm_bench.md`` and ``<out>/llm_bench.json`` and prints the table::

    nice python benchmarks/costs/llm.py --out runs/bench_llm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A GLAM-like BabyAI prompt (about 100 tokens) and its six action strings.
CONTEXT = (
    "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle\n"
    "Goal of the agent: go to the red ball\n"
    "Observation 0: You see a wall 3 steps forward, You see a grey key 1 step left and 2 steps forward, "
    "You see a red ball 2 steps right and 1 step forward, You see a blue box 1 step right\n"
    "Action 0: turn left\n"
    "Observation 1: You see a wall 2 steps forward, You see a red ball 1 step right and 2 steps forward\n"
    "Action 1:"
)
CANDIDATES = [" turn left", " turn right", " go forward", " pick up", " drop", " toggle"]
PROMPTS = ["You are a player in a 2D survival game. You see a tree and water. A good next goal is",
           "Goal of the agent: go to the red ball. The best next action is"]


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_backend(name: str, lm, args: argparse.Namespace) -> dict:
    """Generation tokens/s, shared and naive scoring candidates/s for one backend."""
    lm.generate(PROMPTS[:1], max_tokens=4)           # warm-up
    lm.score([CONTEXT], [CANDIDATES[:2]])
    start = time.perf_counter()
    comps = lm.generate(PROMPTS, max_tokens=args.gen_tokens)
    gen_s = time.perf_counter() - start
    tokens = sum(c.completion_tokens for c in comps)
    contexts, cands = [CONTEXT] * args.contexts, [CANDIDATES] * args.contexts
    n = sum(len(c) for c in cands)
    shared_s = timed(lambda: lm.score(contexts, cands), args.repeats)
    naive_s = timed(lambda: lm.naive_score(contexts, cands), args.repeats)
    shared, naive = lm.score(contexts[:1], cands[:1])[0], lm.naive_score(contexts[:1], cands[:1])[0]
    return {
        "backend": name,
        "gen_tokens_per_s": tokens / gen_s,
        "gen_tokens": tokens,
        "score_cands_per_s_shared": n / shared_s,
        "score_cands_per_s_naive": n / naive_s,
        "shared_over_naive_speedup": naive_s / shared_s,
        "max_abs_diff_shared_vs_naive": max(abs(a - b) for a, b in zip(shared, naive, strict=True)),
    }


def bench_cache(lm, args: argparse.Namespace) -> dict:
    """Latency of a CachedLM hit versus the backend call it replaces (temporary cache file)."""
    try:
        from llmguide.llm.cache.cached_lm import CachedLM
        from llmguide.llm.cache.store import LLMCache
    except ImportError:
        return {"cache": "llmguide.llm.cache.store not available"}
    with tempfile.TemporaryDirectory() as tmp:
        cache = LLMCache(Path(tmp) / "bench.sqlite")
        cached = CachedLM(lm, cache, template_version="bench")
        prompt = [PROMPTS[0] + " (cache bench)"]
        start = time.perf_counter()
        cached.generate(prompt, max_tokens=args.gen_tokens)
        miss_s = time.perf_counter() - start
        hit_gen = timed(lambda: cached.generate(prompt, max_tokens=args.gen_tokens), 20)
        cached.score([CONTEXT], [CANDIDATES])
        hit_score = timed(lambda: cached.score([CONTEXT], [CANDIDATES]), 20)
        stats = cached.stats
        cache.close()
    return {"cache_miss_generate_ms": miss_s * 1e3, "cache_hit_generate_ms": hit_gen * 1e3,
            "cache_hit_score_ms": hit_score * 1e3, "miss_over_hit": miss_s / hit_gen,
            "cache_hits": stats["hits"], "cache_misses": stats["misses"]}


ELLM_CAPTIONS = [
    "You see grass, tree. You have nothing.", "You see grass, stone, tree, water. You have 2 wood.",
    "You see cow, grass, tree. You have 1 sapling. You feel hungry.",
    "You see grass, stone, table, tree. You have 1 wood pickaxe, 3 wood.",
    "You see coal, grass, stone. You have 1 wood pickaxe, 4 stone.", "You see grass, water. You feel thirsty.",
    "You see grass, path, stone, table, tree. You have 2 wood, 1 sapling.", "You see sand, water, zombie. You have 1 wood.",
    "You see furnace, iron, stone, table. You have 1 stone pickaxe, 2 coal, 4 stone.",
    "You see grass, plant, tree. You have 1 wood sword. You feel sleepy.",
]


def bench_ellm(name: str, lm, args: argparse.Namespace) -> dict:
    """ELLM-open on ``lm``: candidates/s scoring the 139 action strings (the first caption warms the shared
    prefix, as the first query of a table build does), seconds per generated answer (instruct models), and the
    time to answer the queries that cover 95 % of ``--data``'s steps."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.methods.ellm.prompts import template
    from llmguide.methods.ellm.signature import goal_request

    chat = bool(getattr(lm, "chat", False))
    score_t = template("ellm_actions_score_listed" if chat else "ellm_goal_score")
    reqs = [goal_request("score", score_t, c, ACTION_STRINGS)[1] for c in ELLM_CAPTIONS]
    lm.score([reqs[0]["context"]], [reqs[0]["candidates"]])
    start = time.perf_counter()
    for r in reqs[1:]:
        lm.score([r["context"]], [r["candidates"]])
    per_score = (time.perf_counter() - start) / (len(reqs) - 1)
    out = {"backend": name, "prompt": score_t.version, "score_s_per_query": per_score,
           "score_cands_per_s": len(ACTION_STRINGS) / per_score}
    if chat:
        gen_t = template("ellm_actions_listed")
        gens = [goal_request("generate", gen_t, c, ACTION_STRINGS, max_tokens=48)[1] for c in ELLM_CAPTIONS[:5]]
        lm.generate([gens[0]["prompt"]], max_tokens=48, stop=gens[0]["stop"])
        start = time.perf_counter()
        done = lm.generate([g["prompt"] for g in gens[1:]], max_tokens=48, stop=gens[0]["stop"])
        per_gen = (time.perf_counter() - start) / (len(gens) - 1)
        out.update({"generate_prompt": gen_t.version, "generate_s_per_query": per_gen,
                    "generate_tokens_per_s": sum(c.completion_tokens for c in done) / (per_gen * len(done))})
    if args.data:
        from collections import Counter

        from llmguide.llm.table import Query, coverage_curve
        from llmguide.methods.ellm.signature import state_signature
        from llmguide.pipelines.answers import data_captions

        captions, _ = data_captions(args.data)
        steps = Counter(state_signature(c).caption() for c in captions if c)
        curve = coverage_curve([Query("score", {"context": k, "candidates": []}, v, k) for k, v in steps.most_common()])
        fastest = min(per_score, out.get("generate_s_per_query", per_score))
        out.update({"data_steps": len(captions), "queries_for_95pct": curve["95%"],
                    "table_minutes_95pct_score": curve["95%"] * per_score / 60,
                    "table_minutes_95pct_fastest_mode": curve["95%"] * fastest / 60})
    return out


def table(rows: list[dict], cache: dict) -> str:
    lines = ["| backend | gen tokens/s | score cands/s (shared prefix) | score cands/s (naive) | "
             "shared/naive speed-up | max |shared-naive| (nat) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['gen_tokens_per_s']:.1f} | {r['score_cands_per_s_shared']:.1f} | "
                     f"{r['score_cands_per_s_naive']:.1f} | {r['shared_over_naive_speedup']:.2f}x | "
                     f"{r['max_abs_diff_shared_vs_naive']:.2g} |")
    if "cache_hit_generate_ms" in cache:
        lines += ["", "| cache (embedded) | miss generate | hit generate | hit score | miss/hit |", "|---|---|---|---|---|",
                  f"| CachedLM + SQLite | {cache['cache_miss_generate_ms']:.1f} ms | "
                  f"{cache['cache_hit_generate_ms']:.3f} ms | {cache['cache_hit_score_ms']:.3f} ms | "
                  f"{cache['miss_over_hit']:.0f}x |"]
    else:
        lines += ["", f"cache: {cache.get('cache')}"]
    return "\n".join(lines)


def ellm_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    lines = ["", "ELLM-open: the 139 action strings for one state caption per query (prefix kept between queries).", "",
             "| backend | score prompt | s/query | candidates/s | generate s/query | gen tokens/s | queries for 95 % | "
             "table min (score) | table min (fastest mode) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(key, fmt, r=r):
            return format(r[key], fmt) if key in r else "-"
        lines.append(f"| {r['backend']} | {r['prompt']} | {r['score_s_per_query']:.2f} | {r['score_cands_per_s']:.0f} | "
                     f"{f('generate_s_per_query', '.2f')} | {f('generate_tokens_per_s', '.1f')} | "
                     f"{f('queries_for_95pct', 'd')} | {f('table_minutes_95pct_score', '.0f')} | "
                     f"{f('table_minutes_95pct_fastest_mode', '.0f')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/bench_llm")
    parser.add_argument("--backends", default="embedded,hf", help="comma list of embedded,hf")
    parser.add_argument("--contexts", type=int, default=2, help="contexts per scoring call (6 candidates each)")
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ellm", action=argparse.BooleanOptionalAction, default=True,
                        help="also time ELLM-open scoring and generation (139 action strings)")
    parser.add_argument("--data", default=None, help="a collection run: estimate the 95 %% answer-table build time")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    rows, cache, ellm_rows = [], {}, []
    for name in args.backends.split(","):
        start = time.perf_counter()
        if name == "embedded":
            from llmguide.llm.backends.embedded import EmbeddedLM

            lm = EmbeddedLM()
        elif name == "qwen":
            from llmguide.llm.backends.embedded import EmbeddedLM

            lm = EmbeddedLM(model="qwen2.5-coder-1.5b-instruct-q4_k_m", n_ctx=4096, n_threads=os.cpu_count() or 2)
        elif name == "hf":
            from llmguide.llm.backends.hf import HFLM

            lm = HFLM()
        else:
            raise SystemExit(f"unknown backend {name!r} (embedded, qwen, hf)")
        load_s = time.perf_counter() - start
        row = bench_backend(name, lm, args)
        row["load_s"] = load_s
        rows.append(row)
        if name == "embedded":
            cache = bench_cache(lm, args)
        if args.ellm and name in ("embedded", "qwen"):
            ellm_rows.append(bench_ellm(name, lm, args))
            print(json.dumps(ellm_rows[-1]), flush=True)
        lm.close()
        print(json.dumps(row), flush=True)

    text = (f"# LM backends on this machine ({os.cpu_count()} CPUs, shared)\n\n"
            f"Context ~100 tokens, {len(CANDIDATES)} candidates x {args.contexts} contexts per scoring call, "
            f"median of {args.repeats}; generation {args.gen_tokens} tokens x {len(PROMPTS)} prompts.\n\n"
            + table(rows, cache) + "\n" + ellm_table(ellm_rows))
    (out / "llm_bench.md").write_text(text)
    (out / "llm_bench.json").write_text(json.dumps({"backends": rows, "cache": cache, "ellm_open": ellm_rows},
                                                   indent=2))
    print(text)


if __name__ == "__main__":
    main()
