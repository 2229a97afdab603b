"""The kernel's Bradley-Terry fit (:mod:`llmguide.rewards.preference`) and its callers.

BK-Pref, Motif and ONI-Ranking each had their own fitting loop before they shared the kernel's.  The
``old_*`` functions below are those loops as they were (copied, trimmed to what they computed); each
caller must still give the same fitted weights and metrics, bit for bit, from the same seed.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from torch import nn

from llmguide.core.rundir import safe_torch_load
from llmguide.data import Episode
from llmguide.methods import bk
from llmguide.methods.bk.common import flat_features
from llmguide.methods.oni.charcnn import MessageRewardNet, encode_messages
from llmguide.methods.oni.motif import PairsDB, sample_pairs, train_reward_model
from llmguide.methods.oni.ranking import ONIRanking
from llmguide.methods.oni.trainer import BackgroundTrainer
from llmguide.rewards.normalization import RunningMeanStd
from llmguide.rewards.preference import bradley_terry_loss, fit_bradley_terry, preference_accuracy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GOOD = ["You kill the newt!", "You see here 5 gold pieces.", "There is a staircase down here.", "You feel better."]
BAD = ["It's a wall.", "It's solid stone.", "Never mind.", "You hear a door open."]


def _equal(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and list(x) == list(y) and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple):
        return len(x) == len(y) and all(_equal(u, v) for u, v in zip(x, y, strict=True))
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    return type(x) is type(y) and x == y


# --- the kernel ---------------------------------------------------------------------------------
def test_both_loss_forms_are_the_bradley_terry_likelihood():
    g = torch.Generator().manual_seed(0)
    r1, r2 = torch.randn(50, generator=g), torch.randn(50, generator=g)
    p = torch.tensor([0.0, 0.5, 1.0] * 16 + [1.0, 0.0])
    expected = -(p * nn.functional.logsigmoid(r1 - r2) + (1 - p) * nn.functional.logsigmoid(r2 - r1)).mean()
    for form in ("sigmoid", "softmax"):
        assert float(bradley_terry_loss(r1, r2, p, form)) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="form"):
        bradley_terry_loss(r1, r2, p, "hinge")  # type: ignore[arg-type]


def test_accuracy_counts_decided_pairs_only():
    r1, r2 = torch.tensor([2.0, 0.0, 1.0, 1.0]), torch.tensor([1.0, 3.0, 1.0, 0.0])
    assert float(preference_accuracy(r1, r2, torch.tensor([1.0, 1.0, 0.0, 0.5]))) == pytest.approx(2 / 3)
    assert math.isnan(float(preference_accuracy(r1, r2, torch.full((4,), 0.5))))


def test_fit_learns_a_ranking_and_keeps_the_best_epoch():
    torch.manual_seed(0)
    items = torch.eye(6)
    net = nn.Linear(6, 1)
    pairs = [(i, j) for i in range(6) for j in range(6) if i != j]
    targets = torch.tensor([1.0 if i > j else 0.0 for i, j in pairs])   # a higher index is preferred

    def score(idx):
        return (net(items[[pairs[k][0] for k in idx]]).squeeze(-1), net(items[[pairs[k][1] for k in idx]]).squeeze(-1))

    rng = random.Random(0)
    train = list(range(len(pairs)))
    history = fit_bradley_terry(net, score, targets, train, train, optimizer=torch.optim.Adam(net.parameters(), lr=0.1),
                                epochs=30, batch_size=8, shuffle=rng.shuffle, clip_norm=10.0, keep_best=True)
    assert len(history) == 30 and history[-1]["holdout_accuracy"] == 1.0 and "holdout_loss" in history[0]
    assert torch.equal(torch.argsort(net(items).squeeze(-1)), torch.arange(6))
    with pytest.raises(ValueError, match="held-out"):
        fit_bradley_terry(net, score, targets, train, (), optimizer=torch.optim.Adam(net.parameters()), epochs=1,
                          batch_size=8, shuffle=rng.shuffle, clip_norm=1.0, keep_best=True)


# --- BK-Pref ------------------------------------------------------------------------------------
def _episodes(seed: int) -> list[Episode]:
    r = np.random.default_rng(seed)
    out = []
    for _ in range(4):
        T = int(r.integers(4, 9))
        obs = {"image": r.integers(0, 5, size=(T + 1, 3, 3)).astype(np.uint8),
               "pos": r.normal(size=(T + 1, 2)).astype(np.float32)}
        out.append(Episode(obs=obs, actions=r.integers(0, 3, size=T), rewards=np.zeros(T, np.float32),
                           captions=["c"] * (T + 1), events=[[] for _ in range(T)]))
    return out


def _labels(episodes: list[Episode], n: int, seed: int) -> list[dict]:
    r = np.random.default_rng(seed + 100)
    out = []
    for _ in range(n):
        a, b = bk.sample_segment(episodes, 3, r), bk.sample_segment(episodes, 3, r)
        out.append({"a": a.as_list(), "b": b.as_list(), "label": float(r.choice([0.0, 1.0, 0.5, -1.0, 1.0]))})
    out.append({"a": out[0]["a"], "b": out[0]["a"], "label": 1.0})   # one segment against itself: equal scores
    return out


def old_bk_fit(episodes, labels, epochs, lr=3e-4, batch_size=32, hidden=128, holdout=0.1, include_ties=True, seed=0):
    """BK-Pref's fit before the kernel's (``fit_preference_model`` without the file)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    usable = [r for r in labels if r["label"] >= 0 and (include_ties or r["label"] != 0.5)]
    in_dim = flat_features({k: v[:1] for k, v in episodes[0].obs.items()}).shape[-1]
    net = bk.PreferenceNet(in_dim, hidden)
    H = max(max(r["a"][2], r["b"][2]) for r in usable)

    def padded(key):
        feats, mask = torch.zeros(len(usable), H, in_dim), torch.zeros(len(usable), H)
        for j, r in enumerate(usable):
            ep, start, length = episodes[r[key][0]], r[key][1], r[key][2]
            x = flat_features({k: v[start + 1: start + length + 1] for k, v in ep.obs.items()})
            feats[j, : len(x)] = torch.from_numpy(x)
            mask[j, : len(x)] = 1.0
        return feats, mask

    (xa, ma), (xb, mb) = padded("a"), padded("b")
    target = torch.tensor([r["label"] for r in usable], dtype=torch.float32)
    order = rng.permutation(len(usable))
    n_hold = int(round(holdout * len(usable))) if len(usable) >= 10 else 0
    hold, train = order[:n_hold], order[n_hold:]
    opt = torch.optim.AdamW(net.parameters(), lr=lr)

    def scores(idx):
        return (net(xa[idx]) * ma[idx]).sum(-1), (net(xb[idx]) * mb[idx]).sum(-1)

    def accuracy(idx):
        strict = np.asarray([i for i in idx if float(target[i]) != 0.5], dtype=np.int64)
        if len(strict) == 0:
            return float("nan")
        with torch.no_grad():
            sa, sb = scores(strict)
        return float(((sb > sa).float() == target[strict]).float().mean())

    best, best_state, history = -1.0, None, []
    for epoch in range(epochs):
        rng.shuffle(train)
        for start in range(0, len(train), batch_size):
            idx = train[start:start + batch_size]
            sa, sb = scores(idx)
            loss = nn.functional.binary_cross_entropy_with_logits(sb - sa, target[idx])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        acc = accuracy(hold if len(hold) else train)
        history.append({"epoch": epoch, "loss": float(loss.detach()), "accuracy": acc})
        if best_state is None or (np.isfinite(acc) and acc > best):
            best, best_state = (acc if np.isfinite(acc) else best), {k: v.clone() for k, v in net.state_dict().items()}
    net.load_state_dict(best_state)
    with torch.no_grad():
        all_phi = torch.cat([net(torch.from_numpy(flat_features(ep.obs))) for ep in episodes])
    return {"state": net.state_dict(), "mean": float(all_phi.mean()), "train_accuracy": accuracy(train),
            "holdout_accuracy": accuracy(hold) if len(hold) else None, "history": history}


@pytest.mark.parametrize(("seed", "pairs", "ties", "epochs"), [(0, 30, True, 6), (1, 8, True, 4), (2, 40, False, 5)])
def test_bk_pref_fit_is_unchanged(tmp_path, seed, pairs, ties, epochs):
    episodes = _episodes(seed)
    labels = _labels(episodes, pairs, seed)
    bk.fit_preference_model(episodes, labels, tmp_path / "m.pt", epochs=epochs, batch_size=7, include_ties=ties,
                            seed=seed)
    new = safe_torch_load(tmp_path / "m.pt")
    old = old_bk_fit(episodes, labels, epochs, batch_size=7, include_ties=ties, seed=seed)
    assert _equal(new["state"], old["state"]) and new["mean"] == old["mean"]
    for key in ("train_accuracy", "holdout_accuracy", "history"):
        assert _equal(new["info"][key], old[key]), key


# --- Motif and ONI-Ranking ----------------------------------------------------------------------
def old_softmax_bt_loss(net, first, second, target_first):
    """The char-CNN's Bradley-Terry loss before the kernel's (Motif and ONI-Ranking)."""
    logits = torch.stack([net(encode_messages(first)), net(encode_messages(second))], dim=1)
    target = torch.stack([target_first, 1.0 - target_first], dim=1)
    loss = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    decided = target_first != 0.5
    correct = (logits[:, 0] > logits[:, 1]) == (target_first > 0.5)
    return loss, correct[decided].float().mean() if decided.any() else torch.tensor(float("nan"))


def old_motif_fit(data, epochs, lr, batch_size, seed):
    """Motif's ``train_reward_model`` loop before the kernel's; returns (weights, normaliser, metrics)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    rng.shuffle(data)
    n_val = max(1, len(data) // 5) if len(data) >= 5 else 0
    val, trn = data[:n_val], data[n_val:]
    net = MessageRewardNet()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    metrics = {}
    for epoch in range(epochs):
        rng.shuffle(trn)
        net.train()
        for start in range(0, len(trn), batch_size):
            chunk = trn[start:start + batch_size]
            loss, acc = old_softmax_bt_loss(net, [a for a, _, _ in chunk], [b for _, b, _ in chunk],
                                            torch.tensor([y for _, _, y in chunk], dtype=torch.float32))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
            opt.step()
        metrics.update({"epoch": float(epoch), "train_loss": float(loss.item()), "train_acc": float(acc)})
        if val:
            net.eval()
            with torch.no_grad():
                vloss, vacc = old_softmax_bt_loss(net, [a for a, _, _ in val], [b for _, b, _ in val],
                                                  torch.tensor([y for _, _, y in val], dtype=torch.float32))
            metrics.update({"val_loss": float(vloss), "val_acc": float(vacc)})
    rms = RunningMeanStd()
    rms.update(net.rewards([m for a, b, _ in trn for m in (a, b)]))
    return net.state_dict(), rms.state_dict(), metrics


def _preference(a: str, b: str) -> float:
    return 0.5 if (a in GOOD) == (b in GOOD) else (1.0 if a in GOOD else 0.0)


@pytest.mark.parametrize(("seed", "pairs"), [(0, 100), (3, 4), (5, 20)])
def test_motif_fit_is_unchanged(tmp_path, seed, pairs):
    db = PairsDB(tmp_path / "pairs.sqlite")
    db.add_pairs(sample_pairs(Counter(GOOD + BAD), pairs, seed=seed))
    db.write_labels([(i, _preference(a, b)) for i, a, b in db.todo(100)])
    ckpt, metrics = train_reward_model(db, epochs=3, lr=1e-3, batch_size=4, seed=seed)
    state, normalizer, old_metrics = old_motif_fit(db.labelled(), epochs=3, lr=1e-3, batch_size=4, seed=seed)
    db.close()
    assert _equal(ckpt["net"], state) and _equal(ckpt["normalizer"], normalizer)
    assert _equal({k: v for k, v in metrics.items() if k not in ("pairs", "threshold")}, old_metrics)


def test_oni_ranking_trainer_steps_are_unchanged():
    data = [(a, b, _preference(a, b)) for a in GOOD + BAD for b in GOOD + BAD if a < b]
    module = ONIRanking(None, 1, lr=1e-3, batch_size=5, steps_per_round=4, background=False, seed=0)
    torch.manual_seed(0)
    old = BackgroundTrainer(MessageRewardNet(), lambda net, batch: old_softmax_bt_loss(
        net, [a for a, _, _ in batch], [b for _, b, _ in batch], torch.tensor([p for _, _, p in batch], dtype=torch.float32)),
        lr=1e-3, batch_size=5, steps_per_round=4, background=False, seed=0)
    for trainer in (module.trainer, old):
        trainer.add(data)
        trainer.train_round()
    assert _equal(module.trainer.model.state_dict(), old.model.state_dict())
    assert (module.trainer.last_loss, module.trainer.last_acc) == (old.last_loss, float(old.last_acc))
