"""Discovery (issue 32 point 8): ``llmguide list``, ``llmguide train --help method=ellm`` and "did you mean"."""

from __future__ import annotations

import pytest

from llmguide.cli import main
from llmguide.core.config import group_options


def test_list_shows_envs_with_tasks_methods_with_families_and_lm_backends(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for family in ("crafter", "craftax", "babyai", "minihack", "nethack"):
        assert f"\n  {family} " in out
    assert "place_table" in out and "GoToLocal" in out and "MiniHack-KeyRoom-S5-v0" in out and "NetHackScore-v0" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    for method in group_options("method"):
        assert method in lines, method
    assert "crafter|craftax" in lines["ellm"] and "babyai" not in lines["ellm"]
    assert "minihack|nethack" in lines["oni_retrieval"] and " any " in lines["rnd"] and "ready" in lines["ellm"]
    for backend in ("embedded", "http", "hf", "oracle", "random", "shuffled", "constant"):
        assert backend in lines, backend


def test_list_one_section(capsys):
    assert main(["list", "llms"]) == 0
    out = capsys.readouterr().out
    assert "shuffled" in out and "crafter" not in out


def test_help_of_a_method_shows_its_keys_with_their_comments(capsys):
    assert main(["train", "--help", "method=ellm"]) == 0
    out = capsys.readouterr().out
    assert "usage: llmguide train" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("method.suggester = score"))
    assert "closed vocabulary top-k" in line
    assert "runs on env=crafter|craftax" in out
    assert main(["train", "method=ellm_oracle", "--help"]) == 0   # an option that extends ellm.yaml
    out = capsys.readouterr().out
    assert "method.suggester = oracle" in out and "extends method=ellm" in out and "# weight of the ELLM goal reward" in out


def test_help_of_the_llm_block_includes_the_root_keys(capsys):
    assert main(["train", "-h", "llm=http"]) == 0
    out = capsys.readouterr().out
    assert "llm.timeout = 30.0" in out and "llm.service.max_batch = 8" in out
    assert "requests answered in one backend call" in out


@pytest.mark.parametrize("overrides,fragment", [
    (["method=ellm", "method.sugester=score"], "did you mean method.suggester?"),
    (["totl_steps=5"], "did you mean total_steps?"),
    (["agent.num_step=64"], "did you mean agent.num_steps?"),
    (["env=babyai", "method=glam", "agent.num_step=16"], "did you mean agent.num_steps?"),   # one vocabulary
    (["method=elm"], "did you mean method=ellm?"),
])
def test_unknown_keys_and_options_get_a_did_you_mean(overrides, fragment, capsys):
    assert main(["train", "--print-config", *overrides]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_help_for_an_unknown_option_is_a_one_line_error(capsys):
    assert main(["train", "--help", "llm=htp"]) == 2
    assert "did you mean http?" in capsys.readouterr().err
