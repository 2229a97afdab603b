"""The recipe registry: which :class:`~llmguide.pipelines.runner.Recipe` class a config's ``method.recipe`` names.

A method's YAML names its recipe as ``"module:Class"``; the pipelines name none (:data:`RECIPES` holds only
``standard``, the default).  The installed methods' recipes are the entry points of ``llmguide.methods``
(:mod:`llmguide.core.plugins`): a short name (``recipe: ellm``, as runs saved before full names were) is refused
with the full one its entry point gives.
"""

from __future__ import annotations

from importlib import import_module

from omegaconf import DictConfig

from llmguide.core.errors import ConfigError
from llmguide.core.plugins import entries

RECIPES: dict[str, str] = {"standard": "llmguide.pipelines.standard:StandardRecipe"}
METHOD_GROUP = "llmguide.methods"


def recipe_class(cfg: DictConfig) -> type:
    """The recipe class named by ``method.recipe`` (imported now, so its config rules are registered)."""
    name = str(cfg.method.get("recipe") or "standard")
    target = RECIPES.get(name, name)
    module, _, cls = target.partition(":")
    if not cls:
        full = method_recipe(name)
        hint = f"name it in full: {full!r}" if full else f"name it as 'module:Class' (or one of {sorted(RECIPES)})"
        raise ConfigError("method.recipe", f"unknown recipe {name!r}; {hint}")
    try:
        return getattr(import_module(module), cls)
    except (ImportError, AttributeError) as err:
        raise ConfigError("method.recipe", f"cannot import {target!r}: {err}") from None


def method_recipe(short: str) -> str | None:
    """``"module:Class"`` of the installed method called ``short`` (its ``llmguide.methods`` entry point), or None."""
    return entries(METHOD_GROUP).get(short)
