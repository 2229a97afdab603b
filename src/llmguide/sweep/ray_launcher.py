"""``llmguide train -m ... sweep.launcher=ray``: every run of a sweep as one Ray task.

Each task reserves ``sweep.cpus`` CPUs (plus ``runners * ray.runner_cpus`` for a run with env-runner actors,
which then reserve none themselves, so runs never starve their own actors) and ``sweep.gpus`` GPUs and
runs ``llmguide train`` for its
combination in a child process on whichever node Ray picks, exactly as the local launcher does (same
run directory ``<run.dir>/<sweep name>/<key-value_...>``, same ``<name>.log``).  The child gets
``RAY_ADDRESS`` so a run with ``runners=N`` or ``llm.actor=true`` joins the same cluster.  A run that ran
on another node is sent back as a tar archive and unpacked into the driver's run directory, so
``llmguide report`` finds every run locally whether or not ``run.dir`` is on a shared filesystem.

A failed run (non-zero exit, or its task or node lost) is submitted again up to ``sweep.retries`` times
(resuming from its last checkpoint when one reached the driver), then reported as failed.  With
``llm.actor=true`` the driver starts the shared LM actor first, so every run finds it warm and it lives as
long as the sweep.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.distributed import connect
from llmguide.sweep.jobs import print_outcome, retried, run_train


def _pack(root: Path, name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in (root / name, root / f"{name}.log"):
            if path.exists():
                tar.add(path, arcname=path.name)
    return buf.getvalue()


def _unpack(data: bytes, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(root, filter="data")


def train_task(args: list[str], root: str, name: str, attempt: int, driver_node: str, env: dict[str, str],
               cwd: str) -> dict[str, Any]:
    """The body of one sweep task (runs on a Ray worker)."""
    import ray

    if os.path.isdir(cwd):
        os.chdir(cwd)
    context = ray.get_runtime_context()
    code = run_train(args, Path(root), name, attempt, {**env, "RAY_ADDRESS": context.gcs_address})
    node = context.get_node_id()
    files = _pack(Path(root), name) if node != driver_node else None
    return {"code": code, "node": node, "ip": ray.util.get_node_ip_address(), "files": files}


def run_on_ray(jobs: list[tuple[str, list[str]]], root: Path, cfg: DictConfig) -> list[tuple[str, int]]:
    """Run ``jobs`` (name, overrides) as Ray tasks; ``(name, exit code)`` per job, in job order."""
    ray = connect(cfg.ray)
    from ray.exceptions import RayError

    retries = int(cfg.sweep.retries)
    cpus, gpus = float(cfg.sweep.cpus), float(cfg.sweep.gpus)
    driver_node = ray.get_runtime_context().get_node_id()
    env = {k: v for k, v in os.environ.items() if k.startswith(("LLMGUIDE_", "OPENAI_", "HF_", "WANDB_"))}
    task = ray.remote(train_task)
    resources = ray.cluster_resources()
    from llmguide.pipelines import load_config

    plans = []   # a run with runners=N reserves its actors' CPUs in its task; the actors then ask for none
    for _, args in jobs:
        run_cfg = load_config(args)
        runners = int(run_cfg.get("runners", 0) or 0)
        extra = runners * float(run_cfg.ray.runner_cpus)
        plans.append((cpus + extra, [*args, "ray.runner_cpus=0"] if runners else list(args)))

    most = max(need for need, _ in plans)
    print(f"sweep: {len(jobs)} runs as Ray tasks ({most:g} CPU, {gpus:g} GPU each) on a cluster of "
          f"{resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs, into {root}")
    if most > resources.get("CPU", 0):
        from llmguide.core.errors import ConfigError

        raise ConfigError("sweep.cpus", f"a run needs {most:g} CPUs (sweep.cpus + runners * ray.runner_cpus) but "
                                        f"the cluster has {resources.get('CPU', 0):g}; lower them or add nodes")

    lm_actor = None
    if bool(cfg.llm.get("actor", False)):
        from llmguide.distributed.lm import lm_actor_for

        lm_actor = lm_actor_for(cfg.llm, str(cfg.env.name), ray_cfg=cfg.ray)  # warm, outlives each run

    def submit(index: int, attempt: int) -> Any:
        name = jobs[index][0]
        need, args = plans[index]
        return task.options(num_cpus=need, num_gpus=gpus, max_retries=0).remote(
            args, str(root), name, attempt, driver_node, env, os.getcwd())

    pending = {submit(i, 0): (i, 0) for i in range(len(jobs))}
    codes: dict[int, int] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            index, attempt = pending.pop(ready[0])
            name = jobs[index][0]
            where = ""
            try:
                out = ray.get(ready[0])
                code = int(out["code"])
                if out["files"] is not None:
                    _unpack(out["files"], root)
                    where = f" [node {out['ip']}]"
            except RayError as err:  # the task, its worker or its node was lost
                code = -1
                root.mkdir(parents=True, exist_ok=True)
                with open(root / f"{name}.log", "a") as log:
                    log.write(f"\nsweep: the Ray task of this run failed: {err}\n")
            print_outcome(root, name, code, attempt, retries, where)
            if retried(code, attempt, retries):
                pending[submit(index, attempt + 1)] = (index, attempt + 1)
            else:
                codes[index] = code
    finally:
        if lm_actor is not None:
            ray.kill(lm_actor)
        ray.shutdown()
    return [(jobs[i][0], codes[i]) for i in range(len(jobs))]
