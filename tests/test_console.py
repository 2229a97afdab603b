"""What the console says (issue 32 points 6 and 10): every verb ends with a one-line summary, the first LM load
says what it waits for, and third-party noise is silenced (llama.cpp's SWA-cache line, pygame's
pkg_resources notice, transformers' FutureWarnings)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmguide.cli import main


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_pygames_pkg_resources_notice_is_silenced():
    pytest.importorskip("pygame")
    assert "pkg_resources" in _python("import pygame").stderr       # the noise, without llmguide
    out = _python("import llmguide, pygame")
    assert out.returncode == 0 and "pkg_resources" not in out.stderr, out.stderr


def test_transformers_future_warnings_are_silenced():
    warn = ("import warnings; warnings.warn_explicit('`past_key_values` is deprecated', FutureWarning, 'generic.py', "
            "1, module='{}')")
    out = _python("import llmguide; " + warn.format("transformers.utils.generic"))
    assert out.stderr == ""
    assert "FutureWarning" in _python("import llmguide; " + warn.format("mypackage")).stderr   # only transformers'


def test_the_embedded_lm_says_it_loads_and_llama_cpp_swa_line_is_gone():
    pytest.importorskip("llama_cpp")
    out = _python("from llmguide.llm.backends.embedded import EmbeddedLM\n"
                  "for _ in range(2):\n"
                  "    lm = EmbeddedLM(); print(lm.score(['Caption: a tree. Goal:'], [[' chop tree', ' eat cow']])); "
                  "lm.close()")
    assert out.returncode == 0, out.stderr
    assert "SWA" not in out.stderr, out.stderr
    assert out.stderr.count("LM: loading gemma-3-270m") == 1   # the first load in the process only


def test_bk_collect_and_label_end_with_one_summary_line(tmp_path, capsys):
    babyai = ["env=babyai", "env.max_steps=64", "num_envs=2", "agent.num_steps=64", "agent.hidden=32",
              "progress=false", f"run.dir={tmp_path}", "method=bk_pref", "log_every=64"]
    assert main(["collect", *babyai, "env.task=Pretraining-S20", "total_steps=768", "run.name=data"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out and out[-1].startswith("collected ") and str(tmp_path / "data") in out[-1]
    assert main(["label", *babyai, "env.task=GoToLocal-RedBall-S20", "llm=oracle", f"method.data={tmp_path / 'data'}",
                 "method.pref.num_pairs=60", "method.pref.min_usable=10", "method.pref.epochs=2",
                 "run.name=labels"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out and out[-1].startswith("bk_pref: labels in ") and str(tmp_path / "labels") in out[-1]


def test_the_first_jax_compile_is_announced(tmp_path, monkeypatch, capsys):
    from llmguide.pipelines import runner

    def stop(cfg):
        raise RuntimeError("stop before compiling")

    monkeypatch.setattr(runner, "make_run_envs", stop)
    with pytest.raises(RuntimeError, match="stop before"):
        main(["train", "env=craftax", "progress=false", f"run.dir={tmp_path}", "run.name=x"])
    assert "env=craftax: compiling Craftax-Classic's jitted step" in capsys.readouterr().err


def test_a_run_whose_lm_answered_little_says_so_in_its_summary_line():
    from llmguide.pipelines.summary import lm_summary

    assert lm_summary({}) == "" and lm_summary({"lm/requests": 0.0}) == ""   # no LM asked: nothing to say
    dead = lm_summary({"lm/requests": 294.0, "lm/deduplicated": 0.0, "lm/completed": 0.0, "lm/fresh_fraction": 0.0})
    assert "LM answered 0 of 294 requests (0%)" in dead and "WARNING" in dead
    fine = lm_summary({"lm/requests": 12.0, "lm/deduplicated": 2.0, "lm/completed": 10.0, "lm/table_coverage": 0.93})
    assert "10 of 10" in fine and "covered 93% of the steps" in fine and "WARNING" not in fine


def test_the_summary_prints_float_noise_as_zero():
    """A Crafter summary printed ``± 9.93e-17`` for episodes with equal returns."""
    from llmguide.pipelines.summary import eval_summary

    text = eval_summary({"episodes": 5, "return_mean": 1.0, "return_std": 9.93e-17, "greedy": True})
    assert text == "eval return (greedy) 1 ± 0 over 5 episodes"
