"""Where GLAM's LM runs: ``cuda`` (bf16 where the card supports it) or ``cpu`` (float32), with a clean
refusal when CUDA is asked for and absent.

Expected memory on a GPU (Gemma 3 270M, bf16, LoRA r 8; rough, from the parameter count and the
activations of ``max_batch`` rows of ~150 tokens): weights 0.55 GB, activations with gradients ~1 GB per
32 rows; full fine-tuning adds Adam's 2 x fp32 moments and fp32 gradients (~3.3 GB).  A 780M Flan-T5
(GLAM's model) full fine-tune needs ~13 GB at batch 64.  An H100 holds either with room to spare.

Expected throughput on one H100 (an estimate, not measured: no GPU was lent): a forward of 32 prompts of ~150
tokens is ~2.6 TFLOP, ~10-30 ms at realistic utilisation; acting is one forward per env step and PPO (4 epochs,
backward ~2x forward) about twelve more, so ~100-300 env steps/s at 32 envs, GLAM's 1.5M steps in 1.5-4 hours.
"""

from __future__ import annotations


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
    """``bfloat16`` on a CUDA card that supports it, ``float16`` on an older one, ``float32`` elsewhere."""
    if not str(device).startswith("cuda"):
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
