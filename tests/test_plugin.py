"""A method in a package of its own (``tests/plugin_pkg/``, the README's "Adding a method") installed into a
folder with its installation metadata, as pip installs any package: llmguide finds its recipe, config, prompt
and offline verbs through its entry point.  It trains, builds an answer table and runs its own verb through the
command line and the Python API, and no llmguide file names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugin_pkg"
TINY = ["env=crafter", "num_envs=2", "total_steps=64", "agent.num_steps=32", "agent.hidden=32", "log_every=32",
        "eval.episodes=1", "eval.max_steps=10", "progress=false"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed (``pip install --target``: its files and its ``.dist-info`` with the entry point)."""
    target, source = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("plugin") / "pkg"
    shutil.copytree(PLUGIN, source)   # the build writes beside its sources: not into the checkout
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    assert list(target.glob("llmguide_wordbonus-*.dist-info/entry_points.txt"))
    return target


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch):
    """This process sees the plugin as installed (its folder on ``sys.path``), and forgets it afterwards."""
    from llmguide.core.plugins import plugin_config_dirs

    monkeypatch.syspath_prepend(str(site))
    plugin_config_dirs.cache_clear()
    yield site
    plugin_config_dirs.cache_clear()
    for name in [m for m in sys.modules if m == "wordbonus" or m.startswith("wordbonus.")]:
        del sys.modules[name]


def cli(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_no_llmguide_file_names_the_plugin():
    names = [p for p in [*(ROOT / "src").rglob("*"), ROOT / "pyproject.toml"]
             if p.is_file() and p.suffix in (".py", ".yaml", ".toml", ".txt") and "wordbonus" in p.read_text()]
    assert names == []


@pytest.mark.slow   # seven commands, each its own process (about 40 s)
def test_the_plugin_trains_answers_and_runs_its_verb_from_the_command_line(site, tmp_path):
    run = [f"run.dir={tmp_path}"]
    helped = cli(site, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "tally" in helped.stdout and "wordbonus: count a dataset" in helped.stdout
    listed = cli(site, "list", "methods", cwd=tmp_path)
    assert "wordbonus" in listed.stdout and "crafter|craftax" in listed.stdout
    trained = cli(site, "train", "method=wordbonus", *TINY, *run, "run.name=t", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert json.loads((tmp_path / "t" / "eval.json").read_text())["episodes"] == 1
    collected = cli(site, "collect", "method=wordbonus", "env=crafter", "method.collect_steps=64", "num_envs=2",
                    "env.max_steps=16", *run, "run.name=data", cwd=tmp_path)
    assert collected.returncode == 0, collected.stderr
    table = tmp_path / "hints.sqlite"
    answered = cli(site, "answers", "method=wordbonus", "env=crafter", "llm=random",
                   f"answers.data={tmp_path / 'data'}", f"answers.out={table}", "progress=false", cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert "distinct queries answered" in answered.stdout and table.is_file()
    tallied = cli(site, "tally", "method=wordbonus", "env=crafter", f"method.data={tmp_path / 'data'}", *run,
                  cwd=tmp_path)
    assert tallied.returncode == 0, tallied.stderr
    assert json.loads((tmp_path / "data" / "tally.json").read_text())
    wrong = cli(site, "tally", "method=wordbonus", "env=crafter", *run, cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "method.data" in wrong.stderr


def test_the_plugin_trains_answers_and_runs_its_verb_from_python(installed, tmp_path):
    import llmguide
    from llmguide.llm.table import AnswerTable
    from llmguide.pipelines.answers import prompt_sha256

    result = llmguide.train([*TINY, "method=wordbonus", "method.word=grass", f"run.dir={tmp_path}", "run.name=t"])
    assert result.eval["episodes"] == 1 and result.config["method"]["word"] == "grass"
    data = tmp_path / "data"
    assert llmguide.run("collect", ["method=wordbonus", "env=crafter", "num_envs=2", "method.collect_steps=64",
                                    "env.max_steps=16", "progress=false", f"run.dir={tmp_path}", "run.name=data"]) == 0
    table = tmp_path / "hints.sqlite"
    cfg = llmguide.load_config(["method=wordbonus", "env=crafter", "llm=random", "progress=false",
                                f"answers.data={data}", f"answers.out={table}"])
    assert llmguide.run("answers", cfg) == 0
    stored = AnswerTable(table)
    try:
        meta = stored.meta()
    finally:
        stored.close()
    assert meta["method"] == "wordbonus" and meta["prompt_sha256"] == prompt_sha256(cfg)
    other = llmguide.load_config(["method=wordbonus", "env=crafter", "method.max_tokens=8"])
    assert prompt_sha256(other) != prompt_sha256(cfg)   # a key the recipe declares changes the table's prompt hash
    assert llmguide.run("tally", ["method=wordbonus", "env=crafter", f"method.data={data}"]) == 0
    assert (data / "tally.json").is_file()
