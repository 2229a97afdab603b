"""Where GLAM's LM runs: ``cuda`` (bf16 where the card supports it) or ``cpu`` (float32), with a clean
refusal when CUDA is asked for and absent.

Measured on one H100 (80 GB; benchmarks/results/glam/gpu-h100/), Gemma 3 270M, 32 envs, prompts of ~150-390
tokens: a GLAM run (bf16, LoRA on every block) reached ~42 GB with PPO minibatches of 64 prompts and ~14 GB
with 8; an NPAE run (fp32, every weight trained) at ~52 GB with 64 and 9-17 GB with 8.  With four runs at once
(three GLAM, one NPAE; of six started, two NPAE runs ran out of memory) a GLAM run made ~2.2 env steps/s and
the NPAE run ~1.1, the GPU busy 100% of the time: far below the ~100-300 env steps/s a FLOP count had
suggested; where the time goes was not profiled (the lease ended).  On that card, in bf16, the initial policy put all its
mass on one action, which the CPU in bf16 and float32 does not: hence :func:`parity_error`, checked before
the first rollout anywhere but a float32 CPU.
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

    A wrong kernel or precision on an accelerator does not crash: on one H100 in bf16 GLAM's initial policy
    put all its mass on one action (entropy 2e-9 on three seeds, no episode ended), while the same
    weights on the CPU spread it (entropy 0.4-1.2 in float32 and bfloat16).  Checked once, before training.
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
