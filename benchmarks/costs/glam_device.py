"""GLAM's policy on an accelerator: does it compute what a float32 CPU computes, and where does the time go?

Built for a short GPU lease (benchmarks/results/glam/gpu-h100/: in bf16 on one H100 GLAM's initial policy put
all its mass on one action, which the CPU does not reproduce).  On held-out BabyAI-Text prompts (bot states,
GLAM's prompt with 3 observations) each variant -- dtype x attention implementation x prompts per forward
(``method.score_batch``) -- builds GLAM's policy exactly as training does (``GLAMRecipe.build_policy``: the LM,
LoRA on every block, the value head) and reports

- the action distributions' entropy (mean, min) and their total variation from a float32 CPU copy (mean, max),
  and whether any is not finite;
- seconds per rollout step of ``--envs`` prompts (``policy.act``, no gradient) and per PPO minibatch of
  ``--minibatch`` prompts (forward + backward), after one warm-up; the peak accelerator memory.

    python benchmarks/costs/glam_device.py --model /tmp/gemma-3-270m --device cuda --out /tmp/parity
    python benchmarks/costs/glam_device.py --model DIR --device cpu --variants float32:sdpa:4 --prompts 4 --envs 4

Writes ``result.json`` and ``report.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)
import torch
from glam_prior import bot_states, prompt_at  # benchmarks/analyses/glam_prior.py

DEFAULT_VARIANTS = ("bfloat16:sdpa:32,bfloat16:sdpa:1,bfloat16:eager:32,bfloat16:eager:1,"
                    "float32:sdpa:32,float32:eager:32")


def build_policy(model: str, device: str, dtype: str, attn: str, score_batch: int) -> Any:
    """GLAM's policy as ``llmguide train method=glam`` builds it, with the attention implementation set."""
    from llmguide.methods.glam.recipe import GLAMRecipe
    from llmguide.pipelines import load_config

    cfg = load_config(["env=babyai", "method=glam", "llm=hf", f"llm.model_path={model}", f"llm.device={device}",
                       f"llm.dtype={dtype}", f"method.score_batch={score_batch}", "llm.max_batch=256"])
    policy = GLAMRecipe(cfg).build_policy()
    base = policy.lm.model.get_base_model() if hasattr(policy.lm.model, "get_base_model") else policy.lm.model
    if hasattr(base, "set_attn_implementation"):
        base.set_attn_implementation(attn)
    else:
        base.config._attn_implementation = attn
    return policy


def distributions(policy: Any, prompts: list[str], chunk: int) -> torch.Tensor:
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), chunk):
            out.append(torch.softmax(policy.action_logits(prompts[i:i + chunk])[0].float().cpu(), dim=-1))
    return torch.cat(out)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, reps: int) -> float:
    fn()   # warm-up
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / reps


def entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def measure(args, variant: str, prompts: list[str], reference: torch.Tensor) -> dict:
    dtype, attn, score_batch = variant.split(":")
    row: dict[str, Any] = {"variant": variant, "dtype": dtype, "attn": attn, "score_batch": int(score_batch)}
    start = time.perf_counter()
    try:
        policy = build_policy(args.model, args.device, dtype, attn, int(score_batch))
        row["load_s"] = time.perf_counter() - start
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        probs = distributions(policy, prompts, args.envs)
        finite = bool(torch.isfinite(probs).all())
        tv = 0.5 * (probs - reference).abs().sum(-1)
        ent = entropy(probs)
        row.update(finite=finite, entropy_mean=float(ent.mean()), entropy_min=float(ent.min()),
                   tv_mean=float(tv.mean()), tv_max=float(tv.max()),
                   first=[round(v, 3) for v in probs[0].tolist()])
        batch = prompts[:args.envs]
        row["act_s"] = timed(lambda: policy.act(batch), args.device, args.reps)
        mini = prompts[:args.minibatch]

        def update() -> None:
            logp, values = policy(mini)
            (-(logp[:, 0]).mean() + values.float().pow(2).mean()).backward()
            policy.zero_grad(set_to_none=True)

        row["update_s"] = timed(update, args.device, args.reps)
        if args.device.startswith("cuda"):
            row["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        policy = None   # free the accelerator memory before the next variant
    except Exception as err:   # a variant that breaks is a finding: record it, go on to the next
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def write_report(result: dict, out: Path) -> None:
    lines = [f"# GLAM's policy on `{result['device']}` ({result['gpu']}) vs float32 on the CPU", "",
             f"{result['prompts']} held-out {result['task']} prompts (bot states, 3 observations); rollout step = "
             f"{result['envs']} prompts without gradient; PPO minibatch = {result['minibatch']} prompts, forward + "
             f"backward. torch {result['torch']}, transformers {result['transformers']}. Reference: float32 on "
             f"the CPU, entropy mean {result['reference_entropy_mean']:.3f}.", "",
             "| dtype | attention | prompts per forward | finite | entropy mean | entropy min | TV mean | TV max "
             "| s per rollout step | s per minibatch | peak GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['dtype']} | {r['attn']} | {r['score_batch']} | error: {r['error']} |||||||")
            continue
        lines.append(f"| {r['dtype']} | {r['attn']} | {r['score_batch']} | {r['finite']} | {r['entropy_mean']:.3g} "
                     f"| {r['entropy_min']:.3g} | {r['tv_mean']:.3f} | {r['tv_max']:.3f} | {r['act_s']:.3f} "
                     f"| {r['update_s']:.3f} | {r.get('peak_gb', float('nan')):.1f} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a transformers folder of the LM (llmguide.llm.backends.hf.convert_gguf)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated dtype:attention:score_batch")
    p.add_argument("--task", default="GoToLocal")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--envs", type=int, default=32, help="prompts per rollout step (GLAM's 32 envs)")
    p.add_argument("--minibatch", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=7_000_000)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/glam/device"))
    args = p.parse_args(argv)
    import transformers

    states = bot_states(args.task, args.prompts, args.seed)
    prompts = [prompt_at(s["mission"], s["captions"], s["actions"], s["t"], 3, True) for s in states]
    start = time.perf_counter()
    ref_policy = build_policy(args.model, "cpu", "float32", "sdpa", 1)
    reference = distributions(ref_policy, prompts, args.envs)
    del ref_policy
    print(f"reference: float32 cpu, {len(prompts)} prompts in {time.perf_counter() - start:.1f}s, "
          f"entropy mean {float(entropy(reference).mean()):.3f}", flush=True)
    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") and torch.cuda.is_available() else "-"
    result = {"device": args.device, "gpu": gpu, "task": args.task, "prompts": len(prompts), "envs": args.envs,
              "minibatch": args.minibatch, "torch": torch.__version__, "transformers": transformers.__version__,
              "reference_entropy_mean": float(entropy(reference).mean()),
              "reference_first": [round(v, 3) for v in reference[0].tolist()], "rows": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in args.variants.split(","):
        result["rows"].append(measure(args, variant, prompts, reference))
        (args.out / "result.json").write_text(json.dumps(result, indent=1))
        write_report(result, args.out)
    print((args.out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
