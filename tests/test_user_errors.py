"""User errors exit 2 with one line naming the key, never a traceback, and before any compute (issue 31
point 6, issue 32 point 1b): a bogus ``env.id`` of every env family, a bad ``env.task`` found while the env
is built, and a method on an env family it does not support (``Recipe.env_families``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmguide.cli import main
from llmguide.core.errors import ConfigError
from llmguide.pipelines import load_config, recipe_class

BAD_IDS = {
    "crafter": "llmguide/Nope-v0",
    "craftax": "llmguide/Nope-v0",
    "babyai": "BabyAI-Nope-v0",
    "minihack": "MiniHack-Nope-v0",
    "nethack": "NetHackNope-v0",
}


def _one_line_error(capsys, key: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"config error at '{key}'" in err, err
    return err


@pytest.mark.parametrize("family", sorted(BAD_IDS))
def test_a_bogus_env_id_is_refused_naming_the_key(family, tmp_path, capsys):
    code = main(["train", f"env={family}", f"env.id={BAD_IDS[family]}", f"run.dir={tmp_path}", "run.name=x",
                 "total_steps=8", "progress=false"])
    assert code == 2
    err = _one_line_error(capsys, "env.id")
    assert BAD_IDS[family] in err
    assert not (tmp_path / "x").exists()   # refused before the run directory or any env exists


@pytest.mark.parametrize("overrides", [["env=minihack", "env.id=MiniHack-KeyRoom-S5-v0"],
                                       ["env=nethack", "env.id=NetHackScore-v0"],
                                       ["env=crafter", "env.id=llmguide/Crafter-v0"], ["env=babyai", "env.id=null"]])
def test_the_ids_of_each_family_still_load(overrides):
    assert load_config(overrides).env.name == overrides[0].split("=")[1]


def test_a_near_miss_nethack_id_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean MiniHack-KeyRoom-S5-v0"):
        load_config(["env=minihack", "env.id=MiniHack-Keyroom-S5-v0"])


def test_the_real_command_prints_no_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "llmguide.cli", "train", "env=minihack", "env.id=MiniHack-Nope-v0",
                          f"run.dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "config error at 'env.id'" in out.stderr
    assert [line for line in out.stderr.splitlines() if line.strip()] == [out.stderr.strip()]


def test_a_bad_task_found_while_building_the_env_is_a_one_line_error(tmp_path, capsys):
    code = main(["train", "env=babyai", "env.task=Nope", f"run.dir={tmp_path}", "run.name=x", "total_steps=8",
                 "progress=false"])
    assert code == 2
    _one_line_error(capsys, "env.task")


@pytest.mark.parametrize("method,env", [("ellm", "babyai"), ("oni_retrieval", "babyai"), ("motif", "babyai"),
                                        ("bk_code", "minihack"), ("glam", "minihack"), ("ptgm", "nethack")])
def test_a_method_refuses_an_env_family_it_does_not_support(method, env, tmp_path, capsys):
    code = main(["train", f"method={method}", f"env={env}", f"run.dir={tmp_path}", "run.name=x", "--print-config"])
    assert code == 2
    err = _one_line_error(capsys, "env")
    assert f"method={method}" in err and f"got env={env}" in err


def test_a_short_recipe_name_is_one_line_naming_the_full_name(tmp_path, capsys):
    code = main(["train", "method=ellm", "env=crafter", "method.recipe=ellm", f"run.dir={tmp_path}", "run.name=x",
                 "--print-config"])
    assert code == 2
    assert "'llmguide.methods.ellm.recipe:ELLMRecipe'" in _one_line_error(capsys, "method.recipe")


def test_env_families_are_declared_on_each_recipe(monkeypatch):
    from llmguide.core.config import group_options

    for method in group_options("method"):
        cfg = load_config([f"method={method}", "env=babyai"]) if method in ("glam", "npae", "drrn") else None
        cls = recipe_class(cfg or _any_env_config(method))
        assert "env_families" in vars(cls) or cls.env_families is None, cls
    # a family is added with one line (as ONI gained crafter|craftax with their message line)
    oni = recipe_class(load_config(["method=oni_retrieval", "env=minihack"]))
    with pytest.raises(ConfigError, match="runs on env="):
        load_config(["method=oni_retrieval", "env=babyai"])
    monkeypatch.setattr(oni, "env_families", (*oni.env_families, "babyai"))
    assert load_config(["method=oni_retrieval", "env=babyai"]).env.name == "babyai"


def _any_env_config(method: str):
    for env in ("crafter", "minihack", "babyai"):
        try:
            return load_config([f"method={method}", f"env={env}"])
        except ConfigError:
            continue
    raise AssertionError(f"method={method} loads on no env")


def test_a_key_that_takes_auto_or_a_number_takes_a_number_on_a_fresh_command_line():
    """``llm.n_threads=1`` was refused ("expected str") by a fresh ``llmguide`` process: the types were checked
    before the LM layer had said that ``llm.n_threads`` takes ``auto`` or a number."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "llmguide.cli", "train", "--print-config", "llm.n_threads=1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "n_threads: 1" in out.stdout
