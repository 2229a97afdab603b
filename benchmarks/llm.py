"""LM backend costs on this machine: generation tokens/s, scoring candidates/s, shared-prefix vs naive
scoring, and cache-hit latency.

For each backend (``embedded`` llama.cpp, ``hf`` transformers float32) it measures, in one run:

- generation: completion tokens per second at temperature 0 (``--gen-tokens`` per prompt);
- scoring: candidates per second with the shared prefix (context evaluated once per context) and
  with the naive reference (one full forward per candidate), and their ratio;
- cache: the latency of a ``CachedLM`` hit against a backend call (embedded backend).

Wall-clock is noisy on a shared machine; the ratios compare measurements taken in the same run.
Writes ``<out>/llm_bench.md`` and ``<out>/llm_bench.json`` and prints the table::

    nice python benchmarks/llm.py --out runs/bench_llm
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
        from llmguide.llm.cache import LLMCache
        from llmguide.llm.cached_lm import CachedLM
    except ImportError:
        return {"cache": "llmguide.llm.cache not available"}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/bench_llm")
    parser.add_argument("--backends", default="embedded,hf", help="comma list of embedded,hf")
    parser.add_argument("--contexts", type=int, default=2, help="contexts per scoring call (6 candidates each)")
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    rows, cache = [], {}
    for name in args.backends.split(","):
        start = time.perf_counter()
        if name == "embedded":
            from llmguide.llm.embedded import EmbeddedLM

            lm = EmbeddedLM()
        elif name == "hf":
            from llmguide.llm.hf import HFLM

            lm = HFLM()
        else:
            raise SystemExit(f"unknown backend {name!r} (embedded, hf)")
        load_s = time.perf_counter() - start
        row = bench_backend(name, lm, args)
        row["load_s"] = load_s
        rows.append(row)
        if name == "embedded":
            cache = bench_cache(lm, args)
        lm.close()
        print(json.dumps(row), flush=True)

    text = (f"# LM backends on this machine ({os.cpu_count()} CPUs, shared)\n\n"
            f"Context ~100 tokens, {len(CANDIDATES)} candidates x {args.contexts} contexts per scoring call, "
            f"median of {args.repeats}; generation {args.gen_tokens} tokens x {len(PROMPTS)} prompts.\n\n"
            + table(rows, cache) + "\n")
    (out / "llm_bench.md").write_text(text)
    (out / "llm_bench.json").write_text(json.dumps({"backends": rows, "cache": cache}, indent=2))
    print(text)


if __name__ == "__main__":
    main()
