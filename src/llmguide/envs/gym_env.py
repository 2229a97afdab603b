"""Your own Gymnasium env as the env family ``gym``: ``env=gym env.id=<Gymnasium id> env.caption=module:function``.

The env is built with ``gymnasium.make(env.id)`` and adapted to what the learners read: a ``Box`` observation of 1
dimension becomes ``{"vector": float32}``, of 2 or 3 (an image, HWC or CHW) ``{"image": (C, H, W)}``, a ``Discrete``
one a one-hot ``{"vector"}``, a ``Dict`` of 1-D or 3-D Boxes stays as it is; the action space must be ``Discrete``.
Any other space is refused when the config loads (:class:`ConfigError` naming ``env.id`` and the space).

``info["caption"]`` is ``caption(obs, info)`` (the env's own observation and info) when a caption function is
given (``env.caption``: ``"module:function"`` or a name registered in this process), else the env's own
``info["caption"]``, else ``""``; ``events`` and ``mission`` default to ``[]`` and ``""``.  The family has no
ground-truth oracle and no scripted expert.  Methods that need an env family's oracle or tasks (ELLM, BK, GLAM,
PTGM, ONI, Motif) refuse ``env=gym`` by their own family list; a reward whose class takes the LM ``service`` reads
captions, so its recipe refuses an env without them (:func:`gives_captions`) and ``llm=oracle|shuffled`` (ground
truth: the family has none).  :func:`register_env` and :func:`own_env_overrides` are what ``llmguide.train(env=..., caption=...)``
uses.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmguide.core.config import add_rule_provider, cfg_get
from llmguide.core.errors import ConfigError
from llmguide.envs.base import Oracle

Caption = Callable[[Any, dict], str]
CAPTIONS: dict[str, Caption] = {}          # in-process captions by name: register_env's (by env id) and train's
SUPPORTED = "a Box of 1-3 dimensions, Discrete, or a Dict of 1-D / 3-D Boxes"


class CaptionError(TypeError):
    """The caption function failed or returned something other than text (its name in the message)."""


def register_env(env_id: str, make: Callable[..., gym.Env] | str, caption: Caption | str | None = None,
                 max_episode_steps: int | None = None, **kwargs: Any) -> str:
    """Register ``make`` (an env class, a function returning a new env, or ``"module:attr"``) as the Gymnasium id
    ``env_id`` (replacing an earlier one), with ``caption(obs, info) -> str`` as its default ``env.caption``.  Then
    ``llmguide.train(env=env_id, ...)`` or, in this process, ``env=gym env.id=<env_id>`` trains on it."""
    if env_id in gym.registry:
        del gym.registry[env_id]
    gym.register(env_id, entry_point=make, max_episode_steps=max_episode_steps, kwargs=kwargs)
    CAPTIONS.pop(env_id, None)
    if caption is not None:
        CAPTIONS[env_id] = resolve_caption(caption) if isinstance(caption, str) else caption
    return env_id


def caption_name(fn: Caption) -> str:
    """``fn`` under its ``module:qualname`` (registered in this process; importable again elsewhere when it is a
    module's top-level function)."""
    if not callable(fn):
        raise TypeError(f"caption must be a function fn(obs, info) -> str, got {type(fn).__name__}")
    name = f"{getattr(fn, '__module__', None) or 'caption'}:{getattr(fn, '__qualname__', type(fn).__name__)}"
    CAPTIONS[name] = fn
    return name


def resolve_caption(ref: str) -> Caption:
    """The caption function ``ref`` names: registered in this process, or ``"module:function"`` imported."""
    if ref in CAPTIONS:
        return CAPTIONS[ref]
    module, _, attr = str(ref).partition(":")
    try:
        fn: Any = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
    except (ImportError, AttributeError, ValueError, TypeError):
        fn = None
    if not attr or not callable(fn):
        raise ConfigError("env.caption", f"{ref!r} names no function: give \"module:function\" (fn(obs, info) -> "
                                         "str) or register it in this process (llmguide.train(caption=fn))")
    return fn


def id_problem(env_id: str, family: str = "gym") -> str | None:
    """Why ``env_id`` names no Gymnasium env (None when it does); ``"module:Name-v0"`` imports the module first."""
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
        return None
    except (ImportError, gym.error.Error) as err:
        import difflib

        close = difflib.get_close_matches(name, list(gym.registry), n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        return (f"{hint}{env_id!r} is not a registered Gymnasium id ({str(err).splitlines()[0][:120]}); register it "
                "(gymnasium.register, llmguide.envs.register_env) or give \"module:Name-v0\"")


def adapt_observation(space: spaces.Space) -> tuple[spaces.Dict, Callable[[Any], dict]]:
    """(the learner's Dict space, obs -> dict) for ``space``; :class:`ConfigError` naming a space it cannot take."""
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        box = spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32)
        return spaces.Dict({"vector": box}), lambda o: {"vector": np.asarray(o, dtype=np.float32)}
    if isinstance(space, spaces.Box) and len(space.shape) in (2, 3):
        if len(space.shape) == 2:
            order: tuple[int, ...] = (0, 1)
            expand = True
        else:   # HWC (a few channels last) or CHW
            hwc = space.shape[-1] <= 4 < space.shape[0]
            order, expand = ((2, 0, 1) if hwc else (0, 1, 2)), False
        dtype = np.uint8 if space.dtype == np.uint8 else np.float32

        def image(x: Any) -> np.ndarray:
            x = np.transpose(np.asarray(x), order).astype(dtype, copy=False)
            return x[None] if expand else x

        box = spaces.Box(image(space.low), image(space.high), dtype=dtype)
        return spaces.Dict({"image": box}), lambda o: {"image": image(o)}
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return spaces.Dict({"vector": spaces.Box(0.0, 1.0, (n,), np.float32)}), lambda o: {"vector": eye[int(o) - start]}
    if isinstance(space, spaces.Dict) and space.spaces and all(
            isinstance(s, spaces.Box) and len(s.shape) in (1, 3) for s in space.spaces.values()):
        return space, lambda o: dict(o)
    raise ConfigError("env.id", f"observation space {space} is not supported: use {SUPPORTED} (or wrap the env)")


class GymText(gym.Wrapper):
    """A Gymnasium env with the learners' Dict observation, a 0-based Discrete action space and text in ``info``."""

    def __init__(self, env: gym.Env, caption: Caption | None = None, caption_ref: str | None = None):
        super().__init__(env)
        self.observation_space, self._obs = adapt_observation(env.observation_space)
        act = env.action_space
        if not isinstance(act, spaces.Discrete):
            raise ConfigError("env.id", f"action space {act} is not supported: PPO and DQN act in a Discrete space "
                                        "(wrap the env to discretise its actions)")
        self.action_space, self._start = spaces.Discrete(int(act.n)), int(act.start)
        self._caption, self._caption_ref = caption, caption_ref or getattr(caption, "__qualname__", "caption")

    def _text(self, obs: Any, info: dict) -> dict:
        info = dict(info)
        if self._caption is not None:
            try:
                text = self._caption(obs, info)
            except Exception as err:
                raise CaptionError(f"{self._caption_ref} failed: {type(err).__name__}: {err}") from err
            if not isinstance(text, str):
                raise CaptionError(f"{self._caption_ref} returned {type(text).__name__}, not str")
            info["caption"] = text
        info.setdefault("caption", "")
        return info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._obs(obs), self._text(obs, info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(int(action) + self._start)
        return self._obs(obs), reward, terminated, truncated, self._text(obs, info)


def env_caption(env_cfg: Any) -> tuple[Caption | None, str | None]:
    """(caption function, its name) of an ``env=gym`` config: ``env.caption``, else ``env.id``'s registered one."""
    ref = cfg_get(env_cfg, "caption")
    if ref:
        return resolve_caption(str(ref)), str(ref)
    env_id = str(cfg_get(env_cfg, "id"))
    return CAPTIONS.get(env_id), (env_id if env_id in CAPTIONS else None)


def make_gym(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """``gymnasium.make(env.id)`` (``env.max_steps``: its episode limit) adapted by :class:`GymText`."""
    env_id = cfg_get(env_cfg, "id")
    if not env_id:
        raise ConfigError("env.id", "is required: a Gymnasium id (e.g. CartPole-v1)")
    max_steps = cfg_get(env_cfg, "max_steps")
    kwargs = {"max_episode_steps": int(max_steps)} if max_steps else {}
    caption, ref = env_caption(env_cfg)
    env = gym.make(str(env_id), **kwargs)
    try:
        return GymText(env, caption, ref)
    except ConfigError:
        env.close()
        raise


class GymOracle(Oracle):
    """``env=gym`` has no ground truth: no goals, nothing feasible."""

    family = "gym"
    goals: list[str] = []
    ground_truth = False   # the counterfactual LMs (llm=random|constant) built on it warn about nothing

    def feasible(self, info: dict) -> set[str]:
        return set()

    def feasible_from_caption(self, caption: str) -> set[str]:
        return set()


def check_config(cfg: Any) -> None:
    """``env=gym`` when the config loads: the env builds, its spaces are supported and its caption function returns
    text (:class:`ConfigError` naming the key otherwise)."""
    env_cfg = cfg.get("env") if hasattr(cfg, "get") else None
    if cfg_get(env_cfg, "name") != "gym":
        return
    env_id = cfg_get(env_cfg, "id")
    if not env_id:
        raise ConfigError("env.id", "is required: a Gymnasium id (e.g. CartPole-v1)")
    if (problem := id_problem(str(env_id))) is not None:
        raise ConfigError("env.id", problem)
    env_caption(env_cfg)   # a bad env.caption is named here
    try:
        env = make_gym(env_cfg, 0)
    except ConfigError as err:
        raise ConfigError(err.key, f"{env_id}: {err.message}") from None
    except Exception as err:
        raise ConfigError("env.id", f"gymnasium.make({env_id!r}) failed: {type(err).__name__}: "
                                    f"{str(err).splitlines()[0] if str(err) else ''}") from None
    try:
        _, info = env.reset(seed=0)
    except CaptionError as err:
        raise ConfigError("env.caption", str(err)) from None
    except Exception as err:
        raise ConfigError("env.id", f"{env_id}: reset failed: {type(err).__name__}: {err}") from None
    finally:
        env.close()


def gives_captions(env_cfg: Any) -> bool:
    """Whether an ``env=gym`` config's env has captions: a caption function, or the env's own ``info["caption"]``
    at reset (an env that does not build says True here: its own check names the problem)."""
    if env_caption(env_cfg)[0] is not None:
        return True
    try:
        env = make_gym(env_cfg, 0)
    except Exception:
        return True
    try:
        return bool(env.reset(seed=0)[1].get("caption"))
    except Exception:
        return True
    finally:
        env.close()


add_rule_provider(check_config)


def _env_id_of(env: Any) -> str:
    """The Gymnasium id of ``env``: an id as given, an env made by ``gymnasium.make`` (its spec), or a class or
    factory (registered as ``user/<Name>-v0``)."""
    if isinstance(env, str):
        return env
    if isinstance(env, gym.Env):
        spec = env.spec
        if spec is None or spec.id not in gym.registry:
            raise TypeError("env= takes a Gymnasium id, an env class or a function returning a new env (llmguide "
                            "builds num_envs copies and an evaluation env), not an env instance without a spec")
        if spec.kwargs == gym.registry[spec.id].kwargs:
            return spec.id
        return register_env(f"user/{re.sub(r'[^A-Za-z0-9_.]', '_', spec.name)}-v0", spec.entry_point,
                            max_episode_steps=spec.max_episode_steps, **spec.kwargs)
    if callable(env):
        name = re.sub(r"[^A-Za-z0-9_.]", "_", getattr(env, "__name__", type(env).__name__)).strip("_") or "env"
        return register_env(f"user/{name}-v0", env)
    raise TypeError(f"env= takes an env family name, a Gymnasium id, an env class or factory, got {type(env).__name__}")


def own_env_overrides(env: Any, caption: Any = None, families: tuple[str, ...] = ()) -> dict[str, Any]:
    """The overrides of ``llmguide.train(env=..., caption=...)``: ``env`` an env family (one of ``families``, as it is)
    or your own env (a Gymnasium id, class or factory: ``env=gym env.id=...``), ``caption`` a function
    ``fn(obs, info) -> str`` or ``"module:function"`` (``env.caption``)."""
    if env is None or isinstance(env, Mapping) or (isinstance(env, str) and env in families):
        if caption is not None:
            raise ConfigError("caption", f"takes your own env (env=<a Gymnasium id, class or factory>); env={env} "
                                         "makes its own captions")
        return {} if env is None else {"env": env}
    if isinstance(env, str) and ":" not in env and env not in gym.registry:
        return {"env": env}                          # neither: the config reports the unknown option
    out: dict[str, Any] = {"env": "gym", "env.id": _env_id_of(env)}
    if caption is not None:
        out["env.caption"] = caption if isinstance(caption, str) else caption_name(caption)
    return out
