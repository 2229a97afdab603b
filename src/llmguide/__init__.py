"""llmguide: reinforcement learning guided by language models.

.. code-block:: python

    import llmguide

    run = llmguide.train(env="crafter", method="rnd", total_steps=20_000)   # -> llmguide.Run
    policy = llmguide.load_policy(run.path)                                   # -> llmguide.Policy
    action, _ = policy.predict(obs, deterministic=True)

Importing the package is light: the functions import the framework when first called
(:mod:`llmguide.api` holds them).
"""

from __future__ import annotations

import warnings
from typing import Any

from llmguide.version import __version__

__all__ = ["Callback", "Policy", "Run", "__version__", "load_config", "load_policy", "load_run", "run", "train"]

# third-party noise that tells a user nothing (issue 32): pygame's pkg_resources notice (craftax, minigrid),
# transformers' deprecation FutureWarnings about its own internals
warnings.filterwarnings("ignore", message=r"pkg_resources is deprecated", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")


def train(config: Any = None, /, *, callback: Any = None, **overrides: Any) -> Any:
    """Train as ``llmguide train`` would; the :class:`Run` (see :func:`llmguide.api.train`).  ``callback``: a
    :class:`Callback`, a list of them, or a function ``fn(agent, metrics)`` called after every update."""
    from llmguide.api import train as _train

    return _train(config, callback=callback, **overrides)


def run(verb: str, config: Any = None, /, **overrides: Any) -> int:
    """An offline verb as ``llmguide <verb>`` runs it (``answers``, a method's step); its exit code (see
    :func:`llmguide.api.run`)."""
    from llmguide.api import run as _run

    return _run(verb, config, **overrides)


def load_policy(run_dir: Any, overrides: Any = ()) -> Any:
    """A run's trained agent as a :class:`Policy` (``act``, ``predict``, ``make_env``, ``evaluate``)."""
    from llmguide.api import load_policy as _load_policy

    return _load_policy(run_dir, overrides)


def load_run(run_dir: Any) -> Any:
    """A run directory as a :class:`Run` (``path``, ``config``, ``metrics``, ``eval``, ``report``)."""
    from llmguide.api import load_run as _load_run

    return _load_run(run_dir)


def load_config(config: Any = None, **overrides: Any) -> Any:
    """The validated config of overrides (a list of ``key=value``, a dict, keywords)."""
    from llmguide.api import load_config as _load_config

    return _load_config(config, **overrides)


def __getattr__(name: str) -> Any:
    if name in ("Run", "Policy", "Callback"):
        from llmguide import api

        return getattr(api, name)
    raise AttributeError(f"module 'llmguide' has no attribute {name!r}")
