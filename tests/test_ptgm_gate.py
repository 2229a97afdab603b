"""PTGM's BC quality gate (methods/ptgm/gate.py): the measurements on synthetic data with a known answer, and
the pipeline on tiny BabyAI bot data: pretrain records the gate in its manifest, stops (exit 2, ``failed``) when
it is below the thresholds, and ``train`` refuses such a run unless ``method.lowlevel.gate.enforce=false``."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from llmguide.core.errors import ConfigError
from llmguide.methods.ptgm.gate import bc_gate, check_pretrained, code_action_mi_bits, gate_line, judge
from llmguide.methods.ptgm.models import make_lowlevel, train_lowlevel, val_split

torch.set_num_threads(1)
GATE = {"enforce": True, "min_acc_gain": 0.03, "min_nll_gain": None, "min_mi_bits": 0.1}


def test_data_code_action_mi_is_zero_for_independent_and_known_for_noisy_actions():
    rng = np.random.default_rng(0)
    n, k = 20000, 4
    codes = rng.integers(0, k, n)
    assert code_action_mi_bits(codes, rng.integers(0, k, n))["data_mi_bits"] < 0.005
    assert abs(code_action_mi_bits(codes, codes)["data_mi_bits"] - 2.0) < 0.01   # a = c: H(a) = log2 4
    noisy = np.where(rng.random(n) < 0.5, codes, rng.integers(0, k, n))
    truth = 2.0 + 0.625 * np.log2(0.625) + 3 * 0.125 * np.log2(0.125)      # H(a) − H(a|c) = 0.451 bits
    out = code_action_mi_bits(codes, noisy)
    assert abs(out["data_mi_bits"] - truth) < 0.02 and out["data_mi_bits"] < out["data_mi_bits_plugin"]


class _Table(torch.nn.Module):
    """A stand-in low level whose logits are a fixed (state, code) table: the MI has a closed form."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.as_tensor(table, dtype=torch.float32)   # (S, k, A) logits

    def action_logits(self, obs, state=None, done=None):
        s = obs["image"].reshape(len(obs["image"]), -1)[:, 0].long()          # the state index is the image
        c = obs["vector"][:, 1:-1].argmax(-1)                                  # one-hot goal after a 1-d state
        return self.table[s, c]


def test_low_level_code_mi_is_the_closed_form_and_weights_the_codes():
    big = 30.0   # state 0: the action is the code (I = H(C)); state 1: always action 0 (I = 0)
    table = np.stack([np.eye(2) * big, np.stack([[big, 0.0], [big, 0.0]])])
    net = _Table(table)
    images, states, goals = np.array([0, 1], np.uint8).reshape(2, 1, 1, 1), np.zeros((2, 1), np.float32), np.eye(2)
    from llmguide.methods.ptgm.gate import policy_code_mi_bits

    assert abs(policy_code_mi_bits(net, images, states, goals, np.ones(2), np.array([0])) - 1.0) < 1e-6
    assert abs(policy_code_mi_bits(net, images, states, goals, np.ones(2), np.array([1]))) < 1e-6
    assert abs(policy_code_mi_bits(net, images, states, goals, np.ones(2), np.array([0, 1])) - 0.5) < 1e-6
    h = -(0.9 * np.log2(0.9) + 0.1 * np.log2(0.1))   # codes drawn 9:1: I = H(C)
    assert abs(policy_code_mi_bits(net, images, states, goals, np.array([9, 1]), np.array([0]), chunk=2) - h) < 1e-6


def _synthetic(follow: float, n: int = 2000, k: int = 4, seed: int = 0):
    """Goals one-hot over k codes; the action is the goal's index with probability ``follow``, else uniform."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, k, n)
    goals = np.eye(k, dtype=np.float32)[codes]
    actions = np.where(rng.random(n) < follow, codes, rng.integers(0, k, n))
    images, states = np.zeros((n, 1, 1, 1), np.uint8), np.zeros((n, 2), np.float32)
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (1, 1, 1), np.float32),
                             "vector": gym.spaces.Box(-np.inf, np.inf, (2 + k + 1,), np.float32)})
    torch.manual_seed(seed)   # the network's initialisation: the same test every time
    net = make_lowlevel(space, k, 32, "flat")
    train_lowlevel(net, images, states, goals, actions, p_uncond=0.2, epochs=3, batch_size=128, lr=3e-3, seed=0,
                   val_fraction=0.2)
    return bc_gate(net, images, states, goals, actions, codes, np.eye(k, dtype=np.float32), val_split(n, 0, 0.2), GATE)


def test_gate_passes_when_the_action_follows_the_goal_and_fails_when_it_does_not():
    good = _synthetic(follow=0.8)
    assert good["passed"] and good["failed"] is None and good["val_n"] == val_split(2000, 0, 0.2).sum()
    assert good["acc_gain"] > 0.4 and good["nll_gain"] > 0.5 and good["mi_bits"] > 0.6 and good["data_mi_bits"] > 0.6
    assert good["acc_cond"] > 0.75 and abs(good["nll_uncond"] - np.log(4)) < 0.1   # no goal: the action is uniform
    bad = _synthetic(follow=0.0)
    assert not bad["passed"] and abs(bad["acc_gain"]) < 0.05 and bad["mi_bits"] < 0.05
    assert "min_acc_gain" in bad["failed"] and "min_mi_bits" in bad["failed"]
    assert "FAILED" in gate_line(bad) and "passed" in gate_line(good) and "\n" not in gate_line(bad)


def test_judge_thresholds_null_is_off_and_the_issue_30_explorer_is_refused():
    explorer = {"acc_gain": 0.010, "nll_gain": 0.034, "mi_bits": 0.08}     # the RND explorer's Craftax data
    assert "accuracy gain 0.010 < min_acc_gain 0.03" in judge(explorer, GATE)
    from llmguide.pipelines import load_config

    defaults = load_config(["env=babyai", "method=ptgm"]).method.lowlevel.gate   # the shipped defaults refuse it too
    assert "min_acc_gain" in judge(explorer, defaults) and defaults.enforce
    bot = {"acc_gain": 0.023, "nll_gain": 0.05, "mi_bits": 0.02}   # 2400 BabyAI-bot episodes (KeyCorridor study)
    assert judge(bot, defaults) is None and "min_mi_bits" in judge({**bot, "mi_bits": 0.0}, defaults)
    assert judge(explorer, {**GATE, "min_acc_gain": None, "min_mi_bits": None}) is None
    assert "not measurable" in judge({"acc_gain": None, "mi_bits": 1.0}, GATE)   # no validation samples


def test_check_pretrained_refuses_a_failed_gate_unless_not_enforced(tmp_path):
    failed = {"bc_gate": {"failed": "accuracy gain 0.010 < min_acc_gain 0.03"}}
    with pytest.raises(ConfigError, match="method.pretrained") as err:
        check_pretrained(failed, tmp_path, GATE)
    assert str(tmp_path) in str(err.value) and "enforce=false" in str(err.value)
    check_pretrained(failed, tmp_path, {**GATE, "enforce": False})
    check_pretrained({"bc_gate": {"failed": None}}, tmp_path, GATE)
    check_pretrained({}, tmp_path, GATE)   # pretrained before the gate existed


# --- the pipeline on tiny BabyAI bot data --------------------------------------------------------------------
BASE = ["env=babyai", "progress=false", "agent.image_encoder=flat", "num_envs=2", "method=ptgm",
        "method.codebook.k=4", "method.lowlevel.epochs=1", "method.prior.epochs=1", "method.lowlevel.hidden=32",
        "method.prior.hidden=32"]


@pytest.fixture(scope="module")
def codes(tmp_path_factory):
    from llmguide.cli import main

    root = tmp_path_factory.mktemp("gate")
    base = [*BASE, f"run.dir={root}"]
    assert main(["collect", *base, "method.collect.episodes=8", "run.name=data"]) == 0
    assert main(["codebook", *base, f"method.data={root / 'data'}", "run.name=codes"]) == 0
    return root, [*base, f"method.data={root / 'data'}", f"method.codebook.run={root / 'codes'}"]


def _train(root, name: str, *extra: str) -> list[str]:
    return ["train", *BASE, f"run.dir={root}", "env.task=BabyAI-UnlockPickup-v0", "agent.num_steps=4",
            "total_steps=16", "eval.episodes=0", f"method.pretrained={root / name}", "run.name=t", *extra]


def _pretrain(root, base, name: str, *gate: str) -> tuple[int, dict]:
    """``llmguide pretrain`` into ``root/name`` with ``gate`` overrides: its exit code and manifest."""
    from llmguide.cli import main

    code = main(["pretrain", *base, *gate, f"run.name={name}"])
    return code, json.loads((root / name / "ptgm" / "manifest.json").read_text())


def test_pretrain_records_a_passing_gate_and_train_accepts_it(codes, capsys):
    from llmguide.methods.ptgm.recipe import PTGMRecipe
    from llmguide.pipelines import load_config

    root, base = codes
    code, manifest = _pretrain(root, base, "ok", "method.lowlevel.gate.min_acc_gain=-1",
                               "method.lowlevel.gate.min_mi_bits=0")
    assert code == 0 and "BC gate: val acc" in capsys.readouterr().out
    gate = manifest["bc_gate"]
    assert gate["passed"] and manifest["failed"] is None and gate["thresholds"]["min_acc_gain"] == -1
    assert {"acc_cond", "acc_uncond", "acc_gain", "nll_cond", "nll_uncond", "mi_bits", "data_mi_bits"} <= set(gate)
    assert gate["samples"] == manifest["samples"] and gate["k"] == 4
    PTGMRecipe(load_config(_train(root, "ok")[1:])).check()   # accepted


def test_pretrain_stops_below_the_thresholds_and_train_refuses_the_run(codes, capsys):
    from llmguide.cli import main
    from llmguide.methods.ptgm.recipe import PTGMRecipe
    from llmguide.pipelines import load_config

    root, base = codes
    code, manifest = _pretrain(root, base, "bad", "method.lowlevel.gate.min_acc_gain=2")
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "method.lowlevel.gate" in err[0] and "min_acc_gain 2" in err[0]
    assert "min_acc_gain" in manifest["failed"] and not manifest["bc_gate"]["passed"]
    assert (root / "bad" / "ptgm" / "prior_kmeans.pt").exists()   # every file kept

    assert main(_train(root, "bad")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'method.pretrained'" in err[0] and "BC gate" in err[0]
    assert not (root / "t").exists()   # refused before any run directory or compute
    PTGMRecipe(load_config([*_train(root, "bad")[1:], "method.lowlevel.gate.enforce=false"])).check()
    for mode in ("ptgm_bc_finetune", "ptgm_no_kl"):   # every PTGM arm reads the same pretrained run
        with pytest.raises(ConfigError, match="method.pretrained"):
            overrides = [o for o in _train(root, "bad")[1:] if o != "method=ptgm"]
            PTGMRecipe(load_config([*overrides, f"method={mode}", "agent.hidden=32"])).check()


def test_pretrain_with_the_gate_not_enforced_records_the_failure_and_succeeds(codes, capsys):
    from llmguide.cli import main

    root, base = codes
    code, manifest = _pretrain(root, base, "loose", "method.lowlevel.gate.min_acc_gain=2",
                               "method.lowlevel.gate.enforce=false")
    assert code == 0 and "FAILED" in capsys.readouterr().out
    assert manifest["failed"] is None and "min_acc_gain" in manifest["bc_gate"]["failed"]
    assert main(_train(root, "loose")) == 2   # train's own gate still enforces by default
