"""No kernel module names a method, in code or in data (issue 51: method data lives with its method), nor do the
pipelines and the command line, which call only what a recipe declares (issue 68).

Code: every identifier (names, attributes, functions, classes, arguments, keywords, imports) and every string
constant of each kernel module, of ``pipelines/`` and of ``cli.py``, read with ``ast``; docstrings and other bare
string statements are prose and may cite a paper, as comments may.  Data: the keys, string values and option names
of every config file under the package's ``conf/`` (a method's own YAMLs live in its package's ``conf/``).  A method name counts as a whole word or an
identifier part (``bk_level``, ``ELLMRules``, ``"ONI's"``), case-insensitive."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "llmguide"
KERNEL = ("core", "envs", "llm", "learners", "rewards", "sandbox", "distributed")
SHARED = ("pipelines", "cli.py")   # above the kernel, below the methods: they name none either
CONF = PACKAGE / "conf"
# The methods and their variants' names; every package under methods/ is added, so a new method is covered too.
METHOD_NAMES = frozenset({"ellm", "bk", "glam", "ptgm", "oni", "motif", "drrn", "npae"}
                         | {p.name.lower() for p in (PACKAGE / "methods").iterdir() if (p / "__init__.py").exists()})

# (path under src/llmguide, the text that names a method) -> why it stays.  "*": the whole file.  Kept short: an
# entry that no longer matches fails the test, so it goes when its reason does.
ALLOWED = {
    ("envs/crafter/env.py", "ellm_rules"):
        "the old name of env.lenient_rules, read for this release only (with a deprecation line)",
    ("conf/env/crafter.yaml", "ellm_rules"):
        "the old key stays in the config so that env.ellm_rules=true composes (Hydra's struct mode) and old runs' "
        "saved configs load; null unless set",
    ("conf/env/craftax.yaml", "ellm_rules"): "as in crafter.yaml",
}


def method_words(text: str) -> list[str]:
    """The method names in ``text``: its words and identifier parts (snake_case, CamelCase, ACRONYMS)."""
    parts = (p for word in re.split(r"[^A-Za-z0-9]+", text)
             for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", word))
    return [p.lower() for p in parts if p.lower() in METHOD_NAMES]


def _prose(tree: ast.AST) -> set[int]:
    """The ids of docstrings and other bare string statements (no runtime effect: prose)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def code_texts(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` for every identifier and non-prose string constant of a module's source."""
    tree = ast.parse(source)
    prose = _prose(tree)
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Name):
            texts = [node.id]
        elif isinstance(node, ast.Attribute):
            texts = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            texts = [node.name]
        elif isinstance(node, ast.arg):
            texts = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            texts = [node.arg]
        elif isinstance(node, ast.alias):
            texts = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom) and node.module:
            texts = [node.module]
        elif isinstance(node, ast.Global | ast.Nonlocal):
            texts = list(node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            texts = [node.value]
        for text in texts:
            if method_words(text):
                yield getattr(node, "lineno", 0), text


def data_texts(text: str, option: str) -> Iterator[str]:
    """The option name, every key and every string value of a YAML config (comments are prose)."""
    yield option
    todo = [yaml.safe_load(text)]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            todo += item
        elif isinstance(item, str):
            yield item


def _kernel_modules() -> list[Path]:
    places = [PACKAGE / layer for layer in (*KERNEL, *SHARED)]
    return sorted(p for place in places for p in ([place] if place.is_file() else place.rglob("*.py")))


def _kernel_configs() -> list[Path]:
    return sorted(CONF.rglob("*.yaml"))


def _allowed(rel: str, text: str, used: set) -> bool:
    for key in ((rel, "*"), *((rel, word) for word in re.findall(r"[A-Za-z0-9_]+", text))):
        if key in ALLOWED:
            used.add(key)
            return True
    return False


def _findings() -> tuple[list[str], set]:
    found: list[str] = []
    used: set = set()
    for path in _kernel_modules():
        rel = path.relative_to(PACKAGE).as_posix()
        found += [f"{rel}:{line}: {text[:80]!r} names {method_words(text)}"
                  for line, text in code_texts(path.read_text()) if not _allowed(rel, text, used)]
    for path in _kernel_configs():
        rel = path.relative_to(PACKAGE).as_posix()
        found += [f"{rel}: {text[:80]!r} names {method_words(text)}"
                  for text in data_texts(path.read_text(), path.stem) if method_words(text) and not _allowed(rel, text, used)]
    return found, used


def test_the_kernel_names_no_method_in_code_or_data() -> None:
    found, _ = _findings()
    assert not found, "a kernel module or config names a method (move it to the method, or name it neutrally):\n" + \
        "\n".join(found)


def test_every_allowlist_entry_is_still_needed() -> None:
    _, used = _findings()
    assert set(ALLOWED) <= used, f"stale entries, remove them: {sorted(set(ALLOWED) - used)}"


def test_the_scan_covers_the_kernel() -> None:
    modules, configs = _kernel_modules(), _kernel_configs()
    assert {p.relative_to(PACKAGE).parts[0] for p in modules} == {*KERNEL, *SHARED}
    assert {p.relative_to(CONF).parts[0] for p in configs} == {"config.yaml", "env", "llm", "agent", "method"}
    assert (CONF / "method" / "rnd.yaml") in configs and (PACKAGE / "pipelines" / "answers.py") in modules
    assert {"ellm", "bk", "glam", "ptgm", "oni"} <= METHOD_NAMES


@pytest.mark.parametrize(("source", "found"), [
    ("def build_bk_level(): pass", "build_bk_level"),
    ("x = cfg.ellm_rules", "ellm_rules"),
    ("class ELLMRules: pass", "ELLMRules"),
    ("from llmguide.methods.oni import oracle", "llmguide.methods.oni"),
    ("import llmguide.methods.glam as g", "llmguide.methods.glam"),
    ("f(ptgm_steps=3)", "ptgm_steps"),
    ("def f(motif_pairs): return 0", "motif_pairs"),
    ("raise ValueError('a trainable LM (GLAM) trains here')", "a trainable LM (GLAM) trains here"),
    ("msg = f'use method={name} (BK-Code)'", " (BK-Code)"),   # an f-string's constant part
    ("KEY = 'bk_random_phi'", "bk_random_phi"),
    ("NPAE = 1", "NPAE"),
])
def test_the_code_check_finds_each_form(source: str, found: str) -> None:
    assert [text for _, text in code_texts(source)] == [found]


@pytest.mark.parametrize("source", [
    '"""A module after ELLM (Du et al. 2023) and BK."""\n',
    'def f():\n    """ONI\'s labels, Motif\'s preferences."""\n    return 0\n',
    'X = 1\n"""The attribute doc of X: GLAM\'s choice."""\n',
    "# ELLM's rules\nlenient_rules = True\n",
    "bookkeeping, onion, bkg, motifs_of_time, ellmx = 1, 2, 3, 4, 5\n",   # method names only as a part of a word
])
def test_the_code_check_allows_prose_and_other_words(source: str) -> None:
    assert list(code_texts(source)) == []


def test_the_data_check_finds_keys_values_and_option_names_not_comments() -> None:
    text = "name: plain\nellm_rules: false   # ELLM's rules\nlearner: {kind: glam}\nlist: [a, oni_label]\n"
    assert sorted(t for t in data_texts(text, "option") if method_words(t)) == ["ellm_rules", "glam", "oni_label"]
    assert [t for t in data_texts("a: 1  # ONI, Motif, BK\n", "drrn") if method_words(t)] == ["drrn"]
