"""Dueling double DQN with n-step returns and goal conditioning (ELLM's agent), in plain PyTorch.

Loop: ε-greedy actions on N vector envs for ``chunk_steps`` steps → intrinsic rewards from the reward modules
on that chunk (then the modules train on it) → n-step transitions into an in-memory replay → one gradient step
per ``train_every`` env steps (Huber loss on the double-DQN target) → hard target copy every
``target_update_every`` env steps.

Goal conditioning: the goal embedding is the observation key ``goal`` (put there by a wrapper), or, with
``goal_dim > 0``, ``goal_provider()`` (one (N, goal_dim) row per env) in ``learn`` and ``goal_emb`` in :meth:`DQN.act`.

Unlike PPO, truncation *is* bootstrapped here: an n-step window ends at any episode end, but the
target drops the bootstrap term only on termination.  A non-finite loss or parameter stops training.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners import common
from llmguide.learners.base import Learner, use_torch_threads
from llmguide.learners.common import agent_config, crossed, stack_obs, true_next_obs
from llmguide.learners.networks import DuelingQNet, obs_to_tensor
from llmguide.rewards.base import RewardModule, StepTransition, TransitionBatch


@dataclass
class NStepTransition:
    obs: dict[str, np.ndarray]
    action: int
    reward: float              # sum_{k<n} gamma^k r_{t+k}
    next_obs: dict[str, np.ndarray]
    terminated: bool           # no bootstrap from next_obs
    discount: float            # gamma^n, n = steps actually summed


class NStepBuffer:
    """Per-env window turning 1-step transitions into n-step ones (windows end at episode ends)."""

    def __init__(self, n: int, gamma: float, num_envs: int):
        if n < 1:
            raise ValueError(f"n_step must be >= 1, got {n}")
        self.n, self.gamma = n, gamma
        self.windows: list[deque] = [deque() for _ in range(num_envs)]

    def _emit(self, window: deque, next_obs: dict, terminated: bool) -> NStepTransition:
        ret = sum(self.gamma ** k * r for k, (_, _, r) in enumerate(window))
        obs, action, _ = window[0]
        return NStepTransition(obs, action, float(ret), next_obs, terminated, self.gamma ** len(window))

    def push(self, env: int, obs: dict, action: int, reward: float, next_obs: dict,
             terminated: bool, truncated: bool) -> list[NStepTransition]:
        """Add one step of env ``env``; return the n-step transitions that are now complete."""
        window = self.windows[env]
        window.append((obs, int(action), float(reward)))
        out = []
        if terminated or truncated:
            while window:
                out.append(self._emit(window, next_obs, bool(terminated)))
                window.popleft()
        elif len(window) == self.n:
            out.append(self._emit(window, next_obs, False))
            window.popleft()
        return out

    def clear(self) -> None:
        for w in self.windows:
            w.clear()


class ReplayBuffer:
    """Circular in-memory replay of n-step transitions with Dict observations."""

    def __init__(self, obs_space: spaces.Dict, capacity: int):
        self.capacity = int(capacity)
        self.obs = {k: np.zeros((capacity, *s.shape), dtype=s.dtype) for k, s in obs_space.spaces.items()}
        self.next_obs = {k: np.zeros_like(v) for k, v in self.obs.items()}
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=np.float32)
        self.discounts = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.obs.values()) * 2

    def add(self, tr: NStepTransition) -> None:
        i = self.pos
        for k in self.obs:
            self.obs[k][i] = tr.obs[k]
            self.next_obs[k][i] = tr.next_obs[k]
        self.actions[i], self.rewards[i] = tr.action, tr.reward
        self.terminated[i], self.discounts[i] = float(tr.terminated), tr.discount
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator, device: torch.device) -> dict[str, Any]:
        idx = rng.integers(0, self.size, size=batch_size)
        t = lambda a: torch.as_tensor(a[idx], device=device)  # noqa: E731
        return {"obs": {k: t(v) for k, v in self.obs.items()}, "next_obs": {k: t(v) for k, v in self.next_obs.items()},
                "actions": t(self.actions), "rewards": t(self.rewards), "terminated": t(self.terminated),
                "discounts": t(self.discounts)}

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {"obs": {k: v[:n].copy() for k, v in self.obs.items()},
                "next_obs": {k: v[:n].copy() for k, v in self.next_obs.items()},
                "actions": self.actions[:n].copy(), "rewards": self.rewards[:n].copy(),
                "terminated": self.terminated[:n].copy(), "discounts": self.discounts[:n].copy(),
                "pos": self.pos, "size": n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        for k in self.obs:
            self.obs[k][:n], self.next_obs[k][:n] = state["obs"][k], state["next_obs"][k]
        for name in ("actions", "rewards", "terminated", "discounts"):
            getattr(self, name)[:n] = state[name]
        self.pos, self.size = int(state["pos"]), n


def double_dqn_targets(q_net: nn.Module, target_net: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """``R + γ^n (1 − terminated) Q_target(s', argmax_a Q_online(s', a))``."""
    with torch.no_grad():
        best = q_net(batch["next_obs"]).argmax(dim=1, keepdim=True)
        q_next = target_net(batch["next_obs"]).gather(1, best).squeeze(1)
        return batch["rewards"] + batch["discounts"] * (1.0 - batch["terminated"]) * q_next


class DQN(Learner):
    """Goal-conditioned dueling double DQN on a Gymnasium vector env with Dict observations."""

    algo = "dqn"

    def __init__(self, envs, cfg_agent: Any, reward_modules: Sequence[tuple[float, RewardModule]] = (),
                 extrinsic_coef: float = 1.0, run: RunDir | None = None, seed: int = 0,
                 device: str = "cpu", goal_dim: int = 0,
                 goal_provider: Callable[[], np.ndarray] | None = None):
        if not isinstance(envs.single_action_space, spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space, got {envs.single_action_space}")
        super().__init__(envs, run=run, seed=seed, reward_modules=reward_modules, extrinsic_coef=extrinsic_coef)
        self.cfg, self.device = cfg_agent, torch.device(device)
        settings = agent_config(cfg_agent, "dqn")   # conf/agent/dqn.yaml: the defaults
        self.lr = float(settings.lr)
        self.gamma = float(settings.gamma)
        self.n_step = int(settings.n_step)
        self.batch_size = int(settings.batch_size)
        self.learning_starts = int(settings.learning_starts)
        self.train_every = int(settings.train_every)
        self.target_update_every = int(settings.target_update_every)
        self.eps_start, self.eps_end = float(settings.eps_start), float(settings.eps_end)
        self.eps_decay_steps = int(settings.eps_decay_steps)
        self.eval_eps = float(settings.eval_eps)
        self.max_grad_norm = float(settings.max_grad_norm)
        self.chunk_steps = int(settings.chunk_steps)
        self.log_interval = int(settings.log_interval)
        self.checkpoint_replay = bool(settings.checkpoint_replay)
        use_torch_threads(int(settings.torch_threads))

        obs_space = envs.single_observation_space
        self.goal_dim, self.goal_provider = int(goal_dim), goal_provider
        if self.goal_dim > 0:
            goal_box = spaces.Box(-np.inf, np.inf, (self.goal_dim,), np.float32)
            obs_space = spaces.Dict({**obs_space.spaces, "goal": goal_box})
        self.obs_space = obs_space
        n_actions = int(envs.single_action_space.n)
        self.n_actions = n_actions
        torch.manual_seed(self.seed)
        hidden = int(settings.hidden)
        self.q_net = DuelingQNet(obs_space, n_actions, hidden).to(self.device)
        self.target_net = DuelingQNet(obs_space, n_actions, hidden).to(self.device)
        self.target_net.load_state_dict(self.q_net.state_dict())
        self.optimizer = torch.optim.Adam(self.q_net.parameters(), lr=self.lr, eps=float(settings.adam_eps))
        self.replay = ReplayBuffer(obs_space, int(settings.buffer_size))
        self.nstep = NStepBuffer(self.n_step, self.gamma, self.num_envs)
        self._explore_fn: Callable[[dict], np.ndarray] | None = None
        self._explore_prob = 0.0
        self._next_obs: dict[str, np.ndarray] = {}
        self._next_log = 0
        self._train_metrics: dict[str, float] = {}

    # --- acting ---------------------------------------------------------------------------
    def epsilon(self, step: int | None = None) -> float:
        """Linear ε schedule from ``eps_start`` to ``eps_end`` over ``eps_decay_steps`` env steps."""
        step = self.global_step if step is None else step
        frac = min(step / max(self.eps_decay_steps, 1), 1.0)
        return self.eps_start + frac * (self.eps_end - self.eps_start)

    def set_exploration_policy(self, fn: Callable[[dict], np.ndarray] | None, prob: float) -> None:
        """When ε fires, take ``fn(obs)``'s action with probability ``prob`` instead of a uniform one."""
        self._explore_fn, self._explore_prob = fn, float(prob)

    def reset_act_state(self) -> None:
        """No recurrent memory (kept for the evaluation protocol shared with PPO)."""

    def _with_goal(self, obs: dict[str, np.ndarray], goal_emb: np.ndarray | None) -> dict[str, np.ndarray]:
        if goal_emb is not None:
            return {**obs, "goal": np.asarray(goal_emb, dtype=np.float32)}
        if "goal" in self.obs_space.spaces and "goal" not in obs:
            raise ValueError("this DQN is goal-conditioned: pass goal_emb=(N, goal_dim) or an obs key 'goal'")
        return obs

    @torch.no_grad()
    def act(self, obs: dict[str, np.ndarray], greedy: bool = False, goal_emb: np.ndarray | None = None,
            epsilon: float | None = None) -> np.ndarray:
        """ε-greedy actions (ε = 0 with ``greedy``, else ``epsilon`` or ``eval_eps``)."""
        obs = self._with_goal(obs, goal_emb)
        q = self.q_net(obs_to_tensor(obs, self.device))
        actions = q.argmax(dim=1).cpu().numpy()
        eps = 0.0 if greedy else (self.eval_eps if epsilon is None else epsilon)
        explore = self.rng.random(len(actions)) < eps
        if explore.any():
            random_actions = self.rng.integers(0, self.n_actions, size=len(actions))
            if self._explore_fn is not None and self._explore_prob > 0:
                guided = self.rng.random(len(actions)) < self._explore_prob
                if guided.any():
                    random_actions = np.where(guided, np.asarray(self._explore_fn(obs)), random_actions)
            actions = np.where(explore, random_actions, actions)
        return actions

    # --- training -------------------------------------------------------------------------
    def _current_goal(self) -> np.ndarray | None:
        if self.goal_dim == 0:
            return None
        if self.goal_provider is None:
            raise ValueError("goal_dim > 0 needs a goal_provider() returning (num_envs, goal_dim) embeddings")
        goal = np.asarray(self.goal_provider(), dtype=np.float32)
        if goal.shape != (self.num_envs, self.goal_dim):
            raise ValueError(f"goal_provider returned shape {goal.shape}, expected {(self.num_envs, self.goal_dim)}")
        return goal

    def train_step(self) -> dict[str, float]:
        """One gradient step on a replay minibatch (Huber loss to the double-DQN n-step target)."""
        batch = self.replay.sample(self.batch_size, self.rng, self.device)
        target = double_dqn_targets(self.q_net, self.target_net, batch)
        q = self.q_net(batch["obs"]).gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        common.check_loss(self.global_step, loss, {"losses/td_loss": loss})
        self.optimizer.zero_grad()
        loss.backward()
        self._apply_gradients(self.max_grad_norm)   # a non-finite gradient: skipped, counted in the next log
        self.updates += 1
        return {"losses/td_loss": loss.item(), "losses/q_values": q.mean().item()}

    def _on_reset(self, obs: dict[str, np.ndarray], infos: dict) -> None:
        self._next_obs = obs
        self.nstep.clear()

    def _on_learn_start(self) -> None:
        self._next_log = (self.global_step // self.log_interval + 1) * self.log_interval
        self._train_metrics = {}

    def _iteration(self, total_steps: int) -> None:
        """``chunk_steps`` ε-greedy steps per env, their rewards into the n-step replay, the gradient steps the
        chunk crossed, the target copy when due; metrics logged every ``log_interval`` env steps."""
        N, K = self.num_envs, self.chunk_steps
        chunk_start = self.global_step
        obs_steps, next_obs_steps, infos_steps = [], [], []
        actions, rewards, terms, truncs = [], [], [], []
        for _ in range(K):
            if self.global_step >= total_steps:
                break
            goal = self._current_goal()
            obs = self._with_goal(self._next_obs, goal)
            action = self.act(obs, epsilon=self.epsilon())
            next_obs, reward, terminated, truncated, infos = self.envs.step(action)
            done = np.logical_or(terminated, truncated)
            env_infos = split_infos(infos, N)
            obs_steps.append(obs)
            next_obs_steps.append(self._with_goal(true_next_obs(next_obs, infos, done), goal))
            terminated = np.asarray(terminated, dtype=bool)
            truncated = np.logical_and(truncated, np.logical_not(terminated))
            infos_steps.append(env_infos)
            actions.append(action)
            rewards.append(np.asarray(reward, dtype=np.float32))
            terms.append(np.asarray(terminated, dtype=bool))
            truncs.append(np.asarray(truncated, dtype=bool))
            self.global_step += N
            self._record_episodes(reward, done, env_infos)
            step = StepTransition(obs=obs, actions=action, next_obs=next_obs_steps[-1], rewards=rewards[-1],
                                  terminated=terms[-1], truncated=truncs[-1], infos=env_infos,
                                  step=self.global_step)
            for _, module in self.reward_modules:
                module.watch(step)
            self._next_obs = next_obs
            if not self._on_step(step):
                break

        ext = np.stack(rewards)
        batch = TransitionBatch(obs=stack_obs(obs_steps), actions=np.stack(actions),
                                next_obs=stack_obs(next_obs_steps), rewards=ext, terminated=np.stack(terms),
                                truncated=np.stack(truncs), infos=infos_steps)
        total, int_rewards, metrics = self._mix_rewards(batch)
        for t in range(len(obs_steps)):
            for i in range(N):
                for tr in self.nstep.push(i, {k: v[i] for k, v in obs_steps[t].items()}, actions[t][i],
                                          total[t, i], {k: v[i] for k, v in next_obs_steps[t].items()},
                                          bool(terms[t][i]), bool(truncs[t][i])):
                    self.replay.add(tr)

        # one update per train_every env steps crossed in this chunk (after learning_starts)
        n_updates = self.global_step // self.train_every - chunk_start // self.train_every
        if self.global_step >= self.learning_starts and self.replay.size >= self.batch_size:
            for _ in range(n_updates):
                self._train_metrics = self.train_step()
            common.check_parameters(self.global_step, self.q_net)
        if crossed(self.global_step, chunk_start, self.target_update_every):
            self.target_net.load_state_dict(self.q_net.state_dict())

        log = self.global_step >= self._next_log or self.global_step >= total_steps
        if log:
            self._next_log = (self.global_step // self.log_interval + 1) * self.log_interval
            metrics.update({**self._train_metrics, **self._skipped_metrics()})
            metrics.update({"charts/epsilon": self.epsilon(), "charts/sps": self._sps(),
                            "charts/extrinsic_reward": float(ext.mean()),
                            "charts/intrinsic_reward": float(int_rewards.mean()),
                            "charts/replay_size": self.replay.size})
        self._end_iteration(metrics, self.global_step - chunk_start, log=log)

    # --- checkpoints ----------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any]:
        """Both networks, and the replay if ``checkpoint_replay`` (without it, learning waits for it to refill)."""
        state: dict[str, Any] = {"q_net": self.q_net.state_dict(), "target_net": self.target_net.state_dict()}
        if self.checkpoint_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def _load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.q_net.load_state_dict(state["q_net"])
        self.target_net.load_state_dict(state["target_net"])
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
