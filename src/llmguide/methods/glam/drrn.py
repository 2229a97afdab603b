"""DRRN (He et al. 2016), GLAM's text baseline: a Q-network over the same prompt the LM policy reads.

As in GLAM's copy of microsoft/tdqn: one GRU encodes the prompt (action list, goal, last ``k``
captions and actions; :func:`~llmguide.methods.glam.learner.glam_prompt`), another GRU encodes each
action string, and ``Linear(concat) -> ReLU -> Linear`` gives one Q-value per (prompt, action).
Actions are sampled from ``softmax(Q / temperature)`` (greedy: argmax).  Learning: a replay of
(prompt, action, reward, next prompt, terminal); every ``update_every`` env steps one Huber TD
update on a batch, target ``r + γ (1 − terminal) max_a' Q(s', a')``.  GLAM's DRRN has no target
network; ``target_update_every > 0`` adds one (hard copy every that many updates).

Tokenizer: GLAM used a sentencepiece unigram-8k model trained on its prompts.  Here words are
hashed (crc32) into ``vocab_size`` buckets instead: no training file is needed, and
out-of-vocabulary or invented words (the generalisation tests rewrite prompts with "dax", "chair",
French...) get deterministic ids, the same in every process and run.

Two fixes against the reference: the first observation of each new episode is kept in the
prompt (GLAM's DRRN cleared the history at episode end and dropped the reset caption), and
truncation is not terminal (the target bootstraps from the last observation's prompt).
Conventions as in :mod:`llmguide.methods.glam.learner`: SAME_STEP autoreset, infos carry
``caption`` and ``mission``.
"""

from __future__ import annotations

import copy
import re
import time
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmguide.core.config import cfg_get
from llmguide.core.progress import Progress
from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners.callbacks import Callback, as_callback
from llmguide.learners.common import EpisodeTracker, crossed, rng_state, set_rng_state
from llmguide.methods.glam.policy import History
from llmguide.rewards.base import StepTransition

_WORD = re.compile(r"[a-z0-9]+")


# --- tokenizer -----------------------------------------------------------------------------------
class HashTokenizer:
    """Lowercased alphanumeric words hashed (crc32) into ids ``1..vocab_size-1``; id 0 is padding."""

    def __init__(self, vocab_size: int = 8192):
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 (id 0 is padding), got {vocab_size}")
        self.vocab_size = vocab_size
        self._ids: dict[str, int] = {}

    def word_id(self, word: str) -> int:
        wid = self._ids.get(word)
        if wid is None:
            wid = 1 + zlib.crc32(word.encode("utf-8")) % (self.vocab_size - 1)
            if len(self._ids) < 100_000:
                self._ids[word] = wid
        return wid

    def encode(self, text: str) -> np.ndarray:
        """Word ids of ``text`` (int32, possibly empty)."""
        return np.array([self.word_id(w) for w in _WORD.findall(text.lower())], dtype=np.int32)

    @staticmethod
    def pad(seqs: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids (n, L) zero-padded, lengths (n,))``; an empty sequence becomes one padding token."""
        lengths = [max(len(s), 1) for s in seqs]
        ids = np.zeros((len(seqs), max(lengths, default=1)), dtype=np.int64)
        for row, seq in enumerate(seqs):
            ids[row, :len(seq)] = seq
        return torch.from_numpy(ids), torch.tensor(lengths, dtype=torch.long)


# --- network -------------------------------------------------------------------------------------
class DRRN(nn.Module):
    """Prompt GRU and action GRU over shared embeddings; ``Linear -> ReLU -> Linear`` on their concat."""

    def __init__(self, vocab_size: int = 8192, embed_dim: int = 128, hidden_dim: int = 128):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.obs_encoder = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.act_encoder = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.hidden = nn.Linear(2 * hidden_dim, hidden_dim)
        self.scorer = nn.Linear(hidden_dim, 1)

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor, rnn: nn.GRU) -> torch.Tensor:
        """Hidden state of ``rnn`` at each sequence's own last token, (n, hidden).

        The GRU runs over the padded batch and the state at ``length - 1`` is gathered: a causal
        GRU's state there never sees the padding, and on CPU this is ~5x faster to backpropagate
        than a packed sequence.
        """
        out, _ = rnn(self.embedding(ids))
        return out[torch.arange(out.shape[0]), lengths.to(out.device) - 1]

    def forward(self, obs_ids: torch.Tensor, obs_lengths: torch.Tensor, act_ids: torch.Tensor,
                act_lengths: torch.Tensor) -> torch.Tensor:
        """Q for every (prompt, action) pair: (n prompts, A actions)."""
        s = self.encode(obs_ids, obs_lengths, self.obs_encoder)
        a = self.encode(act_ids, act_lengths, self.act_encoder)
        n, num_actions = s.shape[0], a.shape[0]
        z = torch.cat([s[:, None].expand(n, num_actions, -1), a[None].expand(n, num_actions, -1)], dim=-1)
        return self.scorer(F.relu(self.hidden(z))).squeeze(-1)


# --- policy --------------------------------------------------------------------------------------
class DRRNPolicy(nn.Module):
    """A :class:`DRRN` with its tokenizer and (swappable) action strings; same ``act`` as ``LMPolicy``."""

    def __init__(self, action_strings: Sequence[str], vocab_size: int = 8192, embed_dim: int = 128,
                 hidden_dim: int = 128, temperature: float = 1.0):
        super().__init__()
        if not action_strings:
            raise ValueError("action_strings is empty")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.tokenizer = HashTokenizer(vocab_size)
        self.net = DRRN(vocab_size, embed_dim, hidden_dim)
        self.action_strings = list(action_strings)
        self.temperature = float(temperature)

    def q_from_ids(self, prompt_ids: Sequence[np.ndarray], net: DRRN | None = None) -> torch.Tensor:
        """Q-values (n, A) of tokenised prompts against the current action strings (``net``: e.g. a target)."""
        net = net if net is not None else self.net
        obs, obs_len = self.tokenizer.pad(prompt_ids)
        acts, act_len = self.tokenizer.pad([self.tokenizer.encode(a) for a in self.action_strings])
        return net(obs, obs_len, acts, act_len)

    def forward(self, prompts: Sequence[str]) -> torch.Tensor:
        """Q-values (n, A) for a batch of prompt strings."""
        return self.q_from_ids([self.tokenizer.encode(p) for p in prompts])

    def act_ids(self, prompt_ids: Sequence[np.ndarray],
                greedy: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`act` on already tokenised prompts."""
        with torch.no_grad():
            q = self.q_from_ids(prompt_ids)
        logp = torch.log_softmax(q / self.temperature, dim=-1)
        actions = q.argmax(-1) if greedy else torch.distributions.Categorical(logits=logp).sample()
        chosen = logp.gather(1, actions[:, None]).squeeze(1)
        return actions.numpy(), chosen.numpy(), q.max(-1).values.numpy()

    def act(self, prompts: Sequence[str], greedy: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Action indices (sampled from softmax(Q / temperature), or argmax), their log-probs, and max Q."""
        return self.act_ids([self.tokenizer.encode(p) for p in prompts], greedy=greedy)


# --- replay --------------------------------------------------------------------------------------
class TextReplay:
    """Ring buffer of (prompt ids, action, reward, next prompt ids, terminal)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"replay_size must be >= 1, got {capacity}")
        self.capacity = capacity
        self.items: list[tuple[np.ndarray, int, float, np.ndarray, bool]] = []
        self.pos = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, terminal: bool) -> None:
        item = (obs, int(action), float(reward), next_obs, bool(terminal))
        if len(self.items) < self.capacity:
            self.items.append(item)
        else:
            self.items[self.pos] = item
        self.pos = (self.pos + 1) % self.capacity

    def sample(self, rng: np.random.Generator, batch_size: int) -> dict[str, Any]:
        """A uniform batch (with replacement): lists of ids and tensors of actions, rewards, terminals."""
        rows = [self.items[int(i)] for i in rng.integers(len(self.items), size=batch_size)]
        obs, actions, rewards, next_obs, terminals = zip(*rows, strict=True)
        return {"obs": list(obs), "actions": torch.tensor(actions, dtype=torch.long),
                "rewards": torch.tensor(rewards, dtype=torch.float32), "next_obs": list(next_obs),
                "terminals": torch.tensor(terminals, dtype=torch.float32)}

    def state_dict(self) -> dict[str, Any]:
        return {"items": list(self.items), "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.items, self.pos = list(state["items"])[-self.capacity:], int(state["pos"]) % self.capacity


# --- learner -------------------------------------------------------------------------------------
class DRRNAgent:
    """DRRN Q-learning on a vector env whose infos carry ``caption`` and ``mission`` (BabyAI-Text).

    ``cfg`` keys (``conf/method/drrn.yaml``): k_history, gamma, lr, batch_size, replay_size,
    update_every (null: 4 × num_envs), max_grad_norm (0: no clipping), reward_scale,
    target_update_every (0: no target network), checkpoint_replay.  Every ``log_every`` env steps it
    logs ``charts/sps``, ``charts/q_mean`` (mean max-Q of the prompts it acted on), ``losses/td_loss``
    and ``charts/q_taken`` / ``charts/td_target`` (batch means of the last updates); episodes as GLAMPPO.
    """

    def __init__(self, envs, policy: DRRNPolicy, cfg: Any, run: RunDir | None = None, seed: int = 0,
                 log_every: int = 1000):
        self.envs, self.policy, self.run, self.seed = envs, policy, run, seed
        self.num_envs = envs.num_envs
        self.k_history = int(cfg_get(cfg, "k_history", 3))
        self.gamma = float(cfg_get(cfg, "gamma", 0.9))
        self.batch_size = int(cfg_get(cfg, "batch_size", 64))
        self.update_every = int(cfg_get(cfg, "update_every", 4 * self.num_envs))
        self.max_grad_norm = float(cfg_get(cfg, "max_grad_norm", 5.0))
        self.reward_scale = float(cfg_get(cfg, "reward_scale", 1.0))
        self.target_update_every = int(cfg_get(cfg, "target_update_every", 0))
        self.checkpoint_replay = bool(cfg_get(cfg, "checkpoint_replay", False))
        self.log_every = max(int(log_every), 1)
        self.replay = TextReplay(int(cfg_get(cfg, "replay_size", 100_000)))
        self.optimizer = torch.optim.Adam(policy.net.parameters(), lr=float(cfg_get(cfg, "lr", 1e-4)))
        self.target_net = copy.deepcopy(policy.net) if self.target_update_every > 0 else None
        self.rng = np.random.default_rng(seed)
        self.global_step = 0
        self.updates = 0
        self.last_metrics: dict[str, float] = {}
        self._history: History | None = None
        self._obs_ids: list[np.ndarray] = []

    # --- env helpers -----------------------------------------------------------------------------
    def _encode(self, prompts: Sequence[str]) -> list[np.ndarray]:
        return [self.policy.tokenizer.encode(p) for p in prompts]

    def _reset(self) -> None:
        _, infos = self.envs.reset(seed=self.seed + self.global_step)
        self._history = History(self.num_envs, self.k_history)
        for i, info in enumerate(split_infos(infos, self.num_envs)):
            self._history.reset(i, info["mission"], info["caption"])
        self._obs_ids = self._encode(self._history.prompts(self.policy.action_strings))

    def _advance(self, actions: np.ndarray, dones: np.ndarray, env_infos: Sequence[dict],
                 infos: dict) -> list[str]:
        """Step each history with the caption its action led to; return those next prompts.

        ``env_infos`` are the per-transition infos (a finished env's final info), ``infos`` the raw
        vector infos: with SAME_STEP autoreset their top level is a finished env's *reset* info, so
        its history restarts from the new episode's first caption (kept, unlike GLAM's DRRN).
        """
        assert self._history is not None
        for i in range(self.num_envs):
            self._history.step(i, self.policy.action_strings[int(actions[i])], str(env_infos[i]["caption"]))
        next_prompts = self._history.prompts(self.policy.action_strings)
        for i in np.flatnonzero(dones):
            self._history.reset(i, str(infos["mission"][i]), str(infos["caption"][i]))
        return next_prompts

    # --- update ----------------------------------------------------------------------------------
    def td_update(self, batch: dict[str, Any]) -> dict[str, float]:
        """One Huber TD step on a :meth:`TextReplay.sample` batch; returns loss metrics."""
        with torch.no_grad():
            next_q = self.policy.q_from_ids(batch["next_obs"], net=self.target_net).max(-1).values
            target = batch["rewards"] + self.gamma * (1.0 - batch["terminals"]) * next_q
        q = self.policy.q_from_ids(batch["obs"]).gather(1, batch["actions"][:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        if self.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.policy.net.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.target_net is not None and self.updates % self.target_update_every == 0:
            self.target_net.load_state_dict(self.policy.net.state_dict())
        return {"losses/td_loss": loss.item(), "charts/q_taken": q.detach().mean().item(),
                "charts/td_target": target.mean().item()}

    # --- training --------------------------------------------------------------------------------
    def learn(self, total_steps: int, callback: Callback | Sequence[Callback] | None = None,
              progress: bool = True) -> DRRNAgent:
        """Train until ``global_step >= total_steps`` (callbacks as in :mod:`llmguide.learners.callbacks`;
        ``on_rollout_end`` after every TD update)."""
        callback = as_callback(callback)
        callback.init(self)
        callback.on_training_start()
        N = self.num_envs
        if self._history is None:
            self._reset()
        assert self._history is not None
        tracker = EpisodeTracker(N)
        bar = Progress(total=total_steps, initial=self.global_step, disable=not progress, desc="drrn")
        start_time, start_step = time.perf_counter(), self.global_step
        window: dict[str, list[float]] = {"q_mean": [], "reward": []}
        update_stats: list[dict[str, float]] = []
        while self.global_step < total_steps:
            obs_ids = self._obs_ids
            actions, _, q_max = self.policy.act_ids(obs_ids)
            _, reward, terminated, truncated, infos = self.envs.step(actions)
            dones = np.logical_or(terminated, truncated)
            self.global_step += N
            env_infos = split_infos(infos, N)
            for record in tracker.step(np.asarray(reward, dtype=np.float64), dones, env_infos):
                bar.episode(record["charts/episodic_return"], record["charts/episodic_length"])
                if self.run is not None:
                    self.run.log(self.global_step, record)
            next_ids = self._encode(self._advance(actions, dones, env_infos, infos))
            for i in range(N):
                self.replay.add(obs_ids[i], int(actions[i]), self.reward_scale * float(reward[i]), next_ids[i],
                                bool(terminated[i]))
            self._obs_ids = list(next_ids)
            if dones.any():   # a finished env acts next from its new episode's first prompt
                restarted = self._history.prompts(self.policy.action_strings)
                for i in np.flatnonzero(dones):
                    self._obs_ids[i] = self.policy.tokenizer.encode(restarted[i])
            window["q_mean"].append(float(np.mean(q_max)))
            window["reward"].append(float(np.mean(reward)))
            callback.on_step(StepTransition(obs=obs_ids, actions=actions, next_obs=next_ids, rewards=np.asarray(reward),
                                            terminated=np.asarray(terminated), truncated=np.asarray(truncated),
                                            infos=env_infos, step=self.global_step))

            if self._crossed(self.update_every) and len(self.replay) >= self.batch_size:
                update_stats.append(self.td_update(self.replay.sample(self.rng, self.batch_size)))
                callback.on_rollout_end(update_stats[-1])
            if self._crossed(self.log_every):
                self._log_window(window, update_stats, start_step, start_time)
                window, update_stats = {"q_mean": [], "reward": []}, []
            bar.update(N, lm_stats=callback.progress_stats)
        if window["q_mean"]:
            self._log_window(window, update_stats, start_step, start_time)
        bar.close()
        callback.on_training_end()
        return self

    def _crossed(self, every: int) -> bool:
        """True when the last vector step moved ``global_step`` past a multiple of ``every``."""
        return crossed(self.global_step, self.global_step - self.num_envs, every)

    def _log_window(self, window: dict[str, list[float]], update_stats: list[dict[str, float]],
                    start_step: int, start_time: float) -> None:
        elapsed = max(time.perf_counter() - start_time, 1e-9)
        metrics = {"charts/sps": (self.global_step - start_step) / elapsed,
                   "charts/q_mean": float(np.mean(window["q_mean"])),
                   "charts/extrinsic_reward": float(np.mean(window["reward"])),
                   "charts/replay_size": len(self.replay), "charts/updates": self.updates}
        for key in update_stats[0] if update_stats else ():
            metrics[key] = float(np.mean([s[key] for s in update_stats]))
        self.last_metrics = metrics
        if self.run is not None:
            self.run.log(self.global_step, metrics)

    # --- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Network (and target), optimiser, counters, RNG states; the replay if ``checkpoint_replay``."""
        state = {"algo": "drrn", "net": self.policy.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "action_strings": list(self.policy.action_strings), "global_step": self.global_step,
                 "updates": self.updates, "rng": rng_state(), "agent_rng": self.rng.bit_generator.state}
        if self.target_net is not None:
            state["target_net"] = self.target_net.state_dict()
        if self.checkpoint_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the envs restart (fresh histories) on the next ``learn``."""
        if state.get("algo") != "drrn":
            raise ValueError(f"checkpoint is for agent '{state.get('algo')}', not 'drrn'")
        self.policy.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.target_net is not None:
            self.target_net.load_state_dict(state.get("target_net", state["net"]))
        self.global_step = int(state["global_step"])
        self.updates = int(state["updates"])
        set_rng_state(state["rng"])
        self.rng.bit_generator.state = state["agent_rng"]
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        self._history = None
