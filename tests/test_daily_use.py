"""Daily use (issue 50): one meaning per number (training's last 10 % and the evaluation under their own names,
in the summary line, the Python API and the report), evaluation capped by default, a sweep checked whole before
its first run, and the ecosystem hooks (``callback=``, the config in TensorBoard, W&B group/tags/resume)."""

from __future__ import annotations

import io
import json
import sys
import types
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

import llmguide
from llmguide.cli import main
from llmguide.pipelines import load_config

TINY = dict(env="crafter", method="none", num_envs=2, total_steps=128, progress=False, log_every=32,
            agent={"num_steps": 16, "hidden": 32}, eval={"episodes": 2})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run through the API with a Callback object and a function callback; its stdout."""
    calls: list = []

    class Steps(llmguide.Callback):
        def on_training_start(self) -> None:
            calls.append("start")

        def on_rollout_end(self, metrics: dict) -> None:
            calls.append(int(self.agent.global_step))

    seen: list = []
    out = io.StringIO()
    with redirect_stdout(out):
        run = llmguide.train(TINY, env={"max_steps": 20}, run={"dir": str(tmp_path_factory.mktemp("daily")),
                                                                 "name": "r"},
                             callback=[Steps(), lambda agent, metrics: seen.append(agent.global_step)])
    return run, out.getvalue(), calls, seen


# --- one meaning per number ------------------------------------------------------------------------------------
def test_the_summary_and_the_api_name_the_train_return_and_the_eval_return_apart(trained):
    run, out, _, _ = trained
    rows = [r for r in run.metrics if "charts/episodic_return" in r]
    last = [r["charts/episodic_return"] for r in rows if r["step"] >= max(r["step"] for r in rows) * 0.9]
    assert run.train_return == pytest.approx(float(np.mean(last)))      # the report's last 10 % of training
    assert run.eval_return == run.eval["return_mean"]                     # the final (greedy) evaluation
    line = next(x for x in out.splitlines() if x.startswith("train: "))
    assert f"train return (last 10%) {run.train_return:.3g} over {len(last)} episodes" in line
    assert "eval return (greedy)" in line and "over 2 episodes of ≤ 20 steps" in line and "final" not in line
    with pytest.warns(DeprecationWarning, match="eval_return"):
        assert run.final_return == run.eval_return


def test_evaluation_is_capped_by_default_and_the_cap_never_lengthens_an_episode():
    from llmguide.envs import make_env
    from llmguide.pipelines.runner import _eval_episode_cap

    cfg = load_config([])
    assert cfg.eval.max_steps == 2000
    with _eval_episode_cap(cfg) as cap:
        assert cap == 2000 and cfg.env.max_steps == 2000      # Crafter's own 10,000 cut to 2,000
    assert cfg.env.max_steps is None
    babyai = load_config(["env=babyai", "env.task=GoToLocal"])   # the level's own limit: 64 steps
    with _eval_episode_cap(babyai) as cap:
        env = make_env(babyai.env, 0)
        env.reset(seed=0)
        assert cap == 2000 and env.unwrapped.level.max_steps == 64   # truncated at 2,000, never lengthened to it
        env.close()
    assert babyai.env.max_steps is None and "step_cap" not in babyai.env
    small = load_config(["env=babyai", "env.task=GoToLocal", "eval.max_steps=5"])
    with _eval_episode_cap(small):
        env = make_env(small.env, 0)
        env.reset(seed=0)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(2)
            steps, done = steps + 1, terminated or truncated
        assert steps <= 5
        env.close()


def test_the_reports_eval_table_keeps_four_columns_and_links_eval_json(trained):
    run, *_ = trained
    text = run.report.read_text()
    section = text[text.index("## Evaluation"):].split("\n## ")[0]
    assert "| method | runs | eval return | length |" in section and "[r](eval.json)" in section
    assert "episode_returns" not in section and "seconds" not in section and "return_std" not in section
    row = next(line for line in section.splitlines() if line.startswith("| none |"))
    assert all(len(cell.strip().split(".")[-1]) <= 2 for cell in row.split("|")[3:-1])   # rounded
    assert "train return (last 10%) IQM" in text and "final return" not in text


# --- a sweep is checked whole before its first run -------------------------------------------------------------
def _no_launch(monkeypatch):
    import llmguide.sweep as sweep

    def launch(*args, **kwargs):
        raise AssertionError("a run was launched")

    monkeypatch.setattr(sweep, "run_locally", launch)


def test_a_sweep_with_a_typo_in_one_value_fails_before_any_run(tmp_path, monkeypatch, capsys):
    _no_launch(monkeypatch)
    assert main(["train", "-m", "env.task=place_table,place_tabel", f"run.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "env.task" in err and "'place_tabel'" in err and "did you mean place_table?" in err
    assert not any(tmp_path.iterdir())


def test_a_sweep_runs_the_methods_own_checks_on_every_combination(tmp_path, monkeypatch, capsys):
    _no_launch(monkeypatch)   # agent=scripted plays without a reward module: method=none passes, rnd is refused
    assert main(["train", "-m", "method=none,rnd", "agent=scripted", f"run.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "method=rnd" in err and "no run was started" in err


def test_a_single_run_with_an_unknown_task_fails_before_its_run_directory(tmp_path, capsys):
    assert main(["train", "env=babyai", "env.task=GoToLocall", f"run.dir={tmp_path}", "run.name=x"]) == 2
    assert "did you mean GoToLocal?" in capsys.readouterr().err and not (tmp_path / "x").exists()
    load_config(["env=babyai", "env.task=GoToLocal-RedBall-S20"])     # BK's task names and stock ids still load
    load_config(["env=babyai", "env.task=BabyAI-UnlockPickup-v0"])


# --- ecosystem -------------------------------------------------------------------------------------------------
def test_callbacks_from_the_python_api_see_training_and_a_function_can_stop_it(trained, tmp_path):
    _, _, calls, seen = trained
    assert calls[0] == "start" and calls[1:] == sorted(calls[1:]) and calls[-1] >= 128 and len(seen) == len(calls) - 1
    run = llmguide.train(TINY, total_steps=100_000, run={"dir": str(tmp_path), "name": "stopped"},
                         callback=lambda agent, metrics: agent.global_step < 64)
    assert run.metrics[-1]["step"] < 1000 and run.eval["episodes"] == 2 and (run.path / "checkpoints").exists()
    with pytest.raises(TypeError, match="callback"):
        llmguide.train(TINY, callback=3)


def test_the_resolved_config_is_in_tensorboard_as_text_and_hyperparameters(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run, *_ = trained
    events = EventAccumulator(str(run.path / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    assert "config/text_summary" in events.Tags()["tensors"]
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "|agent.lr|" in text and "|env.max_steps|20|" in text
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["total_steps"].number_value == 128 and hparams["method.name"].string_value == "none"


class _FakeWandb(types.ModuleType):
    def __init__(self):
        super().__init__("wandb")
        self.inits: list[dict] = []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)


def test_wandb_gets_group_and_tags_and_a_resumed_run_keeps_its_id(tmp_path, monkeypatch):
    from llmguide.pipelines.runner import open_run

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    base = ["logger.wandb=true", "logger.group=study-1", "logger.tags=[ellm,crafter]", f"run.dir={tmp_path}",
            "run.name=w"]
    for extra in ([], ["run.resume=true"], ["run.overwrite=true"]):
        with open_run(load_config([*base, *extra])) as run:
            run.log(1, {"x": 1.0})
    first, resumed, restarted = fake.inits
    assert first["group"] == "study-1" and first["tags"] == ["ellm", "crafter"] and first["resume"] == "allow"
    assert resumed["id"] == first["id"]                    # run.resume=true continues the same W&B run
    assert restarted["id"] != first["id"]                  # a run started over is a new W&B run
    assert load_config([]).logger.group is None and list(load_config([]).logger.tags) == []


# --- smaller ---------------------------------------------------------------------------------------------------
def test_ptgm_gate_advice_fits_the_env():
    from llmguide.core.errors import ConfigError
    from llmguide.methods.ptgm.gate import check_pretrained

    failed = {"bc_gate": {"failed": "accuracy gain 0.010 < min_acc_gain 0.03"}}
    with pytest.raises(ConfigError) as err:
        check_pretrained({**failed, "env": "babyai"}, Path("runs/p"), {"enforce": True})
    assert "collect.policy" not in str(err.value) and "method.collect.episodes" in str(err.value)
    with pytest.raises(ConfigError, match="method.collect.policy=expert"):
        check_pretrained({**failed, "env": "craftax"}, Path("runs/p"), {"enforce": True})


def test_an_offline_verb_refuses_a_run_name_that_holds_a_run_as_train_does(tmp_path, capsys):
    base = ["collect", "env=babyai", "method=ptgm", "method.collect.episodes=2", f"run.dir={tmp_path}",
            "run.name=data", "progress=false"]
    assert main(base) == 0
    assert main(base) == 1 and "already holds a run" in capsys.readouterr().err
    assert main([*base, "run.overwrite=true"]) == 0        # starts over: the old episodes are gone
    assert json.loads((tmp_path / "data" / "collect_summary.json").read_text())["episodes"] == 2
