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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from llmguide.core.config import cfg_get
from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners.common import agent_config
from llmguide.learners.on_policy import OnPolicyLearner, clipped_loss, compute_gae
from llmguide.methods.glam.policy import History, LMPolicy
from llmguide.rewards.base import StepTransition

log = logging.getLogger(__name__)

# --- PPO -----------------------------------------------------------------------------------------
class GLAMPPO(OnPolicyLearner):
    """PPO for an :class:`LMPolicy` on a vector env whose infos carry ``caption`` and ``mission``.

    ``cfg`` keys (``methods/glam/conf/agent/glam.yaml``, its defaults): the on-policy vocabulary (num_steps, update_epochs,
    num_minibatches, gamma, gae_lambda, clip_coef, vf_coef, ent_coef, max_grad_norm, norm_adv:
    :mod:`llmguide.learners.on_policy`), micro_batch, lr, reward_scale, k_history, device_check.
    """

    algo = "glam"

    def __init__(self, envs, policy: LMPolicy, cfg: Any, run: RunDir | None = None, seed: int = 0):
        super().__init__(envs, run=run, seed=seed)
        self.policy = policy
        cfg = agent_config(cfg, "glam")   # methods/glam/conf/agent/glam.yaml: the defaults
        self._read_settings(cfg)   # num_steps, update_epochs, num_minibatches, gamma, ... (old names: deprecated)
        self.micro_batch = int(cfg.micro_batch)   # prompts per forward (0: the whole minibatch)
        self.reward_scale = float(cfg.reward_scale)
        # a method setting (conf/method/glam.yaml: the recipe puts it here), not agent/glam.yaml's: left at 3 when
        # GLAMPPO is built directly
        self.k_history = int(cfg_get(cfg, "k_history", 3))
        self.device_check = bool(cfg.device_check)
        self._device_checked = False
        params = [p for p in policy.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters (HFLM needs trainable=True or LoRA)")
        self.optimizer = torch.optim.Adam(params, lr=float(cfg.lr), eps=1e-5)
        self._history = History(self.num_envs, self.k_history)

    # --- rollout helpers -------------------------------------------------------------------------
    def _on_reset(self, obs: Any, infos: dict) -> None:
        """Fresh histories from the reset infos (mission and first caption)."""
        self._history = History(self.num_envs, self.k_history)
        for i, info in enumerate(split_infos(infos, self.num_envs)):
            self._history.reset(i, info["mission"], info["caption"])

    @torch.no_grad()
    def _final_values(self, envs: np.ndarray, actions: np.ndarray, env_infos: Sequence[dict]) -> np.ndarray:
        """V of the prompts that the final observations of truncated episodes would have given."""
        prompts = [self._history.peek(int(i), self.policy.action_strings[int(actions[i])],
                                      str(env_infos[i].get("caption", "")), self.policy.action_strings)
                   for i in envs]
        return self.policy(prompts)[1].float().cpu().numpy()

    def _advance(self, actions: np.ndarray, dones: np.ndarray, infos: dict) -> None:
        """Update each env's history; a finished env's new episode starts from its reset info."""
        for i in range(self.num_envs):
            if dones[i]:  # SAME_STEP autoreset: the top-level info is already the reset one
                self._history.reset(i, str(infos["mission"][i]), str(infos["caption"][i]))
            else:
                self._history.step(i, self.policy.action_strings[int(actions[i])], str(infos["caption"][i]))

    def ppo_update(self, prompts: Sequence[str], actions: np.ndarray, logprobs: np.ndarray,
                   advantages: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        """Clipped-objective epochs over minibatches of prompts; returns loss metrics. A minibatch whose gradient is
        not finite is not applied: it is counted (``losses/skipped_minibatches``) and warned with its largest
        |log ratio|, and its losses are left out of the means."""
        n, dev = len(prompts), self.policy.lm.device
        b_actions = torch.as_tensor(actions, dtype=torch.long, device=dev)
        b_logprobs = torch.as_tensor(logprobs, dtype=torch.float32, device=dev)
        b_adv = torch.as_tensor(advantages, dtype=torch.float32, device=dev)
        b_ret = torch.as_tensor(returns, dtype=torch.float32, device=dev)
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl",
                                                         "clipfrac")}
        per_mb = self.minibatch_size or max(1, n // self.num_minibatches)
        skipped: list[dict[str, float]] = []
        for _ in range(self.update_epochs):
            order = self.rng.permutation(n)
            for ids in self._minibatches(order, per_mb):
                rows = torch.as_tensor(ids)
                mb_adv = self._normalized(b_adv[rows.to(dev)])   # over the whole minibatch, not each forward's share
                self.optimizer.zero_grad()
                step = self.micro_batch or len(rows)
                mb_stats: dict[str, list[float]] = {k: [] for k in (*stats, "max_abs_logratio")}
                for lo in range(0, len(rows), step):   # gradient accumulation: one optimizer step per minibatch
                    part = rows[lo:lo + step]
                    losses = self._losses([prompts[int(r)] for r in part], part, mb_adv[lo:lo + step], b_actions,
                                          b_logprobs, b_ret)
                    (losses["loss"] * (len(part) / len(rows))).backward()
                    for k in mb_stats:
                        mb_stats[k].append(losses[k].item())
                if not self._apply_gradients(self.max_grad_norm):
                    skipped.append({k: float(np.max(v)) for k, v in mb_stats.items()})
                    continue
                for k in stats:
                    stats[k].extend(mb_stats[k])
        first = f" (first: {', '.join(f'{k} {v:.3g}' for k, v in skipped[0].items())})" if skipped else ""
        return {**{f"losses/{k}": float(np.mean(v)) for k, v in stats.items() if v}, **self._skipped_metrics(first)}

    def _losses(self, prompts: Sequence[str], rows: torch.Tensor, mb_adv: torch.Tensor, b_actions: torch.Tensor,
                b_logprobs: torch.Tensor, b_ret: torch.Tensor) -> dict[str, torch.Tensor]:
        """PPO's clipped loss of one forward over ``prompts`` (the batch rows ``rows``), and its statistics."""
        logp_all, value = self.policy(prompts)
        rows = rows.to(logp_all.device)
        newlogp = logp_all.gather(1, b_actions[rows][:, None]).squeeze(1)
        entropy = torch.distributions.Categorical(logits=logp_all).entropy()   # 0 * log 0 = 0, not NaN
        return clipped_loss(newlogp, b_logprobs[rows], mb_adv, entropy, value, b_ret[rows], self.clip_coef,
                            self.ent_coef, self.vf_coef)

    def check_device(self) -> None:
        """Once per run, before the first rollout, off a float32 CPU: the first prompts' action distributions match a
        float32 CPU copy (:func:`~llmguide.methods.glam.device.parity_error`), else a config error."""
        from llmguide.core.errors import ConfigError
        from llmguide.methods.glam.device import parity_error

        self._device_checked = True
        lm = self.policy.lm
        if lm.device.type == "cpu" and next(lm.model.parameters()).dtype == torch.float32:
            return
        if not self.envs_ready:
            self.reset_envs()
        reason = parity_error(self.policy, self._history.prompts(self.policy.action_strings)[:4])
        if reason is not None:
            raise ConfigError("llm.dtype", f"{reason}; use llm.dtype=float32, or agent.device_check=false to train "
                                           "anyway")

    # --- training --------------------------------------------------------------------------------
    def _on_learn_start(self) -> None:
        if self.device_check and not self._device_checked:
            self.check_device()

    def _iteration(self, total_steps: int) -> None:
        """One rollout of ``num_steps`` prompts per env, GAE on the scaled rewards, then the clipped update."""
        N, T = self.num_envs, self.num_steps
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
            self._record_episodes(reward, dones[t], env_infos)
            self._on_step(StepTransition(obs=prompts[t], actions=actions[t], next_obs=None, rewards=rewards[t],
                                         terminated=np.asarray(terminated), truncated=np.asarray(truncated),
                                         infos=env_infos, step=self.global_step))
            self._advance(actions[t], dones[t], infos)
        with torch.no_grad():
            last_value = self.policy(self._history.prompts(self.policy.action_strings))[1].cpu().numpy()
        advantages, returns = compute_gae(self.reward_scale * rewards + self.gamma * bootstrap, values, dones,
                                          last_value, self.gamma, self.gae_lambda)
        flat_prompts = [p for row in prompts for p in row]
        metrics = self.ppo_update(flat_prompts, actions.reshape(-1), logprobs.reshape(-1),
                                  advantages.reshape(-1), returns.reshape(-1))
        metrics.update({"charts/extrinsic_reward": float(rewards.mean()), "charts/value_mean": float(values.mean())})
        self._end_rollout(metrics, N * T)

    # --- checkpoints -----------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any]:
        """The trainable parameters (LoRA or the full LM, the value head)."""
        return {"policy": self.policy.trainable_state()}

    def _load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.policy.load_trainable_state(state["policy"])


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
