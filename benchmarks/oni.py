"""ONI-Retrieval and ONI-Classification vs extrinsic-only PPO on a sparse MiniHack task, several seeds.

Also measures annotation throughput (labels/s of the embedded LM in score and generate mode, cold
cache, same run) and the number of duplicate LM requests (must be 0).  All runs share one LM
cache (as seeds of a study would), so later seeds reuse the labels of earlier ones.

    nice .venv/bin/python benchmarks/oni.py --steps 8000 --seeds 3 --out runs/bench_oni

Writes ``results.md`` (table), ``results.json`` and ``curves.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np


def run_one(method: str, seed: int, args: argparse.Namespace, runs: Path) -> dict:
    from llmguide.core.config import load_config
    from llmguide.pipelines import run

    name = f"{method}-s{seed}"
    overrides = ["env=minihack", f"env.id={args.env}", f"method={method}", f"seed={seed}",
                 f"total_steps={args.steps}", f"num_envs={args.num_envs}", f"agent.num_steps={args.rollout}",
                 f"agent.hidden={args.hidden}", f"run.dir={runs}", f"run.name={name}", "run.overwrite=true",
                 "eval.episodes=0", "progress=false", f"log_every={args.rollout * args.num_envs}"]
    if method == "none":
        overrides.append(f"method.extrinsic_coef={args.extrinsic_coef}")
    start = time.perf_counter()
    run("train", load_config(overrides))
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines() if line]
    episodes = [r for r in records if "charts/episodic_return" in r]
    lm = ([r for r in records if "lm/annot_requests" in r] or [{}])[-1]
    last = episodes[-max(1, len(episodes) // 5):]  # final 20% of the episodes
    return {
        "method": method, "seed": seed, "wall_s": wall, "sps": args.steps / wall, "episodes": len(episodes),
        "final_return": float(np.mean([e["charts/episodic_return"] for e in last])) if last else float("nan"),
        "final_success": float(np.mean([e.get("charts/success", 0.0) for e in last])) if last else float("nan"),
        "curve": [(e["step"], e["charts/episodic_return"]) for e in episodes],
        "lm_requests": lm.get("lm/annot_requests", 0.0), "duplicate_requests": lm.get("lm/annot_duplicate_requests", 0.0),
        "labels_reused_from_cache": lm.get("lm/annot_cache_reused", 0.0), "labelled": lm.get("lm/annot_labelled", 0.0),
        "fallbacks": lm.get("lm/annot_fallbacks", 0.0), "positive_fraction": lm.get("lm/annot_positive_fraction", 0.0),
        "messages": _messages(runs / name),
    }


def _messages(run: Path) -> list[str]:
    """The messages the run's annotator labelled (from its final checkpoint)."""
    import torch

    ckpt = run / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        return []
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["agent"].get("reward_modules", {})
    found: list[str] = []
    for entry in state:  # PPO checkpoints: [{"name", "coef", "state"}] per reward module
        module_state = entry.get("state", {})
        if "annotator" in module_state:
            found += [m for m in module_state["annotator"]["labels"] if isinstance(m, str)]
    return found


def throughput(messages: list[str], mode: str) -> dict:
    """Labels per second with a cold cache (the bare embedded LM behind the async service)."""
    from llmguide.llm.embedded import EmbeddedLM
    from llmguide.llm.service import LLMService
    from llmguide.rewards.oni_annotator import MessageAnnotator

    lm = EmbeddedLM()
    with LLMService(lm, max_batch=8) as service:
        annot = MessageAnnotator(service, mode=mode)  # the bare LM has no cache: every label is computed
        start = time.perf_counter()
        annot.submit(messages)
        annot.wait(1800)
        elapsed = time.perf_counter() - start
        metrics = service.metrics()
    lm.close()
    return {"mode": mode, "messages": len(messages), "seconds": elapsed, "labels_per_s": len(messages) / elapsed,
            "lm_requests": annot.counts["requests"], "backend_submitted": metrics["submitted"],
            "unparseable": annot.counts["unparseable"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="MiniHack-KeyRoom-Fixed-S5-v0")
    parser.add_argument("--methods", default="none,oni_retrieval,oni_classification")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--rollout", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--extrinsic-coef", type=float, default=10.0, help="for 'none' (ONI methods use theirs)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest when shared)")
    parser.add_argument("--out", default="runs/bench_oni")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    os.environ["LLMGUIDE_CACHE_DIR"] = str(out / "cache")  # one shared, initially cold LM cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    results = []
    for seed in range(args.seeds):
        for method in args.methods.split(","):
            r = run_one(method, seed, args, out / "runs")
            print(f"{method:20s} seed {seed}: final return {r['final_return']:+.3f} success {r['final_success']:.2f} "
                  f"episodes {r['episodes']} sps {r['sps']:.0f} LM requests {r['lm_requests']:.0f} "
                  f"(reused {r['labels_reused_from_cache']:.0f}, duplicates {r['duplicate_requests']:.0f})", flush=True)
            results.append(r)

    messages = sorted({m for r in results for m in r["messages"]})
    through = [throughput(messages, mode) for mode in ("score", "generate")] if messages else []

    rows = []
    for method in args.methods.split(","):
        rs = [r for r in results if r["method"] == method]
        ret, suc = np.array([r["final_return"] for r in rs]), np.array([r["final_success"] for r in rs])
        rows.append({"method": method, "seeds": len(rs), "return_mean": float(ret.mean()), "return_std": float(ret.std()),
                     "success_mean": float(suc.mean()), "success_std": float(suc.std()),
                     "sps": float(np.mean([r["sps"] for r in rs])),
                     "lm_requests": float(sum(r["lm_requests"] for r in rs)),
                     "reused": float(sum(r["labels_reused_from_cache"] for r in rs)),
                     "duplicate_requests": float(sum(r["duplicate_requests"] for r in rs))})
    lines = [f"# ONI benchmark: {args.env}, {args.steps} env steps x {args.seeds} seeds, {args.num_envs} envs, "
             f"PPO rollout {args.rollout}, embedded Gemma 3 270M (score mode)", "",
             "Final return / success = mean over the last 20% of training episodes of each seed; mean ± std over seeds.",
             "", "| method | return | success | steps/s | LM requests | labels reused from cache | duplicate requests |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['return_mean']:+.3f} ± {r['return_std']:.3f} | "
                     f"{r['success_mean']:.2f} ± {r['success_std']:.2f} | {r['sps']:.0f} | {r['lm_requests']:.0f} | "
                     f"{r['reused']:.0f} | {r['duplicate_requests']:.0f} |")
    if through:
        lines += ["", f"Annotation throughput, cold cache, {len(messages)} unique messages seen in the runs:", "",
                  "| mode | labels/s | seconds | unparseable |", "|---|---|---|---|"]
        lines += [f"| {t['mode']} | {t['labels_per_s']:.2f} | {t['seconds']:.1f} | {t['unparseable']} |" for t in through]
        lines += ["", "Labels: " + "; ".join(f"{m!r}" for m in messages)]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"args": vars(args), "rows": rows, "throughput": through,
                                                  "runs": [{k: v for k, v in r.items() if k != "curve"} for r in results]},
                                                 indent=2))
    _plot(results, args, out / "curves.png")
    print("\n".join(lines))


def _plot(results: list[dict], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, args.steps, 25)
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in args.methods.split(","):
        curves = []
        for r in (r for r in results if r["method"] == method):
            if not r["curve"]:
                continue
            steps, rets = np.array(r["curve"]).T
            smooth = np.convolve(rets, np.ones(5) / 5, mode="same") if len(rets) >= 5 else rets
            curves.append(np.interp(grid, steps, smooth))
        if curves:
            c = np.array(curves)
            ax.plot(grid, c.mean(0), label=method)
            ax.fill_between(grid, c.min(0), c.max(0), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return")
    ax.set_title(f"{args.env} ({args.seeds} seeds, band = min/max)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
