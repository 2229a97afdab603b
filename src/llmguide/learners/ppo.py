"""PPO in plain PyTorch, CleanRL-faithful and readable top to bottom.

One ``learn`` iteration = collect ``num_steps`` steps from ``N`` vector envs → add intrinsic
rewards from the reward modules (computed on the whole rollout, then the modules train on it) →
GAE → ``update_epochs`` × ``num_minibatches`` clipped-objective updates.

Conventions: ``dones[t]`` is True when transition ``t`` ended its episode (terminated or
truncated). Vector envs use SAME_STEP autoreset, so the observation after a done is already the
next episode's first one and the finished transition's true next observation is
``info["final_obs"]`` (used for the reward modules). A truncated (time-limit) transition is
bootstrapped as in SB3: its reward gets ``gamma * V(final_obs)``, so a time limit is not treated as
a terminal state; a terminated one is not.

A non-finite loss or parameter stops training (:class:`~llmguide.learners.common.NonFiniteError`, naming the
step and the loss) before it reaches a checkpoint.

Per step the reward modules ``watch`` the transition and the callbacks see ``on_step``; after each
update the callbacks see ``on_rollout_end`` (checkpoints, evaluation, LM statistics: see
:mod:`llmguide.learners.callbacks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from llmguide.core.rundir import RunDir
from llmguide.envs.vector import split_infos
from llmguide.learners.base import use_torch_threads
from llmguide.learners.common import agent_config, check_loss, check_parameters, stack_obs, true_next_obs
from llmguide.learners.networks import ActorCritic, obs_to_tensor
from llmguide.learners.on_policy import OnPolicyLearner, clipped_loss, compute_gae
from llmguide.rewards.base import RewardModule, StepTransition, TransitionBatch


class PPO(OnPolicyLearner):
    """Proximal Policy Optimisation on a Gymnasium vector env with Dict observations."""

    algo = "ppo"

    def __init__(self, envs, cfg_agent: Any, reward_modules: Sequence[tuple[float, RewardModule]] = (),
                 extrinsic_coef: float = 1.0, run: RunDir | None = None, seed: int = 0,
                 device: str = "cpu"):
        if not isinstance(envs.single_action_space, spaces.Discrete):
            raise TypeError(f"PPO needs a Discrete action space, got {envs.single_action_space}")
        super().__init__(envs, run=run, seed=seed, reward_modules=reward_modules, extrinsic_coef=extrinsic_coef)
        self.cfg = cfg_agent
        self.device = torch.device(device)

        settings = agent_config(cfg_agent, "ppo")   # conf/agent/ppo.yaml: the defaults
        self._read_settings(settings)   # num_steps, update_epochs, num_minibatches, gamma, ... (on_policy.py)
        self.lr = float(settings.lr)
        self.anneal_lr = bool(settings.anneal_lr)
        self.clip_vloss = bool(settings.clip_vloss)
        self.target_kl = settings.target_kl
        # an extra loss term on each minibatch's observations, e.g. PTGM's KL to a prior (kl.mode=loss)
        self.policy_penalty: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None
        self.two_value_heads = bool(settings.two_value_heads)
        self.int_gamma = float(settings.int_gamma)
        self.int_episodic = bool(settings.int_episodic)
        use_torch_threads(int(settings.torch_threads))

        torch.manual_seed(self.seed)
        self.net = ActorCritic(envs.single_observation_space, int(envs.single_action_space.n),
                               hidden=int(settings.hidden), recurrent=settings.recurrent,
                               two_value_heads=self.two_value_heads,
                               image_encoder=str(settings.image_encoder)).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.lr, eps=float(settings.adam_eps))
        self._next_obs: dict[str, np.ndarray] = {}
        self._act_state = None

    # --- acting ---------------------------------------------------------------------------
    def reset_act_state(self) -> None:
        """Forget the recurrent memory used by :meth:`act` (call at episode start)."""
        self._act_state = None

    @torch.no_grad()
    def act(self, obs: dict[str, np.ndarray], greedy: bool = False, done: np.ndarray | None = None) -> np.ndarray:
        """Actions for a batch of observations (sampled, or argmax with ``greedy``).

        For a recurrent core the memory is kept between calls; ``done`` marks rows whose
        episode restarts at this observation.
        """
        x = obs_to_tensor(obs, self.device)
        batch = next(iter(x.values())).shape[0]
        if self.net.recurrent and (self._act_state is None or self._act_state[0].shape[1] != batch):
            self._act_state = self.net.initial_state(batch, self.device)
        d = torch.as_tensor(done if done is not None else np.zeros(batch), dtype=torch.float32)
        action, _, _, _, self._act_state = self.net.get_action_and_value(x, self._act_state, d, greedy=greedy)
        return action.cpu().numpy()

    # --- training -------------------------------------------------------------------------
    def _on_reset(self, obs: dict[str, np.ndarray], infos: dict) -> None:
        """Rollout state after an env reset: no env done, the core's initial (recurrent) state."""
        self._next_obs = obs
        self._next_done = np.zeros(self.num_envs, dtype=bool)
        self._state = self.net.initial_state(self.num_envs, self.device)

    def _iteration(self, total_steps: int) -> None:
        """One rollout of ``num_steps`` steps per env, its rewards and advantages, then the clipped update."""
        N, T = self.num_envs, self.num_steps
        envs, net, dev = self.envs, self.net, self.device
        heads = net.n_value_heads
        if self.anneal_lr:
            frac = max(1.0 - self.global_step / total_steps, 0.0)
            self.optimizer.param_groups[0]["lr"] = frac * self.lr

        # ---- rollout ----
        initial_state = tuple(s.clone() for s in self._state) if self._state is not None else None
        first_done = self._next_done.copy()
        obs_steps, next_obs_steps, infos_steps = [], [], []
        actions = np.zeros((T, N), dtype=np.int64)
        logprobs = np.zeros((T, N), dtype=np.float32)
        values = np.zeros((T, N, heads), dtype=np.float32)
        ext_rewards = np.zeros((T, N), dtype=np.float32)
        terms = np.zeros((T, N), dtype=bool)
        truncs = np.zeros((T, N), dtype=bool)
        bootstrap = np.zeros((T, N, heads), dtype=np.float32)  # V(final_obs) of truncated transitions
        for t in range(T):
            obs_steps.append(self._next_obs)
            with torch.no_grad():
                x = obs_to_tensor(self._next_obs, dev)
                done_t = torch.as_tensor(self._next_done, dtype=torch.float32, device=dev)
                action, logprob, _, value, self._state = net.get_action_and_value(x, self._state, done_t)
            actions[t] = action.cpu().numpy()
            logprobs[t] = logprob.cpu().numpy()
            values[t] = value.cpu().numpy()
            next_obs, reward, terminated, truncated, infos = envs.step(actions[t])
            terms[t], truncs[t] = terminated, np.logical_and(truncated, np.logical_not(terminated))
            done = np.logical_or(terminated, truncated)
            env_infos = split_infos(infos, N)
            ext_rewards[t] = reward
            infos_steps.append(env_infos)
            real_next = true_next_obs(next_obs, infos, done)
            next_obs_steps.append(real_next)
            if truncs[t].any():
                bootstrap[t] = self._truncation_values(real_next, truncs[t])
            self.global_step += N
            self._record_episodes(reward, done, env_infos)
            step = StepTransition(obs=obs_steps[-1], actions=actions[t], next_obs=real_next,
                                  rewards=ext_rewards[t], terminated=terms[t], truncated=truncs[t],
                                  infos=env_infos, step=self.global_step)
            for _, module in self.reward_modules:
                module.watch(step)
            self._on_step(step)
            self._next_obs, self._next_done = next_obs, done
        dones = np.logical_or(terms, truncs)

        # ---- rewards: extrinsic + intrinsic modules (computed on the whole rollout) ----
        batch = TransitionBatch(obs=stack_obs(obs_steps), actions=actions, next_obs=stack_obs(next_obs_steps),
                                rewards=ext_rewards, terminated=terms, truncated=truncs, infos=infos_steps)
        mixed, int_rewards, metrics = self._mix_rewards(batch)

        # ---- advantages ----
        with torch.no_grad():
            last_value = net.get_value(obs_to_tensor(self._next_obs, dev), self._state,
                                       torch.as_tensor(self._next_done, dtype=torch.float32, device=dev))
            last_value = last_value.cpu().numpy()
        if self.two_value_heads:
            adv_ext, ret_ext = compute_gae(self.extrinsic_coef * ext_rewards + self.gamma * bootstrap[..., 0],
                                           values[..., 0], dones, last_value[:, 0], self.gamma, self.gae_lambda)
            int_dones = dones if self.int_episodic else np.zeros_like(dones)
            int_boot = self.int_gamma * bootstrap[..., 1] if self.int_episodic else 0.0
            adv_int, ret_int = compute_gae(int_rewards + int_boot, values[..., 1], int_dones, last_value[:, 1],
                                           self.int_gamma, self.gae_lambda)
            advantages = adv_ext + adv_int
            returns = np.stack([ret_ext, ret_int], axis=-1)
        else:
            advantages, ret = compute_gae(mixed + self.gamma * bootstrap[..., 0], values[..., 0], dones,
                                          last_value[:, 0], self.gamma, self.gae_lambda)
            returns = ret[..., None]

        # ---- update ----
        starts = np.concatenate([first_done[None], dones[:-1]], axis=0)  # obs t begins an episode
        metrics.update(self._update(batch.obs, actions, logprobs, values, advantages, returns,
                                    starts, initial_state))
        metrics.update({"charts/extrinsic_reward": float(ext_rewards.mean()),
                        "charts/intrinsic_reward": float(int_rewards.mean())})
        metrics["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self._end_rollout(metrics, N * T)

    @torch.no_grad()
    def _truncation_values(self, next_obs: dict[str, np.ndarray], truncated: np.ndarray) -> np.ndarray:
        """V(final_obs) per value head for the truncated envs (0 elsewhere); the recurrent core uses the
        memory after the last action, as the episode would have continued."""
        x = obs_to_tensor(next_obs, self.device)
        d = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        value = self.net.get_value(x, self._state, d).cpu().numpy().reshape(self.num_envs, -1)
        return np.where(truncated[:, None], value, 0.0).astype(np.float32)

    def _update(self, obs: dict[str, np.ndarray], actions, logprobs, values, advantages, returns,
                starts, initial_state) -> dict[str, float]:
        """Clipped-objective epochs over minibatches (by env for a recurrent core)."""
        T, N = actions.shape
        dev, net = self.device, self.net
        flat = lambda a: torch.as_tensor(a.reshape(T * N, *a.shape[2:]), device=dev)  # noqa: E731
        b_obs = {k: flat(v) for k, v in obs.items()}
        b_actions, b_logprobs, b_values = flat(actions), flat(logprobs), flat(values)
        b_advantages, b_returns, b_starts = flat(advantages), flat(returns), flat(starts.astype(np.float32))
        recurrent = net.recurrent is not None
        n_mb = max(1, min(self.num_minibatches, N)) if recurrent else self.num_minibatches
        units = N if recurrent else T * N
        per_mb = max(1, units // n_mb)
        clipfracs: list[float] = []
        zero = torch.tensor(0.0)   # the metrics of no minibatch (update_epochs=0)
        last = dict.fromkeys(("policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl"), zero)
        penalty = zero
        for _ in range(self.update_epochs):
            order = self.rng.permutation(units)
            for ids in self._minibatches(order, per_mb):
                if recurrent:  # whole env sequences, time-major rows t*N + env
                    ids = np.sort(ids)
                    rows = (np.arange(T)[:, None] * N + ids[None, :]).reshape(-1)
                    state = tuple(s[:, ids] for s in initial_state)
                    mb_obs = {k: v[rows] for k, v in b_obs.items()}
                    _, newlogprob, entropy, newvalue, _ = net.get_action_and_value(
                        mb_obs, state, b_starts[rows], b_actions[rows])
                else:
                    rows = ids
                    mb_obs = {k: v[rows] for k, v in b_obs.items()}
                    _, newlogprob, entropy, newvalue, _ = net.get_action_and_value(mb_obs, action=b_actions[rows])
                last = clipped_loss(newlogprob, b_logprobs[rows], self._normalized(b_advantages[rows]), entropy,
                                    newvalue, b_returns[rows], self.clip_coef, self.ent_coef, self.vf_coef,
                                    old_values=b_values[rows] if self.clip_vloss else None)
                clipfracs.append(last["clipfrac"].item())
                loss = last["loss"]
                if self.policy_penalty is not None:
                    penalty = self.policy_penalty(mb_obs)
                    loss = loss + penalty
                check_loss(self.global_step, loss, {
                    "losses/policy_loss": last["policy_loss"], "losses/value_loss": last["value_loss"],
                    "losses/entropy": last["entropy"],
                    **({"losses/policy_penalty": penalty} if self.policy_penalty is not None else {})})
                self.optimizer.zero_grad()
                loss.backward()
                self._apply_gradients(self.max_grad_norm)
            if self.target_kl is not None and last["approx_kl"] > float(self.target_kl):
                break
        check_parameters(self.global_step, net)
        y_pred, y_true = values[..., 0].reshape(-1), returns[..., 0].reshape(-1)
        var_y = np.var(y_true)
        explained_var = float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)
        extra = {} if self.policy_penalty is None else {"losses/policy_penalty": penalty.item()}
        return {
            **extra, **{f"losses/{k}": last[k].item() for k in ("value_loss", "policy_loss", "entropy",
                                                                  "old_approx_kl", "approx_kl")},
            "losses/clipfrac": float(np.mean(clipfracs)) if clipfracs else 0.0,
            "losses/explained_variance": explained_var, **self._skipped_metrics(),
        }

    # --- checkpoints ----------------------------------------------------------------------
    def _checkpoint_state(self) -> dict[str, Any]:
        return {"net": self.net.state_dict()}

    def _load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
