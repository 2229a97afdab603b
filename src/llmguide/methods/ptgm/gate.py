"""PTGM's BC quality gate: does the pretrained low level follow its goal?

PTGM's high level can only steer the low level through the goal it hands it.  When the data never tie the
action to the future (a near-random explorer: on Craftax the low level's validation accuracy was 0.211 with
the goal vs 0.201 without, issue 30), every code runs the same behaviour, the options are the data's average
play and PPO over them cannot beat flat PPO, whatever the high level learns.  That is visible before any
training, so ``llmguide pretrain`` measures it (:func:`bc_gate`) and stops there when it is below the
thresholds of ``method.lowlevel.gate`` (:func:`judge`); ``llmguide train`` refuses such a run
(:func:`check_pretrained`).  Two views of the same question:

- **Goal information the net uses**, on the low level's held-out validation split (the samples BC never
  trained on, :func:`~llmguide.methods.ptgm.models.val_split`): accuracy and NLL of the data's action with the
  goal vs with it dropped (zeros, ``has_goal`` 0: the unconditioned policy that goal dropout, ``p_uncond``,
  trains, the ``uncond`` term of classifier-free guidance).  ``acc_gain`` = acc(goal) − acc(no goal);
  ``nll_gain`` = NLL(no goal) − NLL(goal) in nats, an estimate of I(goal; action | state) as far as the net
  captured it (it also moves when the goal shifts the action distribution without changing its argmax).
- **Code ↔ action mutual information of the low level** (``mi_bits``, the thresholded one): I(C; A | S) in
  bits, how much the code the high level commands changes what the low level does, at up to ``mi_states``
  validation states S, with C drawn as often as it is the nearest KMeans code of the data's hindsight goals
  and the goal handed over as options do (the code's medoid or centroid, ``method.goal_source``), A ~ the low
  level's action distribution (no guidance): E_S[H(Σ_c w_c π(·|S,c)) − Σ_c w_c H(π(·|S,c))].  A low level that
  ignores its goal scores 0 whatever the data; it is the model-side twin of the code ↔ event MI of options
  measured in rollouts (``benchmarks/ptgm_analysis.py control``; 0.08 bits for the RND explorer's codes).
- For the record only, **the data's code ↔ action MI** (``data_mi_bits``): I(c; a) between the nearest code of
  each step's hindsight goal and the action taken there, over the whole dataset, plug-in minus the
  Miller–Madow bias ``(R_ca − R_c − R_a + 1) / (2 N ln 2)`` (R: non-empty cells), floored at 0.  It ignores
  the state, and the action that reaches a goal depends on where one stands, so it is tiny even for a perfect
  goal follower (0.014 bits on 300 BabyAI-bot episodes, k=32): no threshold on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from llmguide.core.config import cfg_get
from llmguide.core.errors import ConfigError
from llmguide.learners.networks import ActorCritic
from llmguide.methods.ptgm.models import lowlevel_inputs

THRESHOLDS = (("acc_gain", "min_acc_gain", "accuracy gain"), ("nll_gain", "min_nll_gain", "NLL gain (nats)"),
              ("mi_bits", "min_mi_bits", "low level's code-action MI (bits)"))


@torch.no_grad()
def goal_information(net: ActorCritic, images: np.ndarray, states: np.ndarray, goals: np.ndarray,
                     actions: np.ndarray, ids: np.ndarray, chunk: int = 4096) -> dict[str, Any]:
    """Accuracy and NLL (nats) of ``actions[ids]`` with the goal (``cond``) and with it dropped (``uncond``),
    and their differences; None everywhere when ``ids`` is empty."""
    out: dict[str, Any] = {"val_n": int(len(ids))}
    if not len(ids):
        return {**out, **{k: None for k in ("acc_cond", "acc_uncond", "acc_gain", "nll_cond", "nll_uncond",
                                            "nll_gain")}}
    net.eval()
    for name, dropped in (("cond", False), ("uncond", True)):
        nll = correct = 0.0
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            logits = net.action_logits(lowlevel_inputs(images, states, goals, part, np.full(len(part), dropped)))
            y = torch.as_tensor(actions[part])
            nll += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
        out[f"acc_{name}"], out[f"nll_{name}"] = correct / len(ids), nll / len(ids)
    out["acc_gain"] = out["acc_cond"] - out["acc_uncond"]
    out["nll_gain"] = out["nll_uncond"] - out["nll_cond"]
    return out


@torch.no_grad()
def policy_code_mi_bits(net: ActorCritic, images: np.ndarray, states: np.ndarray, code_goals: np.ndarray,
                        weights: np.ndarray, ids: np.ndarray, chunk: int = 4096) -> float:
    """I(C; A | S) in bits of the low level at states ``ids``: codes ``code_goals`` (k, E) drawn with
    ``weights`` (k,), A ~ softmax of the low level's logits (see the module docstring)."""
    k = len(code_goals)
    w = torch.as_tensor(np.asarray(weights, np.float64) / max(float(np.sum(weights)), 1e-12))
    per = max(1, chunk // k)
    total = 0.0
    for i in range(0, len(ids), per):
        part = ids[i:i + per]
        rows = np.arange(len(part) * k)
        obs = lowlevel_inputs(np.repeat(images[part], k, 0), np.repeat(states[part], k, 0),
                              np.tile(np.asarray(code_goals, np.float32), (len(part), 1)), rows,
                              np.zeros(len(rows), bool))
        logp = F.log_softmax(net.action_logits(obs), -1).double().reshape(len(part), k, -1)   # (B, k, A)
        cond_h = -(logp.exp() * logp).sum(-1)                                            # H(π(·|s,c)), (B, k)
        mix = (w[None, :, None] * logp.exp()).sum(1)                                       # (B, A)
        mix_h = -(mix * torch.log(mix.clamp_min(1e-30))).sum(-1)
        total += float((mix_h - (cond_h * w[None]).sum(1)).sum())
    return total / max(len(ids), 1) / np.log(2)


def code_action_mi_bits(codes: np.ndarray, actions: np.ndarray) -> dict[str, float]:
    """The data's I(code; action) in bits: ``data_mi_bits`` (Miller–Madow corrected, floored at 0) and the
    plug-in ``data_mi_bits_plugin``."""
    codes, actions = np.asarray(codes, np.int64), np.asarray(actions, np.int64)
    n = len(codes)
    if n == 0:
        return {"data_mi_bits": 0.0, "data_mi_bits_plugin": 0.0}
    joint = np.zeros((int(codes.max()) + 1, int(actions.max()) + 1))
    np.add.at(joint, (codes, actions), 1.0)
    p = joint / n
    pc, pa = p.sum(1, keepdims=True), p.sum(0, keepdims=True)
    nz = p > 0
    plugin = float((p[nz] * np.log2(p[nz] / (pc @ pa)[nz])).sum())
    bias = (nz.sum() - (pc > 0).sum() - (pa > 0).sum() + 1) / (2 * n * np.log(2))
    return {"data_mi_bits": max(0.0, plugin - float(bias)), "data_mi_bits_plugin": plugin}


def judge(result: dict[str, Any], gate: Any) -> str | None:
    """Why ``result`` fails the thresholds of ``gate`` (``method.lowlevel.gate``; a null threshold is off),
    or None when it passes."""
    why = []
    for key, threshold, name in THRESHOLDS:
        least = cfg_get(gate, threshold)
        if least is None:
            continue
        value = result.get(key)
        if value is None:
            why.append(f"{name} not measurable (no validation samples) with {threshold} {least:g}")
        elif value < float(least):
            why.append(f"{name} {value:.3f} < {threshold} {float(least):g}")
    return "; ".join(why) or None


def enforced(gate: Any) -> bool:
    """``method.lowlevel.gate.enforce`` (default true): pretrain stops and train refuses on a failed gate."""
    return bool(cfg_get(gate, "enforce", True))


def bc_gate(net: ActorCritic, images: np.ndarray, states: np.ndarray, goals: np.ndarray, actions: np.ndarray,
            codes: np.ndarray, code_goals: np.ndarray, val: np.ndarray, gate: Any, seed: int = 0) -> dict[str, Any]:
    """The gate's measurements (``goals``: the data's goal embeddings, ``codes``: their nearest codes,
    ``code_goals``: the (k, E) goals the options hand over, ``val``: the validation mask), its thresholds and
    verdict: ``passed``, and ``failed`` (why, or None)."""
    ids = np.flatnonzero(val)
    k = len(code_goals)
    most = int(cfg_get(gate, "mi_states", 1024))
    states_ids = np.sort(np.random.default_rng(seed).permutation(ids)[:most]) if len(ids) > most else ids
    weights = np.bincount(np.asarray(codes, np.int64), minlength=k)[:k].astype(np.float64)
    result = {**goal_information(net, images, states, goals, actions, ids),
              "mi_bits": policy_code_mi_bits(net, images, states, code_goals, weights, states_ids)
              if len(states_ids) else None, "mi_states": int(len(states_ids)),
              **code_action_mi_bits(codes, actions), "samples": int(len(actions)), "k": int(k)}
    failed = judge(result, gate)
    thresholds = {t: cfg_get(gate, t) for _, t, _ in THRESHOLDS}
    return {**result, "thresholds": thresholds, "enforce": enforced(gate), "passed": failed is None,
            "failed": failed}


def gate_line(result: dict[str, Any]) -> str:
    """One line for the log: the numbers and the verdict."""
    def f(v: Any, digits: int = 3) -> str:
        return "n/a" if v is None else f"{v:.{digits}f}"

    verdict = "passed" if result["passed"] else f"FAILED ({result['failed']})"
    return (f"BC gate: val acc {f(result['acc_cond'])} with goal vs {f(result['acc_uncond'])} without "
            f"(gain {f(result['acc_gain'])}); val NLL {f(result['nll_cond'])} vs {f(result['nll_uncond'])} nats "
            f"(gain {f(result['nll_gain'])}); low level's code-action MI {f(result['mi_bits'])} bits "
            f"({result['mi_states']} states, k={result['k']}); data's code-action MI {f(result['data_mi_bits'])} "
            f"bits; {result['samples']} samples, val {result['val_n']} -> {verdict}")


def check_pretrained(manifest: dict[str, Any], run: Path, gate: Any) -> None:
    """ConfigError naming ``method.pretrained`` when the pretrain run ``run`` failed the BC gate and ``gate``
    (the training run's ``method.lowlevel.gate``) enforces it.  A run pretrained before the gate existed has no
    ``bc_gate`` and passes."""
    result = manifest.get("bc_gate") or {}
    failed = result.get("failed") or manifest.get("failed")
    if failed and enforced(gate):
        raise ConfigError("method.pretrained", f"{run} failed PTGM's BC gate ({failed}): its low level barely "
                          f"follows goals, so options over them cannot help; pretrain on better data "
                          f"({better_data(str(manifest.get('env') or ''))}) or pass "
                          "method.lowlevel.gate.enforce=false")


def better_data(env: str) -> str:
    """How to collect data whose actions follow their goals on ``env``: BabyAI's collector is always the bot
    (it ignores ``method.collect.policy``), Crafter's and Craftax's can be the scripted expert."""
    if env == "babyai":
        return ("more bot episodes over more missions: method.collect.episodes, method.collect.tasks; "
                "or more BC epochs: method.lowlevel.epochs")
    return "the scripted expert: method.collect.policy=expert"
