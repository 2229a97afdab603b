"""Plugins: what installed packages add to llmguide, found through Python entry points (as Gymnasium and pytest
find theirs).  Three groups, each ``name = "module:attr"`` in a package's ``[project.entry-points.<group>]``:

- ``llmguide.methods``: a method's :class:`~llmguide.pipelines.runner.Recipe` class (``method.recipe``'s short
  name);
- ``llmguide.llm_backends``: ``fn(llm_cfg, context) -> LanguageModel``, the backend ``llm.backend`` names;
- ``llmguide.env_families``: a :class:`~llmguide.envs.families.Family`, the family ``env.name`` names.

llmguide registers its own methods, backends and families the same way (its ``pyproject.toml``).  Next to the
module an entry point names, a ``conf/`` folder (``<group>/<option>.yaml``, as the package's ``conf/``) is a
config search folder (:func:`plugin_config_dirs`) and a ``prompts/`` folder holds its prompts.  Reading the
entries imports nothing: a plugin is imported when its recipe, backend or family is used.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module, metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

GROUPS = ("llmguide.methods", "llmguide.llm_backends", "llmguide.env_families")


def entries(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of the installed entry points of ``group``, in the order they are declared (a name
    declared twice: the first found on ``sys.path`` wins)."""
    out: dict[str, str] = {}
    for ep in metadata.entry_points(group=group):
        out.setdefault(ep.name, ep.value)
    return out


def load(target: str) -> Any:
    """The object ``"module:attr"`` names (imported now)."""
    module, _, attr = target.partition(":")
    obj = import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


def module_folder(module: str) -> Path | None:
    """The folder holding ``module``'s file, found without importing it or its packages; None when absent."""
    top, *parts = module.split(".")
    try:
        spec = find_spec(top)
    except (ImportError, ValueError):
        return None
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        folder = Path(root).joinpath(*parts)
        if folder.is_dir() and (folder / "__init__.py").is_file():   # the module is a package
            return folder
        if folder.with_suffix(".py").is_file():
            return folder.parent
    return None


@cache
def plugin_config_dirs() -> tuple[Path, ...]:
    """The ``conf/`` folders beside every entry point's module, in group and name order (each once)."""
    found: list[Path] = []
    for group in GROUPS:
        for target in entries(group).values():
            folder = module_folder(target.partition(":")[0])
            conf = folder / "conf" if folder is not None else None
            if conf is not None and conf.is_dir() and conf.resolve() not in found:
                found.append(conf.resolve())
    return tuple(found)
