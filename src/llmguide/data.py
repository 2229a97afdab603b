"""Episode datasets on disk: written while an agent trains, read by the labelling steps.

Layout of a dataset folder (``llmguide collect`` writes ``<run dir>/dataset/``)::

    FORMAT.json                          {"format": "llmguide-episodes", "version": 1, ...}
    episodes/<writer>-<index:06d>.npz    one episode per file, written atomically

One episode file (plain ``.npz``, no pickles) with ``T`` transitions:

    obs/<key>   (T+1, ...)  observations s_0 .. s_T (s_T is the true final observation)
    actions     (T,)        int64
    rewards     (T,)        float32, extrinsic
    captions    (T+1,)      str, caption of s_0 .. s_T ("" where unknown)
    events      (T,)        str, JSON list of the events of each transition
    messages    (T,)        str, the message line after each transition (``info["message"]``, Crafter and
                            Craftax-Classic; "" when nothing happened); optional: absent in older datasets
    meta        ()          str, JSON: mission, terminated, truncated, success, return, length,
                            env, seed, step (collector env steps when it ended), writer

Appending never rewrites existing files: every writer (a process, a seed, a resumed run) names
its files with its own ``writer`` id, so several collection runs into one folder — or several
folders passed to :class:`EpisodeDataset` — are merged automatically on read (no manual merge
step as in the BK reference).  A torn or unreadable file is skipped with a logged warning.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.core.rundir import atomic_write_bytes, atomic_write_text
from llmguide.envs.vector import InfoRows

log = logging.getLogger(__name__)

FORMAT = {"format": "llmguide-episodes", "version": 1}


@dataclass
class Episode:
    """One episode: ``T`` transitions between ``T+1`` states."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    captions: list[str]
    events: list[list[str]]
    meta: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)   # empty: the dataset did not record a message line

    def __len__(self) -> int:
        return int(len(self.actions))

    @property
    def mission(self) -> str:
        return str(self.meta.get("mission", ""))

    def validate(self) -> None:
        """Raise ValueError when the arrays do not have consistent lengths."""
        T = len(self.actions)
        problems = [f"obs/{k} has {len(v)} rows" for k, v in self.obs.items() if len(v) != T + 1]
        if len(self.rewards) != T:
            problems.append(f"rewards has {len(self.rewards)} rows")
        if len(self.captions) != T + 1:
            problems.append(f"captions has {len(self.captions)} entries")
        if len(self.events) != T:
            problems.append(f"events has {len(self.events)} entries")
        if self.messages and len(self.messages) != T:
            problems.append(f"messages has {len(self.messages)} entries")
        if problems:
            raise ValueError(f"inconsistent episode with {T} actions (expected T+1 states): {'; '.join(problems)}")


def save_episode(path: str | Path, episode: Episode) -> None:
    """Write one episode file atomically (see the module docstring for the format)."""
    episode.validate()
    arrays: dict[str, np.ndarray] = {f"obs/{k}": np.asarray(v) for k, v in episode.obs.items()}
    arrays["actions"] = np.asarray(episode.actions, dtype=np.int64)
    arrays["rewards"] = np.asarray(episode.rewards, dtype=np.float32)
    arrays["captions"] = np.asarray([str(c) for c in episode.captions], dtype=np.str_)
    arrays["events"] = np.asarray([json.dumps(list(e)) for e in episode.events], dtype=np.str_)
    if episode.messages:
        arrays["messages"] = np.asarray([str(m) for m in episode.messages], dtype=np.str_)
    arrays["meta"] = np.asarray(json.dumps(episode.meta, default=str), dtype=np.str_)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def load_episode(path: str | Path) -> Episode:
    """Read one episode file (no pickles are ever loaded)."""
    with np.load(path, allow_pickle=False) as data:
        obs = {k[4:]: data[k] for k in data.files if k.startswith("obs/")}
        episode = Episode(obs=obs, actions=data["actions"], rewards=data["rewards"],
                          captions=[str(c) for c in data["captions"]],
                          events=[json.loads(str(e)) for e in data["events"]],
                          meta=json.loads(str(data["meta"])),
                          messages=[str(m) for m in data["messages"]] if "messages" in data.files else [])
    episode.validate()
    return episode


class EpisodeWriter:
    """Appends episode files to a dataset folder under a unique writer id."""

    def __init__(self, root: str | Path, writer: str | None = None, meta: dict[str, Any] | None = None):
        self.root = Path(root)
        (self.root / "episodes").mkdir(parents=True, exist_ok=True)
        fmt = self.root / "FORMAT.json"
        if not fmt.exists():
            atomic_write_text(fmt, json.dumps({**FORMAT, "doc": "see llmguide.data"}, indent=2))
        self.writer = writer or uuid.uuid4().hex[:8]
        self.meta = dict(meta or {})
        self.count = 0

    def write(self, episode: Episode) -> Path:
        """Save ``episode`` as the next file of this writer; returns its path."""
        episode.meta = {**self.meta, **episode.meta, "writer": self.writer}
        path = self.root / "episodes" / f"{self.writer}-{self.count:06d}.npz"
        while path.exists():  # a writer id reused after a resume: never overwrite
            self.count += 1
            path = self.root / "episodes" / f"{self.writer}-{self.count:06d}.npz"
        save_episode(path, episode)
        self.count += 1
        return path


class EpisodeDataset(Sequence[Episode]):
    """All episodes of one or several dataset folders, merged (sorted by file name per folder)."""

    def __init__(self, roots: str | Path | Sequence[str | Path]):
        roots = [roots] if isinstance(roots, str | Path) else list(roots)
        self.roots = [self._resolve(Path(r)) for r in roots]
        self.files: list[Path] = []
        for root in self.roots:
            self.files += sorted((root / "episodes").glob("*.npz"))
        self.skipped: list[str] = []
        self._cache: dict[int, Episode] = {}

    @staticmethod
    def _resolve(root: Path) -> Path:
        """Accept a dataset folder or a run directory that holds ``dataset/``."""
        if (root / "episodes").is_dir():
            return root
        if (root / "dataset" / "episodes").is_dir():
            return root / "dataset"
        raise FileNotFoundError(f"{root} holds no episode dataset (expected {root}/episodes/*.npz "
                                f"or {root}/dataset/episodes/*.npz; run `llmguide collect` first)")

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Episode:  # type: ignore[override]
        if i not in self._cache:
            self._cache[i] = load_episode(self.files[i])
        return self._cache[i]

    def __iter__(self) -> Iterator[Episode]:
        """Readable episodes in order; unreadable files are skipped and logged (see ``skipped``)."""
        for i in range(len(self.files)):
            try:
                yield self[i]
            except (OSError, ValueError, KeyError) as err:
                if str(self.files[i]) not in self.skipped:
                    self.skipped.append(str(self.files[i]))
                    log.warning("skipping unreadable episode file %s: %s", self.files[i], err)

    def episodes(self) -> list[Episode]:
        return list(iter(self))

    def stats(self) -> dict[str, Any]:
        eps = self.episodes()
        steps = sum(len(e) for e in eps)
        success = [bool(e.meta.get("success", False)) for e in eps]
        return {"episodes": len(eps), "transitions": steps, "skipped": len(self.skipped),
                "success_rate": float(np.mean(success)) if success else 0.0,
                "writers": sorted({str(e.meta.get("writer", "")) for e in eps})}


# --- recording from a vector env -----------------------------------------------------------
@dataclass
class _Buffer:
    obs: list[dict[str, np.ndarray]] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    events: list[list[str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    mission: str = ""


class EpisodeRecorder(gym.vector.VectorWrapper):
    """Vector-env wrapper that saves every ``keep_every``-th finished episode with ``writer``.

    Works with SAME_STEP autoreset (the finished episode's last observation and info come from
    ``info["final_obs"]`` / ``info["final_info"]``).  Stops saving after ``max_episodes``.
    """

    def __init__(self, env: gym.vector.VectorEnv, writer: EpisodeWriter, keep_every: int = 1,
                 max_episodes: int | None = None):
        super().__init__(env)
        self.writer = writer
        self.keep_every = max(1, int(keep_every))
        self.max_episodes = max_episodes
        self.finished = 0
        self.saved = 0
        self.env_steps = 0
        self._buffers = [_Buffer() for _ in range(self.num_envs)]

    def _start(self, i: int, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        buf = _Buffer(mission=str(info.get("mission", "")))
        buf.obs.append({k: np.array(v[i], copy=True) for k, v in obs.items()})
        buf.captions.append(str(info.get("caption", "") or ""))
        self._buffers[i] = buf

    def reset(self, *, seed: Any = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        rows = InfoRows(infos, self.num_envs)
        for i in range(self.num_envs):
            self._start(i, obs, rows[i])
        return obs, infos

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self.env_steps += self.num_envs
        dones = np.logical_or(terminated, truncated)
        final_info = infos.get("final_info") if isinstance(infos.get("final_info"), dict) else None
        rows = InfoRows(infos, self.num_envs)
        finals = InfoRows(final_info, self.num_envs) if final_info is not None else None
        for i in range(self.num_envs):
            buf = self._buffers[i]
            if not buf.obs:  # the env was never reset through this wrapper
                continue
            info = finals[i] if dones[i] and finals is not None else rows[i]
            if dones[i] and "final_obs" in infos:
                next_obs = {k: np.array(v, copy=True) for k, v in infos["final_obs"][i].items()}
            else:
                next_obs = {k: np.array(v[i], copy=True) for k, v in obs.items()}
            buf.obs.append(next_obs)
            buf.actions.append(int(np.asarray(actions)[i]))
            buf.rewards.append(float(rewards[i]))
            buf.captions.append(str(info.get("caption", "") or ""))
            buf.events.append([str(e) for e in (info.get("events") or [])])
            buf.messages.append(str(info.get("message", "") or ""))
            if dones[i]:
                self._finish(i, bool(terminated[i]), bool(truncated[i]), info)
                self._start(i, obs, rows[i])
        return obs, rewards, terminated, truncated, infos

    def _finish(self, i: int, terminated: bool, truncated: bool, info: dict[str, Any]) -> None:
        self.finished += 1
        buf = self._buffers[i]
        if (self.finished - 1) % self.keep_every or (self.max_episodes is not None
                                                     and self.saved >= self.max_episodes):
            return
        obs = {k: np.stack([o[k] for o in buf.obs]) for k in buf.obs[0]}
        meta = {"mission": buf.mission, "terminated": terminated, "truncated": truncated,
                "success": bool(info.get("success", False)), "return": float(sum(buf.rewards)),
                "length": len(buf.actions), "step": self.env_steps}
        self.writer.write(Episode(obs=obs, actions=np.asarray(buf.actions), rewards=np.asarray(buf.rewards),
                                  captions=buf.captions, events=buf.events, meta=meta,
                                  messages=buf.messages if any(buf.messages) else []))
        self.saved += 1
