"""PTGM's goal space: hindsight relabelling and the discrete goal codebook (scikit-learn KMeans).

Goal space (BabyAI): a goal is a *future egocentric view* — the 7×7 one-hot grid the agent sees
``h`` steps later (object, colour and state planes), which also shows the carried item (minigrid
draws it in the agent's own cell).  :func:`goal_features` flattens it; :class:`GoalCodebook`
optionally projects it with PCA, and the projection is the *goal embedding* the low-level policy is
conditioned on (PTGM's MineCLIP embedding).  Crafter / Craftax, ``method.goals.space``:

* ``view_inventory`` (:func:`env_goal_features`; the first study): the future one-hot semantic view plus
  the future inventory counts — "what is around me and what I hold" later;
* ``inventory_delta`` / ``inventory_delta_view`` (:func:`delta_goal_features`): the change of inventory
  counts from now to the future state and the events (achievements, damage) in between — "what happens
  next", optionally with a coarse class histogram of the future view.  A deviation from PTGM's future-frame
  MineCLIP embedding, adapted to what Crafter records.

Hindsight relabelling (Steve-1 / PTGM): :func:`hindsight_indices` cuts an episode of ``T`` actions
into segments of ``U[horizon_min, horizon_max]`` steps; every step ``t`` of a segment gets the goal
state index ``g(t)`` = the segment's end (clipped to ``T``, the final state), so ``t < g(t) <= t + horizon_max``.

Codebook: KMeans (k-means++, ``n_init``, seeded) on the embeddings of the hindsight goals, storing
the centroids, the *medoid* of each cluster (the real goal nearest its centroid — PTGM's codes are
real goals) and the seed; ``kind="random"`` is the no-clustering ablation (``k`` goals of the data
drawn uniformly).  No t-SNE (non-parametric, O(n²), cannot embed new states).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def goal_features(obs: dict[str, np.ndarray]) -> np.ndarray:
    """(B, D) float32 goal features of a batch of observations: the flattened egocentric image."""
    image = np.asarray(obs["image"])
    return image.reshape(image.shape[0], -1).astype(np.float32)


# --- goal spaces per env family ------------------------------------------------------------------
BABYAI_STATE_DIM = 4     # BabyAI's vector = [direction one-hot (4), mission BoW]: the mission is dropped
CRAFTER_INVENTORY = 16   # Crafter / Craftax vector = [inventory / 9 (16), facing (4), sleeping, daylight]


def state_dim(family: str, vector_dim: int) -> int:
    """Leading entries of the env's ``vector`` the low level and the prior see (task-agnostic state):
    BabyAI's direction (its mission BoW is dropped), the whole vector on Crafter / Craftax."""
    return BABYAI_STATE_DIM if family == "babyai" else int(vector_dim)


def env_goal_features(image: np.ndarray, vector: np.ndarray, family: str, vector_weight: float = 9.0) -> np.ndarray:
    """(B, D) goal features of ``B`` (future) states of an env family.

    * BabyAI: the flattened 7×7×3 egocentric view (uint8 kept; it shows the carried item).
    * Crafter / Craftax: the flattened one-hot semantic view (19 classes × 7 × 9 = 1197) followed by the
      inventory (health, food, drink, energy, sapling, wood, stone, coal, iron, diamond, the 3 pickaxes
      and 3 swords) × ``vector_weight``; the observation holds counts / 9, so the default 9 gives raw
      counts: one item more or less weighs 1 (squared distance), a changed view cell 2.  A goal is thus
      "what is around me and what I hold" some steps ahead; achievements show in it through the
      inventory (collect / make) and the view (place table, furnace, plant).
    """
    image = np.asarray(image)
    flat = image.reshape(image.shape[0], -1)
    if family == "babyai":
        return flat
    inv = np.asarray(vector, np.float32)[:, :CRAFTER_INVENTORY] * float(vector_weight)
    return np.concatenate([flat.astype(np.float32), inv], axis=1)


# Crafter / Craftax goal spaces (``method.goals.space``); BabyAI always uses its future view.
GOAL_SPACES = ("view_inventory", "inventory_delta", "inventory_delta_view")


def _crafter_names() -> tuple[list[str], list[str], list[str]]:
    from llmguide.envs.crafter.rules import EVENTS, ITEMS, SEMANTIC_NAMES

    return list(ITEMS), list(EVENTS), [str(n) for n in SEMANTIC_NAMES]


def goal_feature_names(space: str) -> list[str]:
    """Names of the goal feature columns of a Crafter / Craftax goal space (for the cluster tables);
    ``view_inventory`` names only its inventory tail (the view part is 1197 one-hot cells)."""
    items, events, sem = _crafter_names()
    if space == "view_inventory":
        return [f"inv:{k}" for k in items]
    if space not in GOAL_SPACES:
        raise ValueError(f"goal space must be one of {GOAL_SPACES}, got {space!r}")
    names = [f"d:{k}" for k in items] + [f"ev:{e}" for e in events]
    return names + ([f"view:{c}" for c in sem] if space == "inventory_delta_view" else [])


def event_counts(events: list[list[str]], names: list[str]) -> np.ndarray:
    """(T + 1, E) cumulative counts: row ``j`` = how often each event of ``names`` happened in transitions
    ``0..j-1`` (``events[j]`` = the event names of transition ``j``, state ``j`` → ``j + 1``)."""
    col = {n: i for i, n in enumerate(names)}
    per = np.zeros((len(events) + 1, len(names)), np.float32)
    for j, evs in enumerate(events):
        for e in evs or ():
            if e in col:
                per[j + 1, col[e]] += 1.0
    return np.cumsum(per, axis=0)


def squash(x: np.ndarray) -> np.ndarray:
    """sign(x) · log(1 + |x|): compresses counts and changes (1 → 0.69, 9 → 2.30), keeps their sign."""
    x = np.asarray(x, np.float32)
    return np.sign(x) * np.log1p(np.abs(x))


def unsquash(y: np.ndarray) -> np.ndarray:
    """Inverse of :func:`squash`."""
    y = np.asarray(y, np.float32)
    return np.sign(y) * np.expm1(np.abs(y))


def delta_goal_features(image: np.ndarray, vector: np.ndarray, events: list[list[str]] | None, idx: np.ndarray,
                        space: str = "inventory_delta", view_weight: float = 1.0) -> np.ndarray:
    """(T, D) "what happens next" goals of one Crafter / Craftax episode (states ``0..T``, goal index ``idx[t]``).

    * ``inventory_delta``: the inventory counts at the goal state minus those at the current state ``t``
      (16 items incl. the vitals health, food, drink, energy; one item = 1), then the number of times each
      event (the 22 achievements, ``take damage``, ``die``) happened between ``t`` and the goal state.  So
      "collect wood" is wood +1 (and an event), "place table" is wood −1 (with its event), "eat cow" food +6.
    * ``inventory_delta_view``: the same, then a coarse summary of the goal state's view: the fraction of
      the 7×9 cells of each of the 19 semantic classes × ``view_weight``.

    Changes and counts are compressed by :func:`squash` (sign · log(1 + |x|)) so that the large passive
    swings of the vitals (health −9 at a death) do not outweigh one collected or placed item in the
    KMeans distances; :func:`unsquash` inverts it.

    This replaces PTGM's MineCLIP embedding of the future frames (which says what happens in them) by
    Crafter's own record of what happened; a deviation from PTGM (whose goal is a future-frame embedding).
    """
    _, names, _ = _crafter_names()
    vec = np.asarray(vector, np.float32)[:, :CRAFTER_INVENTORY] * 9.0   # observation = counts / 9
    T = len(idx)
    now = np.arange(T)
    cum = event_counts(list(events) if events is not None else [[] for _ in range(T)], names)
    parts = [squash(np.rint(vec[idx] - vec[now])), squash(cum[idx] - cum[now])]
    if space == "inventory_delta_view":
        img = np.asarray(image)[idx].astype(np.float32)          # (T, 19, 7, 9) one-hot
        parts.append(img.reshape(T, img.shape[1], -1).mean(axis=2) * float(view_weight))
    elif space != "inventory_delta":
        raise ValueError(f"delta goal space must be inventory_delta or inventory_delta_view, got {space!r}")
    return np.concatenate(parts, axis=1).astype(np.float32)


def hindsight_indices(T: int, rng: np.random.Generator, horizon_min: int, horizon_max: int) -> np.ndarray:
    """Goal state index ``g(t)`` for each action ``t < T`` of an episode with states ``0..T``.

    Segments of ``U[horizon_min, horizon_max]`` (inclusive) steps; step ``t`` in segment
    ``[start, end)`` gets ``end`` (clipped to ``T``).  So ``t < g(t) <= min(t + horizon_max, T)``.
    """
    if not 1 <= horizon_min <= horizon_max:
        raise ValueError(f"need 1 <= horizon_min <= horizon_max, got {horizon_min}, {horizon_max}")
    out = np.empty(T, dtype=np.int64)
    start = 0
    while start < T:
        end = min(start + int(rng.integers(horizon_min, horizon_max + 1)), T)
        out[start:end] = end
        start = end
    return out


@dataclass
class GoalCodebook:
    """Goal embedding (optional PCA) + ``k`` codes; ``codes`` are the vectors the high level can pick."""

    centroids: np.ndarray                     # (k, E) cluster centres in embedding space
    medoids: np.ndarray                       # (k, E) the real goal nearest each centre
    seed: int
    kind: str = "kmeans"                      # kmeans | random
    pca_mean: np.ndarray | None = None        # (D,)
    pca_components: np.ndarray | None = None  # (E, D)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    def embed(self, features: np.ndarray) -> np.ndarray:
        """(B, D) goal features → (B, E) embeddings (the PCA projection, or the features)."""
        x = np.asarray(features, dtype=np.float32)
        if self.pca_components is None:
            return x
        return ((x - self.pca_mean) @ self.pca_components.T).astype(np.float32)

    def assign(self, embeddings: np.ndarray) -> np.ndarray:
        """Index of the nearest centroid (Euclidean) for each embedding: the prior's labels."""
        d = _sq_dists(np.asarray(embeddings, dtype=np.float32), self.centroids)
        return d.argmin(axis=1)

    def soft_assign(self, embeddings: np.ndarray, temperature: float) -> np.ndarray:
        """Soft labels: softmax over −squared distance / temperature, (B, k)."""
        logits = -_sq_dists(np.asarray(embeddings, dtype=np.float32), self.centroids) / float(temperature)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)

    def codes(self, source: str = "medoid") -> np.ndarray:
        if source not in ("medoid", "centroid"):
            raise ValueError(f"goal source must be 'medoid' or 'centroid', got {source!r}")
        return self.medoids if source == "medoid" else self.centroids

    def save(self, path: str | Path) -> None:
        arrays = {"centroids": self.centroids, "medoids": self.medoids}
        if self.pca_components is not None:
            arrays |= {"pca_mean": self.pca_mean, "pca_components": self.pca_components}
        meta = {"seed": self.seed, "kind": self.kind, **self.meta}
        np.savez(path, meta=np.asarray(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> GoalCodebook:
        with np.load(path, allow_pickle=False) as d:
            meta = json.loads(str(d["meta"]))
            has_pca = "pca_components" in d.files
            return cls(centroids=d["centroids"], medoids=d["medoids"], seed=int(meta.pop("seed")),
                       kind=str(meta.pop("kind")), pca_mean=d["pca_mean"] if has_pca else None,
                       pca_components=d["pca_components"] if has_pca else None, meta=meta)


def _sq_dists(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (x * x).sum(1)[:, None] - 2.0 * x @ c.T + (c * c).sum(1)[None, :]


def fit_pca(features: np.ndarray, n_components: int, seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(mean, components) of a PCA with ``n_components`` (0: none → (None, None))."""
    if n_components <= 0:
        return None, None
    from sklearn.decomposition import PCA

    pca = PCA(n_components=min(n_components, *features.shape), random_state=seed).fit(features)
    return pca.mean_.astype(np.float32), pca.components_.astype(np.float32)


def fit_codebook(features: np.ndarray, k: int, seed: int, pca: int = 0, kind: str = "kmeans",
                 n_init: int = 4, max_fit: int = 50_000, embedding: GoalCodebook | None = None) -> GoalCodebook:
    """Codebook of ``k`` codes over goal ``features`` (N, D): KMeans (or random goals) after optional PCA.

    At most ``max_fit`` goals (a seeded subsample) are used to fit; medoids are picked among them.
    ``embedding``: reuse that codebook's PCA (so two codebooks share one goal space) instead of fitting one.
    """
    if kind not in ("kmeans", "random"):
        raise ValueError(f"codebook kind must be 'kmeans' or 'random', got {kind!r}")
    rng = np.random.default_rng(seed)
    feats = np.asarray(features, dtype=np.float32)
    if len(feats) > max_fit:
        feats = feats[rng.choice(len(feats), max_fit, replace=False)]
    if len(np.unique(feats, axis=0)) < k:
        raise ValueError(f"only {len(np.unique(feats, axis=0))} distinct goals for k={k} codes; "
                         "collect more data or lower method.codebook.k")
    mean, comps = (embedding.pca_mean, embedding.pca_components) if embedding is not None else fit_pca(feats, pca, seed)
    book = GoalCodebook(np.zeros((k, 1), np.float32), np.zeros((k, 1), np.float32), seed, kind, mean, comps)
    emb = book.embed(feats)
    if kind == "kmeans":
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=k, init="k-means++", n_init=n_init, random_state=seed).fit(emb)
        centroids = km.cluster_centers_.astype(np.float32)
        labels = km.labels_
        medoids = np.empty_like(centroids)
        for j in range(k):
            members = np.flatnonzero(labels == j)
            nearest = members[_sq_dists(emb[members], centroids[j:j + 1])[:, 0].argmin()]
            medoids[j] = emb[nearest]
        inertia = float(km.inertia_)
    else:  # no clustering: k distinct real goals drawn uniformly
        _, first = np.unique(emb, axis=0, return_index=True)
        pick = rng.choice(first, k, replace=False)
        centroids = medoids = emb[pick].astype(np.float32)
        inertia = float(_sq_dists(emb, centroids).min(axis=1).sum())
    book.centroids, book.medoids = centroids, medoids.astype(np.float32)
    sizes = np.bincount(book.assign(emb), minlength=k)
    book.meta = {"k": k, "pca": pca, "fit_goals": int(len(feats)), "inertia": inertia,
                 "cluster_sizes": sizes.tolist(), "n_init": n_init}
    return book
