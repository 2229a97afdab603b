"""The static check of LM-written code (the first, cheapest layer; see :mod:`llmguide.sandbox`)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

DEFAULT_IMPORTS = ("math", "numpy", "re", "collections", "itertools", "functools", "statistics",
                   "random", "heapq", "operator", "string")
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "exit", "quit", "help", "memoryview", "__import__", "__builtins__", "__loader__",
    "__spec__", "classmethod", "staticmethod", "property", "super",
})


class SandboxError(ValueError):
    """The code was rejected before running (syntax error, forbidden import or name)."""


def check_code(code: str, allowed_imports: Sequence[str] = DEFAULT_IMPORTS) -> None:
    """Raise :class:`SandboxError` if ``code`` does not parse or uses a forbidden construct."""
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise SandboxError(f"syntax error at line {err.lineno}: {err.msg}") from None
    allowed = set(allowed_imports)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level:
                raise SandboxError(f"line {node.lineno}: relative import is not allowed")
            for name in names:
                if name.split(".")[0] not in allowed:
                    raise SandboxError(f"line {node.lineno}: forbidden import '{name}' "
                                       f"(allowed: {', '.join(sorted(allowed))})")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise SandboxError(f"line {node.lineno}: access to private attribute '.{node.attr}' is not allowed")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise SandboxError(f"line {node.lineno}: use of '{node.id}' is not allowed")
        elif isinstance(node, ast.alias) and node.name.startswith("_"):
            raise SandboxError(f"line {getattr(node, 'lineno', '?')}: import of private name '{node.name}'")
