"""Where GLAM's LM runs: ``cuda`` (bf16 where the card supports it) or ``cpu`` (float32), with a clean
refusal when CUDA is asked for and absent.

Measured on one H100 (80 GB; benchmarks/results/glam/gpu-h100/), Gemma 3 270M, 32 envs: ~42 GB per GLAM run
(bf16, LoRA on every block) with PPO minibatches of 64 and ~14 GB with 8; ~2.2 env steps/s per run with four
runs on the card; the initial policy put all its mass on one action.  On one H200
(benchmarks/results/glam/gpu-h200/, ``benchmarks/glam_device.py``) the cause was found: that machine's
transformers (5.17) had converted the GGUF's tokenizer without its BOS token and into single characters, so
the CPU there gave the same peaked policy, and prompts were longer (11 GB vs 3.2 GB at minibatch 8);
:func:`llmguide.llm.backends.gguf_convert.gguf_tokenizer_error` now refuses such a conversion.  With the right tokenizer, bf16 on
the GPU is within total variation 0.03 of float32 on the CPU; a rollout step of 32 envs takes 0.09 s and a
PPO minibatch of 8 prompts 0.2 s, so at minibatch 8 the update, not acting, sets the speed.
:func:`parity_error` stays: it catches a kernel or precision that breaks on a device (float16 gives NaN),
not a wrong tokenizer, which the CPU copy shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def require_device(device: str) -> str | None:
    """None when ``device`` is usable, else the one-line reason (the caller prints it and exits 2)."""
    if not str(device).startswith("cuda"):
        return None
    try:
        import torch
    except ImportError:
        return f"device={device}: torch is not installed"
    if not torch.cuda.is_available():
        return f"device={device}: CUDA is not available on this machine (torch {torch.__version__}); use --device cpu"
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        return f"device={device}: only {torch.cuda.device_count()} CUDA device(s)"
    return None


def default_dtype(device: str) -> str:
    """``bfloat16`` on a CUDA card that supports it, else ``float32``.  Never float16: Gemma 3 overflows in
    float16 (every action log-prob is NaN, measured on the CPU)."""
    if not str(device).startswith("cuda"):
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"


def parity_error(policy: Any, prompts: Sequence[str], max_tv: float = 0.2) -> str | None:
    """None when the policy's action distributions on ``prompts``, computed where it runs, match a float32
    CPU copy of the same weights (total variation at most ``max_tv`` on every prompt), else the reason.

    A wrong kernel or precision on an accelerator need not crash (float16 gives NaN log-probs for Gemma 3);
    the CPU copy shares the tokenizer and the weights, so what both get wrong (a tokenizer converted without
    its BOS, as on the H100 lease) is :func:`llmguide.llm.backends.gguf_convert.gguf_tokenizer_error`'s to catch.  Checked once,
    before training.
    """
    import copy

    import torch

    lm = policy.lm
    ref = copy.copy(lm)
    ref.model = copy.deepcopy(lm.model).to(device="cpu", dtype=torch.float32)
    ref.device = torch.device("cpu")
    head = policy.action_head
    ref_head = None if head is None else copy.deepcopy(head).to(device="cpu", dtype=torch.float32)
    with torch.no_grad():
        here = torch.softmax(policy.action_logits(prompts)[0].cpu(), dim=-1)
        there = torch.softmax(policy.action_logits(prompts, ref, ref_head)[0], dim=-1)
    where = f"{lm.device} in {next(lm.model.parameters()).dtype}".replace("torch.", "")
    if not torch.isfinite(here).all():
        return f"the action probabilities on {where} are not finite (NaN or inf) on the first prompts"
    tv = 0.5 * (here - there).abs().sum(-1)
    if float(tv.max()) > max_tv:
        i = int(tv.argmax())
        return (f"the action probabilities on {where} differ from float32 on the CPU by total variation "
                f"{float(tv.max()):.2f} > {max_tv} ({_probs(here[i])} vs {_probs(there[i])})")
    return None


def _probs(p: Any) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in p.tolist()) + "]"
