"""The package's import graph: no cycles between modules, and the kernel never imports a method, the
Runner (``pipelines``), the Ray layer, the sweep or the CLI.  Read from the source with ``ast`` (every
import, including the ones inside functions), so the rules hold whichever code path runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "llmguide"
KERNEL = ("core", "envs", "llm", "learners", "rewards", "sandbox", "distributed")
ABOVE_KERNEL = ("llmguide.methods", "llmguide.pipelines", "llmguide.sweep", "llmguide.cli")
MAX_LINES = 400


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


def test_core_does_not_import_the_package_root() -> None:
    for name, imported in _graph().items():
        if name.startswith("llmguide.core"):
            assert "llmguide" not in imported, name


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_files_stay_under_the_line_limit(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES
