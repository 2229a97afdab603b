"""GLAM's costs on BabyAI-Text, measured outside training (no study: nothing here trains an agent).

- :func:`scoring_ratio`: HFLM.score (context encoded once, key/value cache shared by the 6 candidates) over
  HFLM.naive_score (one full forward per candidate) on real GLAM prompts; ``benchmarks/studies/glam.py`` adds it to its
  report (its ``details`` hook, ``--scoring-contexts``).
- :func:`batching_ratio`: acting and PPO-update cost with one prompt per forward (``method.score_batch=1``) vs all
  the envs' prompts in one forward, on the same real prompts and LoRA policy (this script's command line)::

    python benchmarks/costs/glam_costs.py --num-envs 8 --out benchmarks/results/glam/batching
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def scoring_ratio(task: str, contexts: int, k_history: int) -> dict:
    """Seconds per context of HFLM.score vs naive_score on real GLAM prompts (1 torch thread)."""
    import torch

    from llmguide.envs import make_env
    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.policy import History

    torch.set_num_threads(1)
    env = make_env({"name": "babyai", "task": task}, 0)
    rng = np.random.default_rng(0)
    history = History(1, k_history)
    _, info = env.reset(seed=0)
    history.reset(0, info["mission"], info["caption"])
    prompts = []
    while len(prompts) < contexts:
        prompts += history.prompts(ACTION_STRINGS)
        a = int(rng.integers(6))
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            _, info = env.reset()
            history.reset(0, info["mission"], info["caption"])
        else:
            history.step(0, ACTION_STRINGS[a], info["caption"])
    env.close()
    lm = HFLM()
    cands = [[" " + a for a in ACTION_STRINGS]] * len(prompts)
    lm.score(prompts[:1], cands[:1])   # warm-up
    t0 = time.perf_counter()
    shared = lm.score(prompts, cands)
    t1 = time.perf_counter()
    naive = lm.naive_score(prompts, cands)
    t2 = time.perf_counter()
    return {"contexts": len(prompts), "prompt_tokens": float(np.mean([len(lm._context_ids(p)) for p in prompts])),
            "shared_s_per_ctx": (t1 - t0) / len(prompts), "naive_s_per_ctx": (t2 - t1) / len(prompts),
            "speedup": (t2 - t1) / max(t1 - t0, 1e-9),
            "max_abs_diff": float(np.max(np.abs(np.array(shared) - np.array(naive))))}


def lockstep_prompts(task: str, num_envs: int, steps: int, k_history: int, seed: int = 0) -> list[list[str]]:
    """GLAM prompts of ``num_envs`` envs stepped together by uniform random actions: one list per step."""
    from llmguide.envs import make_env
    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.methods.glam.policy import History

    rng = np.random.default_rng(seed)
    envs = [make_env({"name": "babyai", "task": task}, seed + i) for i in range(num_envs)]
    history = History(num_envs, k_history)
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seed + i)
        history.reset(i, info["mission"], info["caption"])
    out = []
    for _ in range(steps):
        out.append(history.prompts(ACTION_STRINGS))
        for i, env in enumerate(envs):
            a = int(rng.integers(len(ACTION_STRINGS)))
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                _, info = env.reset()
                history.reset(i, info["mission"], info["caption"])
            else:
                history.step(i, ACTION_STRINGS[a], info["caption"])
    for env in envs:
        env.close()
    return out


def batching_ratio(task: str, num_envs: int, k_history: int, steps: int = 4, threads: int = 2,
                   lora_last_layers: int = 6, device: str = "cpu", dtype: str = "float32") -> dict:
    """GLAM's acting and update cost with one prompt per forward (``method.score_batch=1``) vs all the
    envs' prompts in one forward (``score_batch=num_envs``), on the same real prompts and LoRA policy:
    seconds per lock-step of ``num_envs`` envs (act: log-probs + values, no gradient), seconds per PPO
    sample (forward + backward over all the prompts as one minibatch), env steps/s of acting alone and of
    acting plus one PPO epoch, and the largest log-prob difference between the two paths."""
    import torch

    from llmguide.envs.babyai.env import ACTION_STRINGS
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.policy import LMPolicy, apply_lora

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    prompts = lockstep_prompts(task, num_envs, steps, k_history)
    lm = HFLM(device=device, dtype=dtype, trainable=True)
    apply_lora(lm, last_layers=lora_last_layers)
    policy = LMPolicy(lm, ACTION_STRINGS)
    flat = [p for step in prompts for p in step]
    out: dict = {"task": task, "num_envs": num_envs, "lock_steps": steps, "threads": threads, "device": device,
                 "prompt_tokens": float(np.mean([len(lm._context_ids(p)) for p in flat]))}
    logps = {}
    for batch in (1, num_envs):
        policy.score_batch = batch
        with torch.no_grad():
            policy(prompts[0])                                   # warm-up
        t0 = time.perf_counter()
        with torch.no_grad():
            logps[batch] = torch.cat([policy(step)[0] for step in prompts]).float().cpu().numpy()
        act = (time.perf_counter() - t0) / steps
        t1 = time.perf_counter()
        logp, values = policy(flat)
        (logp[:, 0].sum() + values.sum()).backward()
        policy.zero_grad(set_to_none=True)
        update = (time.perf_counter() - t1) / len(flat)
        out[f"batch{batch}"] = {"act_s_per_lockstep": act, "update_s_per_sample": update,
                                "act_steps_per_s": num_envs / act,
                                "act_update_steps_per_s": 1.0 / (act / num_envs + update)}
        print(f"[glam batching] score_batch={batch}: act {act:.3f} s per {num_envs}-env step, "
              f"update {update:.3f} s/sample", flush=True)
    out["max_abs_logp_diff"] = float(np.max(np.abs(logps[1] - logps[num_envs])))
    out["act_speedup"] = out[f"batch{num_envs}"]["act_steps_per_s"] / out["batch1"]["act_steps_per_s"]
    out["act_update_speedup"] = (out[f"batch{num_envs}"]["act_update_steps_per_s"]
                                 / out["batch1"]["act_update_steps_per_s"])
    return out


def batching_report(b: dict) -> str:
    """The before/after table of :func:`batching_ratio`."""
    n = b["num_envs"]
    lines = [f"# GLAM batched scoring on BabyAI-Text {b['task']}: {n} envs, {b['device']}, {b['threads']} torch threads",
             "", f"Gemma 3 270M + LoRA (value head on the same pass), {b['lock_steps']} lock-steps of {n} real GLAM "
             f"prompts ({b['prompt_tokens']:.0f} tokens on average) under uniform random actions. Before: one prompt "
             f"per forward (`method.score_batch=1`); after: the {n} prompts in one left-padded forward, shared prefix "
             f"reused for the candidates (`method.score_batch={n}`). PPO update: forward + backward over all "
             f"{n * b['lock_steps']} prompts as one minibatch.", "",
             "| scoring | act s per step of all envs | env steps/s (act) | update s per sample | env steps/s (act + 1 epoch) |",
             "|---|---|---|---|---|"]
    for batch, label in ((1, "one prompt per forward"), (n, f"{n} prompts per forward")):
        r = b[f"batch{batch}"]
        lines.append(f"| {label} | {r['act_s_per_lockstep']:.3f} | {r['act_steps_per_s']:.1f} | "
                     f"{r['update_s_per_sample']:.3f} | {r['act_update_steps_per_s']:.2f} |")
    lines += ["", f"Speed-up: **{b['act_speedup']:.2f}x** acting, **{b['act_update_speedup']:.2f}x** acting + one "
              f"PPO epoch; largest log-prob difference between the two paths {b['max_abs_logp_diff']:.1e} "
              "(same log-probs to 1e-4 when below it)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="GLAM's batched scoring vs one prompt at a time (writes batching.md/json)")
    p.add_argument("--task", default="GoToLocal")
    p.add_argument("--num-envs", type=int, default=2, help="envs stepped together: prompts per batched forward")
    p.add_argument("--k-history", type=int, default=2, help="observations in the prompt (GLAM: 3)")
    p.add_argument("--steps", type=int, default=4, help="lock-steps of --num-envs prompts it times")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--lora-last-layers", type=int, default=6, help="LoRA in the top N blocks only (0: all)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (cuda refuses without CUDA)")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on a CUDA card that supports it, float32 on CPU")
    p.add_argument("--out", type=Path, default=Path("runs/bench_glam"))
    args = p.parse_args(argv)
    from llmguide.methods.glam.device import default_dtype, require_device

    if (reason := require_device(args.device)) is not None:
        print(reason)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    b = batching_ratio(args.task, args.num_envs, args.k_history, args.steps, args.threads, args.lora_last_layers,
                       args.device, args.dtype if args.dtype != "auto" else default_dtype(args.device))
    (args.out / "batching.json").write_text(json.dumps(b, indent=1) + "\n")
    (args.out / "batching.md").write_text(report := batching_report(b))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
