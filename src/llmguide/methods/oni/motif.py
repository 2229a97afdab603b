"""Motif, offline (Klissarov et al. 2023): message pairs → LM preferences → Bradley-Terry reward → RL.

- :class:`PairsDB`: one SQLite file holding the collected messages (with counts) and the pairs with
  their labels.  Annotation commits one batch per transaction, so a stopped or killed labelling run
  resumes where it was: labelled pairs are never asked again, none is lost (a batch that was not
  committed is asked again, and its answers come from the LM cache).
- :func:`annotate_pairs`, :func:`train_reward_model`: the label and reward-training steps.
- :class:`MotifReward`: ``z · 1[z > q] / n_episode(message)^β`` with ``z = (r − μ)/σ`` from the
  training pairs and ``q`` the normalised reward at ``threshold_quantile`` over unique training messages.
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmguide.methods.oni.annotator import PairAnnotator
from llmguide.methods.oni.charcnn import MessageRewardNet, pair_rewards
from llmguide.methods.oni.reward import EpisodicCounter, batch_messages
from llmguide.rewards.base import RewardModule, TransitionBatch
from llmguide.rewards.normalization import RunningMeanStd
from llmguide.rewards.preference import fit_bradley_terry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (msg TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pairs (
    id INTEGER PRIMARY KEY, a TEXT NOT NULL, b TEXT NOT NULL,
    label REAL, status TEXT NOT NULL DEFAULT 'todo', annotations INTEGER NOT NULL DEFAULT 0,
    UNIQUE (a, b)
);
"""


class PairsDB:
    """Messages and labelled pairs of one Motif dataset (SQLite, WAL)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)

    def add_messages(self, counts: Counter[str]) -> None:
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany("INSERT INTO messages (msg, count) VALUES (?, ?) "
                                  "ON CONFLICT(msg) DO UPDATE SET count = count + excluded.count", counts.items())

    def messages(self) -> Counter[str]:
        return Counter(dict(self.conn.execute("SELECT msg, count FROM messages").fetchall()))

    def add_pairs(self, pairs: Iterable[tuple[str, str]]) -> int:
        """Insert unordered pairs (stored sorted); identical or already present pairs are skipped."""
        before = self.count()
        rows = [PairAnnotator.make_pair(a, b) for a, b in pairs if a != b]
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany("INSERT OR IGNORE INTO pairs (a, b) VALUES (?, ?)", rows)
        return self.count() - before

    def count(self, status: str | None = None) -> int:
        if status is None:
            return int(self.conn.execute("SELECT COUNT(*) FROM pairs").fetchone()[0])
        return int(self.conn.execute("SELECT COUNT(*) FROM pairs WHERE status = ?", (status,)).fetchone()[0])

    def todo(self, limit: int) -> list[tuple[int, str, str]]:
        """Up to ``limit`` pairs still to label, in a fixed scrambled order of their ids (a multiplicative
        permutation modulo 2**32): the pairs are stored sorted by message, so a labelling stopped early
        (``method.max_batches``) holds an even sample of them, not those of the first few messages; copies of one
        dataset (:meth:`copy_unlabelled`) keep the ids, so every labeller stopped after as many batches labels the
        same pairs."""
        return self.conn.execute("SELECT id, a, b FROM pairs WHERE status = 'todo' "
                                 "ORDER BY (id * 2654435761) % 4294967296, id LIMIT ?", (limit,)).fetchall()

    def write_labels(self, labels: list[tuple[int, float | None]]) -> None:
        """Store one batch of answers in one transaction (None = unparseable, kept out of training)."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "UPDATE pairs SET label = ?, status = ?, annotations = annotations + 1 WHERE id = ? AND status = 'todo'",
                [(y, "done" if y is not None else "unparseable", i) for i, y in labels])

    def labelled(self) -> list[tuple[str, str, float]]:
        return self.conn.execute("SELECT a, b, label FROM pairs WHERE status = 'done'").fetchall()

    def pairs(self) -> list[tuple[str, str]]:
        """Every pair, labelled or not, in the order it was sampled."""
        return self.conn.execute("SELECT a, b FROM pairs ORDER BY id").fetchall()

    def copy_unlabelled(self, target: str | Path) -> PairsDB:
        """A new database at ``target`` with this one's messages and pairs, none labelled (another labeller,
        e.g. a knowledge control, labels the same pairs)."""
        out = PairsDB(target)
        if out.count():
            out.close()
            raise FileExistsError(f"{target} already holds pairs")
        out.add_messages(self.messages())
        out.add_pairs(self.pairs())
        return out

    def close(self) -> None:
        self.conn.close()


def sample_pairs(messages: Counter[str], num_pairs: int, seed: int = 0,
                 over: str = "observations") -> list[tuple[str, str]]:
    """Up to ``num_pairs`` distinct pairs of distinct messages.

    ``over="observations"`` (the reference): each side is drawn over the collected observations, i.e. a
    message with probability ∝ its count (identical and repeated pairs skipped, so frequent messages
    do not fill the dataset with copies); ``over="unique"``: uniform over unique messages.
    """
    if over not in ("observations", "unique"):
        raise ValueError(f"pair sampling must be 'observations' or 'unique', got {over!r}")
    keys = sorted(messages)
    rng = random.Random(seed)
    total = len(keys) * (len(keys) - 1) // 2
    if total <= num_pairs:
        return [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
    weights = [float(messages[k]) for k in keys] if over == "observations" else None
    out: set[tuple[str, str]] = set()
    for _ in range(num_pairs * 50):
        if len(out) >= num_pairs:
            break
        a, b = rng.choices(keys, weights=weights, k=2)
        if a != b:
            out.add(PairAnnotator.make_pair(a, b))
    while len(out) < num_pairs:  # the weighted draw ran dry: fill uniformly over unique messages
        a, b = rng.sample(keys, 2)
        out.add(PairAnnotator.make_pair(a, b))
    return sorted(out)


def annotate_pairs(db: PairsDB, annotator: PairAnnotator, batch_size: int = 32, max_batches: int = 0,
                   timeout: float = 600.0) -> dict[str, int]:
    """Label the pairs still to do, one committed batch at a time; ``max_batches`` > 0 stops early."""
    batches = 0
    while (rows := db.todo(batch_size)) and (max_batches <= 0 or batches < max_batches):
        items = {PairAnnotator.make_pair(a, b): i for i, a, b in rows}
        annotator.submit(items)
        annotator.wait(timeout)
        answered = [(i, annotator.labels[p]) for p, i in items.items() if p in annotator.labels]
        db.write_labels(answered)
        batches += 1
        if not answered:  # the LM is down (all fallbacks): stop, the pairs stay to do
            break
    return {"batches": batches, "done": db.count("done"), "unparseable": db.count("unparseable"),
            "todo": db.count("todo")}


def train_reward_model(db: PairsDB, *, epochs: int = 10, lr: float = 1e-4, batch_size: int = 256,
                       threshold_quantile: float = 0.5, seed: int = 0) -> tuple[dict[str, Any], dict[str, float]]:
    """Bradley-Terry char-CNN on the labelled pairs, 80/20 split
    (:func:`~llmguide.rewards.preference.fit_bradley_terry`); returns (checkpoint, metrics of the last epoch)."""
    data = db.labelled()
    if not data:
        raise ValueError(f"{db.path}: no labelled pairs; run `llmguide label method=motif` first")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    order = list(range(len(data)))
    rng.shuffle(order)
    n_val = max(1, len(data) // 5) if len(data) >= 5 else 0
    val, train = order[:n_val], order[n_val:]
    net = MessageRewardNet()
    targets = torch.tensor([y for _, _, y in data], dtype=torch.float32)   # P(a preferred)

    def scores(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return pair_rewards(net, [data[i][0] for i in idx], [data[i][1] for i in idx])

    history = fit_bradley_terry(net, scores, targets, train, val,
                                optimizer=torch.optim.Adam(net.parameters(), lr=lr), epochs=epochs, batch_size=batch_size, shuffle=rng.shuffle, clip_norm=10.0,
                                form="softmax")
    metrics: dict[str, float] = {}
    if history:
        last = history[-1]
        metrics = {"epoch": float(last["epoch"]), "train_loss": last["loss"], "train_acc": last["accuracy"]}
        if val:
            metrics.update({"val_loss": last["holdout_loss"], "val_acc": last["holdout_accuracy"]})
    trn = [data[i] for i in train]
    unique = sorted({m for a, b, _ in trn for m in (a, b)})
    rms = RunningMeanStd()
    rms.update(net.rewards([m for a, b, _ in trn for m in (a, b)]))
    z = (net.rewards(unique) - rms.mean) / np.sqrt(rms.var + 1e-8)
    quantiles = {f"{q:.2f}": float(np.quantile(z, q)) for q in np.arange(0.05, 1.0, 0.05)}
    ckpt = {"net": net.state_dict(), "normalizer": rms.state_dict(), "quantiles": quantiles,
            "threshold": float(np.quantile(z, threshold_quantile)), "threshold_quantile": threshold_quantile,
            "pairs": len(data)}
    return ckpt, {**metrics, "pairs": float(len(data)), "threshold": ckpt["threshold"]}


class MotifReward(RewardModule):
    """Frozen Motif reward model: ``z · 1[z > threshold] / n_episode(message)^β``, cached per message."""

    name = "motif"

    def __init__(self, checkpoint: dict[str, Any], num_envs: int, *, beta: float = 3.0,
                 count_scope: str = "episode", canonicalize: bool = False, message_key: str = "caption"):
        self.message_key = str(message_key)   # the info key of the message: caption, or Crafter's message line
        self.net = MessageRewardNet()
        self.net.load_state_dict(checkpoint["net"])
        self.net.eval()
        self.normalizer = RunningMeanStd()
        self.normalizer.load_state_dict(checkpoint["normalizer"])
        self.threshold = float(checkpoint["threshold"])
        self.beta, self.canonicalize = float(beta), bool(canonicalize)
        self.counter = EpisodicCounter(num_envs, count_scope)
        self.table: dict[str, float] = {}

    def shaped(self, messages: list[str]) -> np.ndarray:
        """Normalised, thresholded reward per message (no count division)."""
        from llmguide.methods.oni.annotator import canonicalize_message

        keys = [canonicalize_message(m) if self.canonicalize else m for m in messages]
        new = sorted({k for k in keys if k not in self.table})
        if new:
            z = (self.net.rewards(new) - self.normalizer.mean) / np.sqrt(self.normalizer.var + 1e-8)
            self.table.update({k: float(v) if v > self.threshold else 0.0 for k, v in zip(new, z, strict=True)})
        return np.array([self.table[k] for k in keys], dtype=np.float64)

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        msgs = batch_messages(batch, self.message_key)
        dones = np.asarray(batch.dones, dtype=bool)
        counts = np.stack([self.counter.step(msgs[t], dones[t]) for t in range(dones.shape[0])])
        return (np.stack([self.shaped(row) for row in msgs]) / np.power(counts, self.beta)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counter.load_state_dict(state["counter"])
