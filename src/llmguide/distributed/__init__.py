"""Scale-out on Ray (``pip install 'llmguide[ray]'``): never a home-made cluster layer.

Three independent pieces, each switched on by one config key; ``import ray`` happens only then:

* ``llmguide train -m ... sweep.launcher=ray`` -- every combination of a sweep is one Ray task
  (:mod:`llmguide.sweep.ray_launcher`), ``sweep.cpus``/``sweep.gpus`` each, retried ``sweep.retries``
  times; the runs land in the same run directories as local ones.
* ``runners=N`` -- the ``num_envs`` envs of one run live in N env-runner actors behind one
  ``gymnasium.vector.VectorEnv`` (:class:`llmguide.distributed.vector.RayVectorEnv`); learners and the
  Runner are unchanged.
* ``llm.actor=true`` -- the LM backend with its persistent cache and the service's batching/de-dup runs
  in one named Ray actor shared by every run on the cluster (:mod:`llmguide.distributed.lm`).

All three connect with :func:`connect`: ``ray.address`` (``null``: ``$RAY_ADDRESS`` if set, else a
local Ray started for this process with ``ray.num_cpus`` CPUs; ``auto``: the cluster of ``ray start``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from llmguide.core.config import add_rule_provider, cfg_get, non_negative, one_of, positive, register_rule
from llmguide.core.errors import ConfigError, LLMGuideError

log = logging.getLogger(__name__)

NAMESPACE = "llmguide"

for _key, _rule in {
    "runners": non_negative,
    "sweep.launcher": one_of("local", "ray"),
    "sweep.retries": non_negative,
    "sweep.cpus": non_negative,
    "sweep.gpus": non_negative,
    "ray.runner_cpus": non_negative,
    "ray.lm_gpus": non_negative,
    "ray.num_cpus": lambda v: None if v is None else positive(v),
}.items():
    register_rule(_key, _rule)


def _check(cfg: Any) -> None:
    runners, num_envs = int(cfg.get("runners", 0) or 0), int(cfg.get("num_envs", 1))
    if runners > num_envs:
        raise ConfigError("runners", f"must be <= num_envs ({num_envs}): each env-runner actor holds "
                                     f"at least one env, got runners={runners}")
    if runners > 0 and str(cfg.env.get("name")) == "craftax":
        raise ConfigError("runners", "env=craftax is one batched JAX env in the learner process; use runners=0")
    llm = cfg.get("llm", {})
    if bool(llm.get("actor", False)) and bool(llm.get("trainable", False)):
        raise ConfigError("llm.actor", "a trainable LM trains in the learner process; use llm.actor=false")
    restarts = cfg.get("ray", {}).get("max_restarts", 0)
    if restarts is not None and int(restarts) < -1:
        raise ConfigError("ray.max_restarts", f"must be >= -1 (-1: always restart), got {restarts}")


add_rule_provider(_check)


def require_ray() -> Any:
    """The ``ray`` module, or a clear error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise LLMGuideError("this needs Ray: pip install 'llmguide[ray]' (sweep.launcher=ray, runners>0, "
                            "llm.actor=true)") from None
    return ray


def connect(ray_cfg: Any = None) -> Any:
    """Connect this process to Ray once (later calls reuse the connection); returns the ``ray`` module.

    ``ray.address`` null: ``$RAY_ADDRESS`` if set (a run started by a Ray sweep task joins its cluster),
    else a new local Ray with ``ray.num_cpus`` CPUs that ends with this process.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = cfg_get(ray_cfg, "address") or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = dict(namespace=str(cfg_get(ray_cfg, "namespace", NAMESPACE)), log_to_driver=False,
                                  configure_logging=False)
    if address is None:
        num_cpus = cfg_get(ray_cfg, "num_cpus")
        kwargs.update(include_dashboard=False, num_cpus=int(num_cpus) if num_cpus else None)
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise LLMGuideError(f"cannot connect to Ray at ray.address={address!r}: {err}") from None
    log.info("ray: connected to %s", address or "a new local cluster")
    return ray


def uses_ray(cfg: Any) -> bool:
    """Whether a run config needs Ray (env-runner actors or the LM actor)."""
    return int(cfg.get("runners", 0) or 0) > 0 or bool(cfg.get("llm", {}).get("actor", False))
