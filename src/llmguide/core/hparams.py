"""The run's resolved config in TensorBoard, as CleanRL writes it: a ``config`` text table (one row per key) and
the HParams dashboard's entry (every flattened key a hyperparameter, the episodic return its metric), both in the
run's own ``tb/`` event file (no extra sub-run, unlike ``SummaryWriter.add_hparams``).  Secrets are redacted."""

from __future__ import annotations

import json
from typing import Any

from llmguide.core.config import redact

HPARAM_METRICS = ("charts/episodic_return", "charts/success")   # the scalars the HParams dashboard shows per run


def flat_config(cfg: Any) -> dict[str, Any]:
    """``{"agent.lr": 0.00025, ...}``: every leaf of the (redacted) config under its dotted key."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(redact(cfg), "")
    return out


def hparam_value(value: Any) -> bool | int | float | str:
    """A config value as the HParams plugin takes it: numbers and booleans as they are, the rest as text."""
    if isinstance(value, bool | int | float | str):
        return value
    return "null" if value is None else json.dumps(value)


def write_config_text(writer: Any, cfg: Any) -> None:
    """Write ``cfg`` to the SummaryWriter ``writer`` (None: no TensorBoard, nothing written) once, at step 0."""
    if writer is None:
        return
    from torch.utils.tensorboard.summary import hparams

    flat = flat_config(cfg)
    rows = "\n".join(f"|{key}|{hparam_value(value)}|" for key, value in flat.items())
    writer.add_text("config", f"|key|value|\n|-|-|\n{rows}", 0)
    experiment, start, end = hparams({k: hparam_value(v) for k, v in flat.items()},
                                      {key: 0.0 for key in HPARAM_METRICS})
    file_writer = writer._get_file_writer()   # noqa: SLF001 - the writer's own event file, not a new sub-run
    for summary in (experiment, start, end):
        file_writer.add_summary(summary)
    writer.flush()
