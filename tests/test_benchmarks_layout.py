"""benchmarks/ by kind (issue 68): studies/, costs/, analyses/, tools/ and the harness package, every script named in
benchmarks/README.md, none named like a package it could shadow, no script inside results/, and a study script
runs from the repository root."""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
KINDS = ("studies", "costs", "analyses", "tools")


def _scripts() -> list[Path]:
    return sorted(p for kind in KINDS for p in (BENCHMARKS / kind).rglob("*") if p.suffix in (".py", ".sh"))


def test_benchmarks_holds_folders_by_kind_and_the_readme_names_every_script():
    assert sorted(p.name for p in BENCHMARKS.iterdir() if not p.name.startswith(".") and p.name != "__pycache__") == [
        "README.md", "analyses", "costs", "harness", "results", "studies", "tools"]
    readme = (BENCHMARKS / "README.md").read_text()
    missing = [str(p.relative_to(BENCHMARKS)) for p in _scripts()
               if p.name != "_path.py" and f"`{p.name}`" not in readme]
    assert not missing, f"scripts benchmarks/README.md does not name: {missing}"


def test_no_script_is_named_like_a_package_and_each_name_is_one_script():
    """``_path`` puts the folders on sys.path (at its end), so a script imports another by its name: a name two
    scripts share, or an installed package's (benchmarks/craftax.py once shadowed craftax), would be ambiguous."""
    names: dict[str, list[Path]] = {}
    for path in _scripts():
        if path.suffix == ".py" and path.parent.name in KINDS:
            names.setdefault(path.stem, []).append(path)
    shared = {n: p for n, p in names.items() if len(p) > 1 and n != "_path"}
    assert not shared, shared
    copies = {p.read_text() for p in names["_path"]}
    assert len(copies) == 1, "the folders' _path.py differ"
    folders = {BENCHMARKS, *(BENCHMARKS / kind for kind in KINDS), ROOT, ROOT / "tests"}
    path = [p for p in sys.path if Path(p or ".").resolve() not in folders]
    taken = sorted(n for n in [*names, "harness"] if n in sys.builtin_module_names
                   or importlib.machinery.PathFinder.find_spec(n, path) is not None)
    assert not taken, f"scripts named like an installed module: {taken}"


def test_no_script_inside_results():
    """What ran on a GPU lease is kept there only as data (``lease4_go.sh.txt``; the script is in tools/leases/);
    the LM-written programs of BK label runs (``bk/code-*.py``, ``bk/final.py``) are run outputs, not our scripts."""
    scripts = [p.relative_to(BENCHMARKS) for p in (BENCHMARKS / "results").rglob("*") if p.suffix in (".py", ".sh")
               and not (p.parent.name == "bk" and (p.name == "final.py" or p.name.startswith("code-")))]
    assert not scripts, scripts


def test_a_study_script_and_the_harness_run_from_the_repository_root():
    for cmd in (["benchmarks/studies/bk.py", "--help"], ["benchmarks/studies/ellm_lm.py", "--help"],
                ["benchmarks/harness", "--help"]):
        proc = subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout, (cmd, proc.stderr[-2000:])
