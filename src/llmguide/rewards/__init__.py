"""Reward modules: intrinsic / shaping rewards that a learner adds to the extrinsic reward.

A learner uses ``r = method.extrinsic_coef * r_ext + sum(coef_i * module_i.compute(batch))`` with
the ``(coef, module)`` pairs from :func:`build_reward_modules`.  A method's YAML names its module
class with ``reward: "package.module:Class"`` (or ``"path/to/file.py:Class"``) and its keyword
arguments under ``module:``; they are checked against the constructor (a wrong key or value raises
ConfigError naming ``method.module.<key>``).  Factories that build several modules are registered
with :func:`register_reward`.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

from gymnasium import spaces
from omegaconf import DictConfig

from llmguide.core.config import in_range, non_negative, one_of, plain_dict, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.rewards.base import RewardModule, StepTransition, TransitionBatch
from llmguide.rewards.shaping import PotentialShaping, potential_shaping

# factory(method_cfg: dict, obs_space, action_space, num_envs, device, seed)
#   -> RewardModule | list[tuple[float, RewardModule]] | None
RewardFactory = Callable[..., Any]

_RULES = {
    "feature_dim": positive, "hidden": positive, "lr": positive, "epochs": positive,
    "minibatch_size": positive, "obs_clip": positive, "k": positive, "memory_size": positive,
    "gamma": in_range(0.0, 1.0), "update_proportion": in_range(1e-9, 1.0), "beta": in_range(0.0, 1.0),
    "alpha": non_negative, "representation": one_of("icm", "random"),
}
for _key, _rule in _RULES.items():
    register_rule(f"method.module.{_key}", _rule)


def load_class(target: str) -> type:
    """``"package.module:Class"`` or ``"path/to/file.py:Class"`` → the class (ConfigError naming ``method.reward``)."""
    where, _, cls_name = str(target).rpartition(":")
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser().resolve()
            spec = importlib.util.spec_from_file_location(f"llmguide_user_{path.stem}", path)
            if spec is None or spec.loader is None or not path.exists():
                raise ImportError(f"no such file {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = import_module(where)
        cls = getattr(module, cls_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError("method.reward", f"cannot load reward class {target!r}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, RewardModule)):
        raise ConfigError("method.reward", f"{target!r} is not a RewardModule subclass")
    return cls


def _class_factory(target: str) -> RewardFactory:
    def factory(method_cfg: Mapping[str, Any], obs_space: spaces.Space, action_space: spaces.Space,
                num_envs: int, device: str = "cpu", seed: int = 0, service: Any = None) -> RewardModule:
        cls = load_class(target)
        cls_name = cls.__name__
        kwargs = dict(method_cfg.get("module") or {})
        accepted = _accepted_kwargs(cls)
        for key, value in kwargs.items():
            if key not in accepted:
                raise ConfigError(f"method.module.{key}", f"unknown key for {cls_name}; known: {sorted(accepted)}")
            problem = _RULES[key](value) if key in _RULES else None
            if problem:
                raise ConfigError(f"method.module.{key}", problem)
        params = inspect.signature(cls.__init__).parameters
        if "action_space" in params:
            kwargs["action_space"] = action_space
        if "service" in params:
            kwargs["service"] = service
        return cls(obs_space=obs_space, num_envs=num_envs, device=device, seed=seed, **kwargs)

    return factory


def _accepted_kwargs(cls: type) -> set[str]:
    """Constructor keywords of ``cls`` and its bases (through ``**kwargs``), minus the wiring ones."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names - {"self", "obs_space", "action_space", "num_envs", "device", "seed", "service"}


REWARDS: dict[str, RewardFactory] = {}


def register_reward(name: str, factory: RewardFactory) -> None:
    """Register ``factory(method_cfg, obs_space, action_space, num_envs, device, seed)`` for ``method=name``.

    The factory returns a RewardModule (weighted by ``method.intrinsic_coef``), a list of
    ``(coef, module)`` pairs, or None.
    """
    REWARDS[name] = factory


def wants_lm(method_cfg: DictConfig | Mapping[str, Any]) -> bool:
    """True when the method's reward class takes a ``service`` (an :class:`~llmguide.llm.service.core.LLMService`)."""
    target = method_cfg.get("reward")
    return bool(target) and "service" in inspect.signature(load_class(str(target)).__init__).parameters


def build_reward_modules(method_cfg: DictConfig | Mapping[str, Any], obs_space: spaces.Space,
                         action_space: spaces.Space, num_envs: int, device: str = "cpu",
                         seed: int = 0, service: Any = None) -> list[tuple[float, RewardModule]]:
    """The ``(coef, module)`` pairs for the configured method (empty for ``none``); a reward class whose
    constructor takes ``service`` gets the run's LM service (an LM-backed reward needs no recipe)."""
    cfg = plain_dict(method_cfg)
    name, target = cfg.get("name"), cfg.get("reward")
    if target:
        factory = _class_factory(str(target))
    elif name in REWARDS:
        factory = REWARDS[name]
    elif "reward" in cfg:
        return []  # ``reward: null``: no reward module (method=none)
    else:
        raise ConfigError("method.reward", f"method '{name}' names no reward module: add reward: package.module:Class "
                                           f"to its YAML (registered factories: {sorted(REWARDS)})")
    extra = {"service": service} if target else {}
    built = factory(cfg, obs_space, action_space, num_envs, device=device, seed=seed, **extra)
    if built is None:
        return []
    if isinstance(built, RewardModule):
        return [(float(cfg.get("intrinsic_coef", 1.0)), built)]
    return [(float(coef), module) for coef, module in built]


__all__ = [
    "REWARDS", "RewardModule", "StepTransition", "TransitionBatch", "PotentialShaping", "build_reward_modules",
    "load_class", "potential_shaping", "register_reward", "wants_lm",
]
