"""The tests left to ``make test-slow`` for their cost (tests/costly.py) exist, and are marked slow."""

from __future__ import annotations

import ast
from pathlib import Path

from costly import COSTLY, costly_reason

HERE = Path(__file__).parent


def test_every_costly_test_names_a_test_function_that_exists():
    missing = []
    for name in COSTLY:
        file, _, function = name.partition("::")
        path = HERE / file
        found = path.is_file() and any(isinstance(n, ast.FunctionDef) and n.name == function
                                       for n in ast.walk(ast.parse(path.read_text())))
        if not found:
            missing.append(name)
    assert not missing, f"tests/costly.py names tests that do not exist: {missing}"


def test_a_costly_test_is_found_by_its_node_id_with_or_without_parameters(request):
    name = next(iter(COSTLY))
    assert costly_reason(f"tests/{name}") == COSTLY[name]
    assert costly_reason(f"tests/{name}[ellm_oracle]") == COSTLY[name]
    assert costly_reason(request.node.nodeid) is None


def test_the_collection_marks_them_slow(pytestconfig):
    """``-m "not slow"`` leaves them out: collected here with the marker the conftest hook added."""
    import subprocess
    import sys

    name = "test_runner.py::test_a_new_reward_is_one_file_and_one_yaml_trained_through_the_cli"
    assert name in COSTLY
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", "-p",
                          "no:cacheprovider", str(HERE / "test_runner.py")], capture_output=True, text=True,
                         cwd=HERE.parent, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_a_new_reward_is_one_file" not in out.stdout and "test_runner.py::" in out.stdout
