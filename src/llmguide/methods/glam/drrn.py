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
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmguide.core.config import cfg_get
from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners.base import Learner
from llmguide.learners.common import crossed
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
class DRRNAgent(Learner):
    """DRRN Q-learning on a vector env whose infos carry ``caption`` and ``mission`` (BabyAI-Text).

    ``cfg`` keys (``conf/method/drrn.yaml``): k_history, gamma, lr, batch_size, replay_size,
    update_every (null: 4 × num_envs), max_grad_norm (0: no clipping), reward_scale,
    target_update_every (0: no target network), checkpoint_replay.  Every ``log_every`` env steps it
    logs ``charts/sps``, ``charts/q_mean`` (mean max-Q of the prompts it acted on), ``losses/td_loss``
    and ``charts/q_taken`` / ``charts/td_target`` (batch means of the last updates); episodes as GLAMPPO.
    """

    algo = "drrn"

    def __init__(self, envs, policy: DRRNPolicy, cfg: Any, run: RunDir | None = None, seed: int = 0,
                 log_every: int = 1000):
        super().__init__(envs, run=run, seed=seed)
        self.policy = policy
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
        self._history = History(self.num_envs, self.k_history)
        self._obs_ids: list[np.ndarray] = []
        self._window: dict[str, list[float]] = {"q_mean": [], "reward": []}   # the steps since the last log
        self._update_stats: list[dict[str, float]] = []

    # --- env helpers -----------------------------------------------------------------------------
    def _encode(self, prompts: Sequence[str]) -> list[np.ndarray]:
        return [self.policy.tokenizer.encode(p) for p in prompts]

    def _on_reset(self, obs: Any, infos: dict) -> None:
        """Fresh histories from the reset infos; the first prompts tokenised."""
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
    def _on_learn_start(self) -> None:
        self._window, self._update_stats = {"q_mean": [], "reward": []}, []

    def _iteration(self, total_steps: int) -> None:
        """One vector step into the replay; a TD update every ``update_every`` env steps (the callbacks'
        ``on_rollout_end`` after each), the averages logged every ``log_every`` env steps."""
        N = self.num_envs
        obs_ids = self._obs_ids
        actions, _, q_max = self.policy.act_ids(obs_ids)
        _, reward, terminated, truncated, infos = self.envs.step(actions)
        dones = np.logical_or(terminated, truncated)
        self.global_step += N
        env_infos = split_infos(infos, N)
        self._record_episodes(reward, dones, env_infos)
        next_ids = self._encode(self._advance(actions, dones, env_infos, infos))
        for i in range(N):
            self.replay.add(obs_ids[i], int(actions[i]), self.reward_scale * float(reward[i]), next_ids[i],
                            bool(terminated[i]))
        self._obs_ids = list(next_ids)
        if dones.any():   # a finished env acts next from its new episode's first prompt
            restarted = self._history.prompts(self.policy.action_strings)
            for i in np.flatnonzero(dones):
                self._obs_ids[i] = self.policy.tokenizer.encode(restarted[i])
        self._window["q_mean"].append(float(np.mean(q_max)))
        self._window["reward"].append(float(np.mean(reward)))
        self._on_step(StepTransition(obs=obs_ids, actions=actions, next_obs=next_ids, rewards=np.asarray(reward),
                                     terminated=np.asarray(terminated), truncated=np.asarray(truncated),
                                     infos=env_infos, step=self.global_step))

        if self._crossed(self.update_every) and len(self.replay) >= self.batch_size:
            self._update_stats.append(self.td_update(self.replay.sample(self.rng, self.batch_size)))
            self._callback.on_rollout_end(self._update_stats[-1])
        if self._crossed(self.log_every):
            self._log_window()
            self._window, self._update_stats = {"q_mean": [], "reward": []}, []
        self._advance_bar(N)

    def _on_learn_end(self) -> None:
        if self._window["q_mean"]:
            self._log_window()

    def _crossed(self, every: int) -> bool:
        """True when the last vector step moved ``global_step`` past a multiple of ``every``."""
        return crossed(self.global_step, self.global_step - self.num_envs, every)

    def _log_window(self) -> None:
        """The window's averages (and those of its TD updates) logged, kept as ``last_metrics``."""
        window, update_stats = self._window, self._update_stats
        metrics = {"charts/sps": self._sps(),
                   "charts/q_mean": float(np.mean(window["q_mean"])),
                   "charts/extrinsic_reward": float(np.mean(window["reward"])),
                   "charts/replay_size": len(self.replay), "charts/updates": self.updates}
        for key in update_stats[0] if update_stats else ():
            metrics[key] = float(np.mean([s[key] for s in update_stats]))
        self.last_metrics = metrics
        self._log(metrics)

    # --- checkpoints -----------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any]:
        """The network (and target), its action strings; the replay if ``checkpoint_replay``."""
        state: dict[str, Any] = {"net": self.policy.net.state_dict(), "action_strings": list(self.policy.action_strings)}
        if self.target_net is not None:
            state["target_net"] = self.target_net.state_dict()
        if self.checkpoint_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def _load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.policy.net.load_state_dict(state["net"])
        if self.target_net is not None:
            self.target_net.load_state_dict(state.get("target_net", state["net"]))
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
