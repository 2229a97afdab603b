"""ELLM's downstream modes: the single task to learn and the pretrained agent to start from or be guided by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmguide.core.errors import ConfigError
from llmguide.core.rundir import safe_torch_load


def task_goal(cfg: Any) -> str:
    task = cfg.env.get("task")
    if not task:
        raise ConfigError("env.task", f"method.mode={cfg.method.mode} trains on one task: set env.task=place_table etc.")
    return str(task).replace("_", " ")


def pretrained_state(cfg: Any) -> dict[str, Any]:
    path = cfg.method.get("pretrained")
    if not path:
        raise ConfigError("method.pretrained", f"method.mode={cfg.method.mode} needs the run directory of a "
                          "pretrained ELLM agent (method.pretrained=runs/NAME)")
    ckpt = Path(str(path)) / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        raise ConfigError("method.pretrained", f"no checkpoint at {ckpt}")

    return safe_torch_load(ckpt)["agent"]


def load_weights(agent: Any, state: dict[str, Any]) -> None:
    """Network weights of a pretrained agent (optimiser and counters start fresh)."""
    key = "net" if hasattr(agent, "net") else "q_net"
    net = getattr(agent, key, None)
    if net is None or key not in state:
        raise ConfigError("method.pretrained", "the pretrained checkpoint does not match this agent; "
                          "pretrain and finetune with the same agent and method.goal_conditioned")
    try:
        net.load_state_dict(state[key])
    except RuntimeError as err:
        raise ConfigError("method.pretrained", f"pretrained weights do not fit this agent ({err})") from None
    target = getattr(agent, "target_net", None)
    if target is not None:
        target.load_state_dict(net.state_dict())

