"""The package's import graph: no cycles between modules, the kernel never imports a method, the
Runner (``pipelines``), the Ray layer, the sweep or the CLI, and no module uses another module's private
(``_name``) names.  Read from the source with ``ast`` (every import, including the ones inside functions),
so the rules hold whichever code path runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "llmguide"
KERNEL = ("core", "envs", "llm", "learners", "rewards", "sandbox", "distributed")
ABOVE_KERNEL = ("llmguide.methods", "llmguide.pipelines", "llmguide.sweep", "llmguide.cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports (``from pkg import mod`` resolves to ``pkg.mod`` when that is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n.startswith("llmguide")}
    return out & set(modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_kernel_names_no_method_runner_ray_sweep_or_cli() -> None:
    upward = []
    for name, imported in _graph().items():
        layer = name.split(".")[1] if "." in name else ""
        if layer not in KERNEL:
            continue
        for target in imported:
            if target.startswith(ABOVE_KERNEL) or (layer in ("envs", "llm") and target.startswith("llmguide.distributed")):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_pipelines_import_no_method_sweep_cli_or_api() -> None:
    """The pipelines call what a recipe declares: a method's package is found by its entry point, never imported
    by name (issue 68), and the floors above them (the sweep, the CLI, the Python API) are theirs to call."""
    upward = [f"{name} -> {target}" for name, imported in _graph().items() if name.startswith("llmguide.pipelines")
              for target in imported if target.startswith(("llmguide.methods", "llmguide.sweep", "llmguide.cli", "llmguide.api"))]
    assert upward == []


def test_core_does_not_import_the_package_root() -> None:
    for name, imported in _graph().items():
        if name.startswith("llmguide.core"):
            assert "llmguide" not in imported, name


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _private_uses(source: str, me: str, modules: set[str]) -> list[str]:
    """Where the module ``me`` (its source) names a private name of another project module:
    ``from llmguide.x import _name`` (or relative), ``import llmguide.x._mod``, or ``<llmguide.x module>._name``."""
    tree = ast.parse(source)
    package = me if f"{me}.__init__" in modules or me == "llmguide" else me.rpartition(".")[0]
    bound: dict[str, str] = {}   # local name -> the project module it names
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if not module.startswith("llmguide"):
                continue
            for alias in node.names:
                if f"{module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _private(alias.name) and module != me:
                    found.append(f"{me}:{node.lineno} from {module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("llmguide"):
                    continue
                bound[alias.asname or "llmguide"] = alias.name if alias.asname else "llmguide"
                if any(_private(part) for part in alias.name.split(".")):
                    found.append(f"{me}:{node.lineno} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and (chain := _dotted(node.value)):
            head, _, rest = chain.partition(".")
            target = f"{bound[head]}.{rest}" if head in bound and rest else bound.get(head)
            if target in modules and target != me:
                found.append(f"{me}:{node.lineno} {chain}.{node.attr}")
    return found


def _module_names() -> set[str]:
    """Every project module's name, a package also as ``<package>.__init__`` (to tell packages apart)."""
    names = set(_modules())
    return names | {f"{_module_name(p)}.__init__" for p in PACKAGE.rglob("__init__.py")}


def test_no_module_uses_another_modules_private_names() -> None:
    modules = _module_names()
    found = [use for name, path in sorted(_modules().items()) for use in _private_uses(path.read_text(), name, modules)]
    assert found == [], "make the name public, or keep its use in its own module"


@pytest.mark.parametrize("source", [
    "from llmguide.core.config import _compose",
    "from llmguide.core.config import load_config as lc, _compose as c",
    "from ..core.config import _compose",
    "import llmguide.core.config\nllmguide.core.config._compose([])",
    "import llmguide.core.config as cfgmod\ncfgmod._compose([])",
    "from llmguide.core import config\nconfig._compose([])",
    "def f():\n    from llmguide.core import config as c\n    return c._MISSING",
])
def test_the_private_name_check_finds_each_form(source: str) -> None:
    assert len(_private_uses(source, "llmguide.llm.backends.hf", _module_names())) == 1


@pytest.mark.parametrize("source", [
    "from llama_cpp._internals import LlamaModel",
    "import numpy._core as c\nc._x",
    "from llmguide.core.config import load_config, __doc__",
    "from llmguide.llm.backends.hf import _resolve",            # its own module
    "from llmguide.core import config\nconfig.load_config([])",
    "self._features(obs)",
])
def test_the_private_name_check_allows(source: str) -> None:
    assert _private_uses(source, "llmguide.llm.backends.hf", _module_names()) == []
