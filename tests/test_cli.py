"""The command line: help lists groups and options; bad configs exit non-zero with the key named."""

import subprocess
import sys

from llmguide.cli import VERBS, main
from llmguide.core.config import GROUPS, group_options


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_verbs_groups_and_options():
    out = run_cli("--help")
    assert out.returncode == 0
    for verb in VERBS:
        assert verb in out.stdout
    for group in GROUPS:
        assert f"  {group}" in out.stdout
        for option in group_options(group):
            assert option in out.stdout


def test_per_verb_help_lists_groups():
    out = run_cli("train", "--help")
    assert out.returncode == 0
    assert "env" in out.stdout and "crafter" in out.stdout and "method" in out.stdout


def test_bad_key_exits_with_message_naming_it(capsys):
    assert main(["train", "agent.gamma=7"]) == 2
    err = capsys.readouterr().err
    assert "agent.gamma" in err
    assert "Traceback" not in err


def test_unknown_group_option_lists_choices(capsys):
    assert main(["train", "llm=gpt5"]) == 2
    err = capsys.readouterr().err
    assert "llm" in err and "embedded" in err and "http" in err


def test_print_config_redacts_appended_secret(capsys):
    assert main(["train", "--print-config", "llm=http", "+llm.api_key=sk-should-not-appear"]) == 0
    out = capsys.readouterr().out
    assert "sk-should-not-appear" not in out
    assert "api_key_env: OPENAI_API_KEY" in out


def test_bench_unknown_name_is_a_clear_error(capsys):
    assert main(["bench", "does_not_exist"]) == 1
    assert "does_not_exist" in capsys.readouterr().err


def _make_demo_trainings() -> list[list[str]]:
    """The override lists of the ``llmguide train`` lines of ``make demo`` (Makefile variables expanded)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "Makefile").read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^(\w+) := (.*)$", text, re.M))

    def expand(arg: str) -> list[str]:
        whole = re.fullmatch(r"\$\((\w+)\)", arg)
        if whole:
            return [x for part in variables[whole[1]].split() for x in expand(part)]
        return [re.sub(r"\$\((\w+)\)", lambda m: variables[m[1]].strip(), arg)]

    lines = [line.split("train", 1)[1].split() for line in text.split("\ndemo:", 1)[1].split("\n\n")[0].splitlines()
             if "llmguide train" in line]
    return [[x for part in line for x in expand(part)] for line in lines]


def test_make_demo_configs_validate(capsys):
    from pathlib import Path

    runs = _make_demo_trainings()
    # ELLM with the LM's replayed answers, its prompt-only control, a random suggester, no reward
    assert len(runs) == 4, runs
    root = Path(__file__).resolve().parents[1]
    tables = [a.split("=", 1)[1] for run in runs for a in run if a.startswith("llm.table=")]
    assert len(tables) == 3 and all((root / t).is_file() for t in tables), tables   # every ELLM arm: a table
    assert [a for a in runs[1] if a.startswith("llm=")] == ["llm=prompt_only"]
    assert all("llm.table_fallback=nearest" in run for run in runs[:3])   # the same fallback: equal coverage
    for overrides in runs:
        assert main(["train", "--print-config", *overrides]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "name: craftax" in out and "name: ellm" in out and "name: none" in out and "vocabulary: actions" in out


def test_a_word_where_a_number_belongs_is_a_config_error(capsys):
    assert main(["train", "num_envs=four"]) == 2
    err = capsys.readouterr().err
    assert "num_envs" in err and "four" in err and "Traceback" not in err
