"""The Python API, in the style of Stable-Baselines3: train a method, read its run, act with its policy.

.. code-block:: python

    import llmguide

    run = llmguide.train(env="crafter", method="rnd", total_steps=20_000, progress=False)
    run.train_return     # mean episodic return over the last 10 % of training (the report's train return)
    run.eval_return      # the final evaluation's mean return (greedy; eval.json holds the rest: run.eval)
    run.path, run.metrics[-1], run.report
    policy = llmguide.load_policy(run.path)          # or run.load_policy()
    env = policy.make_env(seed=0)
    obs, info = env.reset()
    action, _ = policy.predict(obs, deterministic=True)   # SB3's: an np.ndarray action; policy.act(obs) -> int
    policy.evaluate(episodes=5)                      # the method's own evaluation (eval.max_steps respected)

:func:`train` takes what ``llmguide train`` takes: a list of ``key=value`` overrides, a dict (``{"env":
"crafter", "agent.lr": 1e-3}``), keyword overrides (``total_steps=...``), or a config from
:func:`llmguide.load_config`.  A bad key raises :class:`~llmguide.core.errors.ConfigError` naming it, before
any compute.  Everything the command line writes is written here too (``runs/<name>/``).  Your own env:
``train(env=MyEnv, caption=fn, method="rnd")`` (a Gymnasium id, class or factory; ``env=gym``).  ``callback=``: a
:class:`Callback` (SB3's hooks: ``on_step``, ``on_rollout_end`` ...), a list of them, or a function
``fn(agent, metrics)`` called after every update (returning ``False`` stops training there, as SB3's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.errors import LLMGuideError

if TYPE_CHECKING:
    from llmguide.learners.callbacks import Callback

__all__ = ["Callback", "Policy", "Run", "load_config", "load_policy", "load_run", "run", "train"]


def _value(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value(v) for v in value) + "]"
    text = str(value)
    if isinstance(value, str) and any(c in text for c in " ,[]{}()=:'\"\\"):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _flatten(items: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in items.items():
        if isinstance(value, Mapping):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={_value(value)}")
    return out


def overrides_of(config: Sequence[str] | Mapping[str, Any] | None = None, **kwargs: Any) -> list[str]:
    """``key=value`` overrides from a list of them, a (nested) dict and keyword arguments."""
    if config is None:
        out: list[str] = []
    elif isinstance(config, str):
        out = config.split()
    elif isinstance(config, Mapping):
        out = _flatten(config)
    else:
        out = [str(o) for o in config]
    return out + _flatten(kwargs)


def own_env(config: Sequence[str] | Mapping[str, Any] | None, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``env=`` your own env (a Gymnasium id, an env class or factory, an env from ``gymnasium.make``) and
    ``caption=fn`` (``fn(obs, info) -> str``) as the overrides ``env=gym env.id=... env.caption=...``
    (:mod:`llmguide.envs.gym_env`); an env family name (``env="crafter"``) stays as it is."""
    from llmguide.core.config import group_options
    from llmguide.envs.gym_env import own_env_overrides

    families = tuple(group_options("env"))
    kwargs = dict(kwargs)
    if isinstance(config, Mapping):
        config = dict(config)
        env, caption = config.pop("env", None), config.pop("caption", None)
        config.update(own_env_overrides(env, caption, families) if env is not None or caption is not None else {})
    elif config is not None:   # key=value overrides: env=<a Gymnasium id> is env=gym env.id=<it>
        items = config.split() if isinstance(config, str) else [str(o) for o in config]
        config = [o for item in items for o in _own_env_item(item, families, own_env_overrides)]
    if "env" in kwargs or "caption" in kwargs:
        kwargs.update(own_env_overrides(kwargs.pop("env", None), kwargs.pop("caption", None), families))
    return config, kwargs


def _own_env_item(item: str, families: tuple[str, ...], overrides: Callable[..., dict[str, Any]]) -> list[str]:
    key, _, value = item.partition("=")
    if key != "env" or value in families:
        return [item]
    return [f"{k}={_value(v)}" for k, v in overrides(value, None, families).items()]


def load_config(config: Sequence[str] | Mapping[str, Any] | None = None, **kwargs: Any) -> DictConfig:
    """The validated config of these overrides (what ``llmguide train --print-config`` shows); ``env=`` and
    ``caption=`` may name your own env (:func:`own_env`)."""
    from llmguide.pipelines import load_config as load

    config, kwargs = own_env(config, kwargs)
    return load(overrides_of(config, **kwargs))


def train(config: Sequence[str] | Mapping[str, Any] | DictConfig | None = None, /, *,
          callback: Callback | Sequence[Callback] | Callable[[Any, dict[str, Any]], Any] | None = None,
          **kwargs: Any) -> Run:
    """Train as ``llmguide train`` would and return the :class:`Run` (run directory, metrics, final evaluation).

    ``config``: overrides (``["env=crafter", "method=rnd"]`` or ``{"env": "crafter"}``) or a loaded config;
    ``kwargs``: more overrides (``total_steps=20_000``); ``env=`` may be your own env (a Gymnasium id, an env class
    or factory) with ``caption=fn`` (``fn(obs, info) -> str``, :func:`own_env`); ``callback``: a :class:`Callback`,
    a list of them, or a function ``fn(agent, metrics)`` called after every update (``False`` stops training there;
    the checkpoint, evaluation and report follow as for a run that reached ``total_steps``)."""
    from llmguide import pipelines
    from llmguide.distributed import connect, uses_ray

    if isinstance(config, DictConfig):
        if kwargs:
            raise TypeError("train(config) with a loaded config takes no more overrides; put them in load_config")
        cfg = config
    else:
        cfg = load_config(config, **kwargs)
    if uses_ray(cfg):
        connect(cfg.ray)
    result = pipelines.train_run(cfg, callbacks=as_callbacks(callback))
    return Run(result.path)


def run(verb: str, config: Sequence[str] | Mapping[str, Any] | DictConfig | None = None, /, **kwargs: Any) -> int:
    """Run an offline verb as ``llmguide <verb>`` would: ``answers`` (an answer table) or one of the configured
    method's steps (its recipe's ``steps``: ``collect``, ``label`` ...; ``llmguide --help`` lists them); the exit
    code.  ``config`` and ``kwargs`` as :func:`train` takes them."""
    from llmguide import pipelines

    if verb == "train":
        raise TypeError("use llmguide.train(...) to train (it returns the Run)")
    if isinstance(config, DictConfig):
        if kwargs:
            raise TypeError("run(verb, config) with a loaded config takes no more overrides; put them in load_config")
        cfg = config
    else:
        cfg = load_config(config, **kwargs)
    return int(pipelines.run(verb, cfg) or 0)


def as_callbacks(callback: Any) -> list[Callback]:
    """``callback=`` of :func:`train` as a list of :class:`Callback` (TypeError naming what it got otherwise)."""
    from llmguide.learners.callbacks import Callback, FunctionCallback

    if callback is None:
        return []
    items = list(callback) if isinstance(callback, list | tuple) else [callback]
    out = []
    for item in items:
        if isinstance(item, Callback):
            out.append(item)
        elif callable(item):
            out.append(FunctionCallback(item))
        else:
            raise TypeError(f"callback must be an llmguide.Callback, a function fn(agent, metrics) or a list of "
                            f"them, got {type(item).__name__}")
    return out


def __getattr__(name: str) -> Any:
    if name == "Callback":   # imported when asked for: it brings torch
        from llmguide.learners.callbacks import Callback

        return Callback
    raise AttributeError(f"module 'llmguide.api' has no attribute {name!r}")


def load_run(run_dir: str | Path) -> Run:
    """A finished (or running) run directory as a :class:`Run`."""
    path = Path(run_dir)
    if not (path / "config.yaml").exists():
        raise FileNotFoundError(f"{path} is not a run directory (no config.yaml)")
    return Run(path)


def load_policy(run_dir: str | Path, overrides: Sequence[str] = ()) -> Policy:
    """The trained agent of a run directory (its newest checkpoint that loads), ready to act."""
    from llmguide.pipelines import load_run_config, recipe_class
    from llmguide.pipelines.runner import reopen_run

    cfg = load_run_config(run_dir, list(overrides))
    recipe = recipe_class(cfg)(cfg)
    run = reopen_run(run_dir, lock=False)   # reads only: a run still training may hold the lock
    try:
        state = run.load_checkpoint()
    finally:
        run.close()
    if state is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint to load")
    return Policy(recipe.load_for_eval(state["agent"]), recipe, Path(run_dir), int(state["step"]))


@dataclass
class Run:
    """One run directory: ``path``, ``config``, ``metrics`` (the rows of metrics.jsonl), ``eval`` (eval.json),
    ``train_return`` (training's last 10 %), ``eval_return`` (the evaluation's mean), ``report`` (report.md)
    and :meth:`load_policy`."""

    path: Path

    def __repr__(self) -> str:
        def num(x: float | None) -> float | None:
            return x if x is None else round(x, 3)

        return f"Run({str(self.path)!r}, train_return={num(self.train_return)}, eval_return={num(self.eval_return)})"

    @cached_property
    def config(self) -> dict[str, Any]:
        import yaml

        return yaml.safe_load((self.path / "config.yaml").read_text())

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """Every row of ``metrics.jsonl`` (a torn last line skipped), in step order."""
        rows = []
        file = self.path / "metrics.jsonl"
        for line in file.read_text().splitlines() if file.exists() else []:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return rows

    def curve(self, key: str = "charts/episodic_return") -> list[tuple[int, float]]:
        """``(step, value)`` of one metric over the run."""
        return [(int(r["step"]), float(r[key])) for r in self.metrics if key in r and "step" in r]

    @property
    def eval(self) -> dict[str, Any]:
        """The final evaluation (``eval.json``): return_mean/std, episode returns and lengths, success, ..."""
        file = self.path / "eval.json"
        return json.loads(file.read_text()) if file.exists() else {}

    @property
    def train_return(self) -> float | None:
        """The mean episodic return logged in the last 10 % of training's steps (the report's "train return");
        None when no episode finished."""
        from llmguide.report.runs import train_return

        found = train_return(self.metrics)
        return None if found is None else found[0]

    @property
    def eval_return(self) -> float | None:
        """The final evaluation's mean return (``eval.json``'s ``return_mean``: greedy unless ``eval.greedy=false``,
        episodes capped at ``eval.max_steps``)."""
        return self.eval.get("return_mean")

    @property
    def final_return(self) -> float | None:
        """Deprecated: it meant the evaluation's return while the report's "final return" was training's; use
        :attr:`eval_return` or :attr:`train_return`."""
        import warnings

        warnings.warn("Run.final_return is ambiguous and deprecated: use run.eval_return (the final evaluation) or "
                      "run.train_return (the last 10% of training)", DeprecationWarning, stacklevel=2)
        return self.eval_return

    @property
    def report(self) -> Path | None:
        file = self.path / "report.md"
        return file if file.exists() else None

    def load_policy(self) -> Policy:
        return load_policy(self.path)


class Policy:
    """A trained agent: ``act(obs)`` / ``predict(obs, deterministic)`` on the observations of
    :meth:`make_env`, and :meth:`evaluate` (the method's own evaluation).  ``agent`` is the learner itself."""

    def __init__(self, agent: Any, recipe: Any, path: Path, step: int):
        self.agent, self.recipe, self.path, self.step = agent, recipe, path, step
        self.config = recipe.cfg

    def __repr__(self) -> str:
        return f"Policy({str(self.path)!r}, method={self.config.method.name}, env={self.config.env.name}, step={self.step})"

    def make_env(self, seed: int = 0) -> Any:
        """A Gymnasium env as the agent saw it in training (the method's wrapper where it has one: PTGM's options)."""
        from llmguide.envs import make_env

        env = make_env(self.config.env, seed)
        wrap = getattr(self.recipe, "wrap", None)
        return wrap(env, seed) if callable(wrap) else env

    def act(self, obs: Mapping[str, Any], deterministic: bool = True) -> Any:
        """The action for one observation (an int), or an array of actions for a batch (arrays with a leading
        batch axis)."""
        actions = self._actions(obs, deterministic)
        return int(actions[0]) if self._single(obs) else actions

    def predict(self, obs: Mapping[str, Any], state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """Stable-Baselines3's ``(action, state)``: the action as an ``np.ndarray`` (0-d for one observation,
        ``(n,)`` for a batch), and ``state`` handed back as given (None: no recurrent state is handed out)."""
        actions = self._actions(obs, deterministic)
        return (actions.squeeze(axis=0) if self._single(obs) else actions), state

    def _actions(self, obs: Mapping[str, Any], deterministic: bool) -> np.ndarray:
        if hasattr(self.agent, "action_strings"):
            raise LLMGuideError(f"method={self.config.method.name}'s policy acts on prompts: use "
                                "policy.agent.act(prompts, greedy) or policy.evaluate()")
        single = self._single(obs)
        batch = {k: np.asarray(v)[None] if single else np.asarray(v) for k, v in obs.items()}
        try:
            return np.asarray(self.agent.act(batch, greedy=deterministic))
        except KeyError as err:
            raise LLMGuideError(f"this policy reads the observation key {err} that method="
                                f"{self.config.method.name}'s wrapper adds in training (e.g. ELLM's goal): "
                                "use policy.evaluate()") from None

    def evaluate(self, episodes: int = 5, deterministic: bool = True, progress: bool = False) -> dict[str, Any]:
        """The method's evaluation episodes on held-out seeds (as ``llmguide eval``), ``eval.max_steps`` applied."""
        from llmguide.pipelines.runner import evaluate_agent

        return evaluate_agent(self.recipe, self.agent, int(episodes), bool(deterministic), progress=progress)

    @cached_property
    def _shapes(self) -> dict[str, int]:
        env = self.make_env()
        try:
            return {k: len(space.shape) for k, space in getattr(env.observation_space, "spaces", {}).items()}
        finally:
            env.close()

    def _single(self, obs: Mapping[str, Any]) -> bool:
        for key, value in obs.items():
            if key in self._shapes:
                return np.ndim(value) == self._shapes[key]
        return True
