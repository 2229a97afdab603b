"""GLAM (Carta et al. 2023): a language model *is* the policy, fine-tuned online with PPO.

The policy (prompt, scored action strings, heads, LoRA) is :mod:`llmguide.methods.glam.policy`; this
module trains it: :class:`GLAMPPO` (clipped surrogate, normalised advantages, a reward scale),
behavioural cloning on demonstrations, and evaluation episodes.

Conventions as in :mod:`llmguide.learners.ppo`: ``dones[t]`` = transition ``t`` ended its episode,
SAME_STEP autoreset; a truncated (time-limit) transition is bootstrapped with the value of the prompt its
final observation would have given (as SB3), a terminated one is not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from llmguide.core.config import cfg_get
from llmguide.core.progress import Progress
from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners.callbacks import Callback, as_callback
from llmguide.learners.common import EpisodeTracker, rng_state, set_rng_state
from llmguide.learners.ppo import compute_gae
from llmguide.methods.glam.policy import History, LMPolicy
from llmguide.rewards.base import StepTransition

log = logging.getLogger(__name__)

# --- PPO -----------------------------------------------------------------------------------------
class GLAMPPO:
    """PPO for an :class:`LMPolicy` on a vector env whose infos carry ``caption`` and ``mission``.

    ``cfg`` keys (``conf/agent/glam.yaml``): rollout_steps, epochs, minibatch, micro_batch, lr, gamma, gae_lambda,
    clip_coef, vf_coef, ent_coef, max_grad_norm, norm_adv, reward_scale, k_history.
    """

    def __init__(self, envs, policy: LMPolicy, cfg: Any, run: RunDir | None = None, seed: int = 0):
        self.envs, self.policy, self.run, self.seed = envs, policy, run, seed
        self.num_envs = envs.num_envs
        self.num_steps = int(cfg_get(cfg, "rollout_steps", 16))
        self.epochs = int(cfg_get(cfg, "epochs", 2))
        self.minibatch = int(cfg_get(cfg, "minibatch", 4))
        self.micro_batch = int(cfg_get(cfg, "micro_batch", 0) or 0)   # prompts per forward (0: the whole minibatch)
        self.gamma = float(cfg_get(cfg, "gamma", 0.99))
        self.gae_lambda = float(cfg_get(cfg, "gae_lambda", 0.95))
        self.clip_coef = float(cfg_get(cfg, "clip_coef", 0.2))
        self.vf_coef = float(cfg_get(cfg, "vf_coef", 0.5))
        self.ent_coef = float(cfg_get(cfg, "ent_coef", 0.01))
        self.max_grad_norm = float(cfg_get(cfg, "max_grad_norm", 0.5))
        self.norm_adv = bool(cfg_get(cfg, "norm_adv", True))
        self.reward_scale = float(cfg_get(cfg, "reward_scale", 20.0))
        self.k_history = int(cfg_get(cfg, "k_history", 3))
        self.device_check = bool(cfg_get(cfg, "device_check", True))
        self._device_checked = False
        params = [p for p in policy.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters (HFLM needs trainable=True or LoRA)")
        self.optimizer = torch.optim.Adam(params, lr=float(cfg_get(cfg, "lr", 1e-4)), eps=1e-5)
        self.rng = np.random.default_rng(seed)
        self.global_step = 0
        self.updates = 0
        self.last_metrics: dict[str, float] = {}
        self._history: History | None = None

    # --- rollout helpers -------------------------------------------------------------------------
    def _reset(self) -> None:
        _, infos = self.envs.reset(seed=self.seed + self.global_step)
        self._history = History(self.num_envs, self.k_history)
        for i, info in enumerate(split_infos(infos, self.num_envs)):
            self._history.reset(i, info["mission"], info["caption"])

    @torch.no_grad()
    def _final_values(self, envs: np.ndarray, actions: np.ndarray, env_infos: Sequence[dict]) -> np.ndarray:
        """V of the prompts that the final observations of truncated episodes would have given."""
        assert self._history is not None
        prompts = [self._history.peek(int(i), self.policy.action_strings[int(actions[i])],
                                      str(env_infos[i].get("caption", "")), self.policy.action_strings)
                   for i in envs]
        return self.policy(prompts)[1].float().cpu().numpy()

    def _advance(self, actions: np.ndarray, dones: np.ndarray, infos: dict) -> None:
        """Update each env's history; a finished env's new episode starts from its reset info."""
        assert self._history is not None
        for i in range(self.num_envs):
            if dones[i]:  # SAME_STEP autoreset: the top-level info is already the reset one
                self._history.reset(i, str(infos["mission"][i]), str(infos["caption"][i]))
            else:
                self._history.step(i, self.policy.action_strings[int(actions[i])], str(infos["caption"][i]))

    def ppo_update(self, prompts: Sequence[str], actions: np.ndarray, logprobs: np.ndarray,
                   advantages: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        """Clipped-objective epochs over minibatches of prompts; returns loss metrics."""
        n, dev = len(prompts), self.policy.lm.device
        b_actions = torch.as_tensor(actions, dtype=torch.long, device=dev)
        b_logprobs = torch.as_tensor(logprobs, dtype=torch.float32, device=dev)
        b_adv = torch.as_tensor(advantages, dtype=torch.float32, device=dev)
        b_ret = torch.as_tensor(returns, dtype=torch.float32, device=dev)
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl",
                                                         "clipfrac")}
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for _ in range(self.epochs):
            order = self.rng.permutation(n)
            for start in range(0, n, self.minibatch):
                rows = torch.as_tensor(order[start:start + self.minibatch])
                mb_adv = b_adv[rows.to(dev)]
                if self.norm_adv and len(rows) > 1:   # over the whole minibatch, not each forward's share
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                self.optimizer.zero_grad()
                step = self.micro_batch or len(rows)
                for lo in range(0, len(rows), step):   # gradient accumulation: one optimizer step per minibatch
                    part = rows[lo:lo + step]
                    losses = self._losses([prompts[int(r)] for r in part], part, mb_adv[lo:lo + step], b_actions,
                                          b_logprobs, b_ret)
                    (losses["loss"] * (len(part) / len(rows))).backward()
                    for k in stats:
                        stats[k].append(losses[k].item())
                nn.utils.clip_grad_norm_(params, self.max_grad_norm)
                self.optimizer.step()
        return {f"losses/{k}": float(np.mean(v)) for k, v in stats.items() if v}

    def _losses(self, prompts: Sequence[str], rows: torch.Tensor, mb_adv: torch.Tensor, b_actions: torch.Tensor,
                b_logprobs: torch.Tensor, b_ret: torch.Tensor) -> dict[str, torch.Tensor]:
        """PPO's clipped loss of one forward over ``prompts`` (the batch rows ``rows``), and its statistics."""
        logp_all, value = self.policy(prompts)
        rows = rows.to(logp_all.device)
        newlogp = logp_all.gather(1, b_actions[rows][:, None]).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        logratio = newlogp - b_logprobs[rows]
        ratio = logratio.exp()
        pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - self.clip_coef, 1 + self.clip_coef)).mean()
        v_loss = 0.5 * ((value - b_ret[rows]) ** 2).mean()
        with torch.no_grad():
            kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1).abs() > self.clip_coef).float().mean()
        return {"loss": pg_loss - self.ent_coef * entropy.mean() + self.vf_coef * v_loss, "policy_loss": pg_loss,
                "value_loss": v_loss, "entropy": entropy.mean(), "approx_kl": kl, "clipfrac": clipfrac}

    def check_device(self) -> None:
        """Once per run, before the first rollout, off a float32 CPU: the first prompts' action distributions match a
        float32 CPU copy (:func:`~llmguide.methods.glam.device.parity_error`), else a config error."""
        from llmguide.core.errors import ConfigError
        from llmguide.methods.glam.device import parity_error

        self._device_checked = True
        lm = self.policy.lm
        if lm.device.type == "cpu" and next(lm.model.parameters()).dtype == torch.float32:
            return
        if self._history is None:
            self._reset()
        assert self._history is not None
        reason = parity_error(self.policy, self._history.prompts(self.policy.action_strings)[:4])
        if reason is not None:
            raise ConfigError("llm.dtype", f"{reason}; use llm.dtype=float32, or agent.device_check=false to train "
                                           "anyway")

    # --- training --------------------------------------------------------------------------------
    def learn(self, total_steps: int, callback: Callback | Sequence[Callback] | None = None,
              progress: bool = True) -> GLAMPPO:
        """Train until ``global_step >= total_steps`` (callbacks as in :mod:`llmguide.learners.callbacks`)."""
        callback = as_callback(callback)
        callback.init(self)
        callback.on_training_start()
        N, T = self.num_envs, self.num_steps
        if self._history is None:
            self._reset()
        assert self._history is not None
        if self.device_check and not self._device_checked:
            self.check_device()
        tracker = EpisodeTracker(N)
        bar = Progress(total=total_steps, initial=self.global_step, disable=not progress, desc="glam")
        start_time, start_step = time.perf_counter(), self.global_step
        while self.global_step < total_steps:
            prompts: list[list[str]] = []
            actions = np.zeros((T, N), dtype=np.int64)
            logprobs = np.zeros((T, N), dtype=np.float32)
            values = np.zeros((T, N), dtype=np.float32)
            rewards = np.zeros((T, N), dtype=np.float32)
            dones = np.zeros((T, N), dtype=bool)
            bootstrap = np.zeros((T, N), dtype=np.float32)
            for t in range(T):
                prompts.append(self._history.prompts(self.policy.action_strings))
                actions[t], logprobs[t], values[t] = self.policy.act(prompts[t])
                _, reward, terminated, truncated, infos = self.envs.step(actions[t])
                dones[t] = np.logical_or(terminated, truncated)
                rewards[t] = reward
                self.global_step += N
                env_infos = split_infos(infos, N)
                cut = np.flatnonzero(np.logical_and(truncated, np.logical_not(terminated)))
                if cut.size:
                    bootstrap[t, cut] = self._final_values(cut, actions[t], env_infos)
                for record in tracker.step(np.asarray(reward, dtype=np.float64), dones[t], env_infos):
                    bar.episode(record["charts/episodic_return"], record["charts/episodic_length"])
                    if self.run is not None:
                        self.run.log(self.global_step, record)
                callback.on_step(StepTransition(obs=prompts[t], actions=actions[t], next_obs=None, rewards=rewards[t],
                                                terminated=np.asarray(terminated), truncated=np.asarray(truncated),
                                                infos=env_infos, step=self.global_step))
                self._advance(actions[t], dones[t], infos)
            with torch.no_grad():
                last_value = self.policy(self._history.prompts(self.policy.action_strings))[1].cpu().numpy()
            advantages, returns = compute_gae(self.reward_scale * rewards + self.gamma * bootstrap, values, dones,
                                              last_value,
                                              self.gamma, self.gae_lambda)
            flat_prompts = [p for row in prompts for p in row]
            metrics = self.ppo_update(flat_prompts, actions.reshape(-1), logprobs.reshape(-1),
                                      advantages.reshape(-1), returns.reshape(-1))
            self.updates += 1
            metrics.update({"charts/sps": (self.global_step - start_step) / max(time.perf_counter() - start_time, 1e-9),
                            "charts/extrinsic_reward": float(rewards.mean()),
                            "charts/value_mean": float(values.mean())})
            self.last_metrics = metrics
            if self.run is not None:
                self.run.log(self.global_step, metrics)
            bar.update(N * T, lm_stats=callback.progress_stats)
            callback.on_rollout_end(metrics)
        bar.close()
        callback.on_training_end()
        return self

    # --- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Trainable parameters (LoRA or full LM, value head), optimiser, counters and RNG states."""
        return {"algo": "glam", "policy": self.policy.trainable_state(), "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step, "updates": self.updates, "rng": rng_state(),
                "agent_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the envs restart (fresh histories) on the next ``learn``."""
        if state.get("algo") != "glam":
            raise ValueError(f"checkpoint is for agent '{state.get('algo')}', not 'glam'")
        self.policy.load_trainable_state(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.global_step = int(state["global_step"])
        self.updates = int(state["updates"])
        set_rng_state(state["rng"])
        self.rng.bit_generator.state = state["agent_rng"]
        self._history = None


def demonstration_samples(episodes: Sequence[dict[str, Any]], action_strings: Sequence[str],
                          k_history: int = 3) -> tuple[list[str], list[int]]:
    """(prompt, action index) pairs from :func:`bot_demonstrations` episodes, with GLAM's prompt history."""
    prompts, actions = [], []
    for ep in episodes:
        history = History(1, k_history)
        for t, (caption, action) in enumerate(zip(ep["captions"], ep["actions"], strict=True)):
            if t == 0:
                history.reset(0, ep["mission"], caption)
            else:
                history.step(0, action_strings[ep["actions"][t - 1]], caption)
            prompts.append(history.prompts(action_strings)[0])
            actions.append(int(action))
    return prompts, actions


def behaviour_clone(policy: LMPolicy, prompts: Sequence[str], actions: Sequence[int], epochs: int = 1,
                    minibatch: int = 4, lr: float = 1e-4, seed: int = 0) -> list[float]:
    """Fit the LM policy to demonstrated actions (cross-entropy of the action softmax); losses per step."""
    if len(prompts) != len(actions) or not prompts:
        raise ValueError(f"need as many actions as prompts (>0), got {len(prompts)} and {len(actions)}")
    params = [p for n, p in policy.named_parameters() if p.requires_grad and not n.startswith("value_head")]
    optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5)
    rng = np.random.default_rng(seed)
    targets = torch.as_tensor(list(actions), dtype=torch.long, device=policy.lm.device)
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(prompts))
        for start in range(0, len(order), minibatch):
            rows = order[start:start + minibatch]
            logp, _ = policy([prompts[int(r)] for r in rows])
            loss = nn.functional.nll_loss(logp, targets[torch.as_tensor(rows, device=logp.device)])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def evaluate_policy(policy: Any, env_cfg: Any, episodes: int, seed: int, k_history: int = 3,
                    greedy: bool = True, rewrite: Callable[[str], str] | None = None) -> dict[str, float]:
    """Run ``episodes`` episodes one env at a time; success rate, mean return and length.

    ``policy``: anything with ``action_strings`` and ``act(prompts, greedy)`` (:class:`LMPolicy`, DRRN).
    ``rewrite`` maps each prompt before the policy reads it (the generalisation tests' word swaps).
    """
    from llmguide.envs import make_env

    env = make_env(env_cfg, seed)
    returns, lengths, successes = [], [], []
    try:
        for ep in range(episodes):
            _, info = env.reset(seed=seed + ep)
            history = History(1, k_history)
            history.reset(0, info["mission"], info["caption"])
            done, ret, length = False, 0.0, 0
            while not done:
                prompts = history.prompts(policy.action_strings)
                if rewrite is not None:
                    prompts = [rewrite(p) for p in prompts]
                action = int(policy.act(prompts, greedy=greedy)[0][0])
                _, reward, terminated, truncated, info = env.step(action)
                ret, length, done = ret + float(reward), length + 1, bool(terminated or truncated)
                history.step(0, policy.action_strings[action], info["caption"])
            returns.append(ret)
            lengths.append(length)
            successes.append(float(bool(info.get("success", ret > 0))))
    finally:
        env.close()
    if not episodes:
        return {"episodes": 0}
    return {"episodes": episodes, "success_rate": float(np.mean(successes)), "return_mean": float(np.mean(returns)),
            "length_mean": float(np.mean(lengths))}
