"""PPO over asynchronous options (PTGM's high level on a batched env such as Craftax): an SMDP learner.

On an :class:`~llmguide.methods.ptgm.options.AsyncOptionsVectorEnv` the ``N`` envs step together but each runs
its own option, which ends after ``L`` env steps or when its episode ends, so the envs reach decision
points at different times.  :class:`AsyncOptionPPO` is :class:`~llmguide.learners.ppo.PPO` whose
rollout sees **only the envs at decision points**:

* at every env step the high-level policy acts for the deciding envs only (one batched pass over
  them); that decision — observation ``s_k``, code, log-prob, ``V(s_k)`` — is *pending* until its
  option ends;
* when env ``i``'s option ends, one SMDP transition is completed for env ``i``: reward ``R_k`` = the
  **sum** of the option's env rewards, duration ``τ_k``, done if its episode ended (a time-limit end
  adds ``γ_k·V(final_obs)`` to ``R_k`` and is not terminal, as in :class:`PPO`);
* a rollout collects at least ``num_steps × N`` finished options (about ``num_steps`` per env, i.e.
  ``num_steps × L`` env steps); every env then has a pending decision whose value bootstraps its last
  finished option, and that decision is carried into the next rollout (its option finishes there; its
  stored log-prob is the behaviour policy's, so the PPO ratio stays the true importance ratio);
* GAE runs along each env's own sequence of options with a discount per option:
  ``γ_k = γ`` (``option_discount="option"``: one high-level step, PTGM's high level and the BabyAI
  :class:`~llmguide.methods.ptgm.models.OptionPPO`) or ``γ_k = γ^{τ_k}`` (``"step"``: ``γ`` per env
  step, the SMDP discount of the option's duration); ``λ`` applies per option;
* the reward modules (the KL to the prior) see the finished options as a ``(M, 1)``
  :class:`~llmguide.rewards.base.TransitionBatch` (``obs`` = decision states, ``next_obs`` = the state
  each option led to), and PPO's clipped update runs on the ``M`` options unchanged.

``global_step`` counts env steps (``N`` per env step), so budgets and learning-rate annealing match flat
agents; training episodes are logged from the raw env steps as :class:`PPO` does.  Feed-forward only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from llmguide.envs.vector import split_infos
from llmguide.learners.networks import obs_to_tensor
from llmguide.learners.ppo import PPO
from llmguide.rewards.base import StepTransition, TransitionBatch

OPTION_DISCOUNTS = ("option", "step")


def smdp_gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, discounts: np.ndarray,
             last_value: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE along one env's sequence of options with a discount per transition; (advantages, returns).

    ``delta_k = R_k + γ_k·V(s_{k+1})·(1 − done_k) − V(s_k)``, ``A_k = delta_k + γ_k·λ·(1 − done_k)·A_{k+1}``,
    ``V(s_K) = last_value``.
    """
    K = len(rewards)
    adv = np.zeros(K, np.float32)
    gae = 0.0
    for k in reversed(range(K)):
        next_value = last_value if k == K - 1 else values[k + 1]
        nonterminal = 0.0 if dones[k] else 1.0
        delta = rewards[k] + discounts[k] * next_value * nonterminal - values[k]
        gae = delta + discounts[k] * lam * nonterminal * gae
        adv[k] = gae
    return adv, adv + np.asarray(values, np.float32)


class AsyncOptionPPO(PPO):
    """PPO over :class:`~llmguide.methods.ptgm.options.AsyncOptionsVectorEnv` options (see the module docstring)."""

    label = "ptgm-options"

    def __init__(self, envs, cfg_agent: Any, *, option_discount: str = "option", **kwargs: Any):
        super().__init__(envs, cfg_agent, **kwargs)
        if option_discount not in OPTION_DISCOUNTS:
            raise ValueError(f"option_discount must be one of {OPTION_DISCOUNTS}, got {option_discount!r}")
        if self.net.recurrent is not None or self.two_value_heads:
            raise ValueError("AsyncOptionPPO is feed-forward with one value head (agent.recurrent=null, "
                             "agent.two_value_heads=false)")
        self.option_discount = option_discount
        self._need: np.ndarray | None = None
        self._pending: dict[str, Any] = {}

    def _minibatches(self, order: np.ndarray, per_mb: int) -> list[np.ndarray]:
        """``num_minibatches`` near-equal minibatches of the ``M`` finished options.  ``M`` varies per rollout
        (at least ``num_steps × N``), so PPO's fixed-size slices would end with a remainder minibatch of a
        few options (1–3 with M = 257–259 and 4 minibatches), whose advantages are not normalised (one row)
        or normalised over 2–3 rows, yet get a full gradient step each epoch."""
        return np.array_split(order, min(self.num_minibatches, len(order)))

    def _on_reset(self, obs: dict[str, np.ndarray], infos: dict) -> None:
        """After an env reset every env is at a decision point, with nothing pending."""
        self._next_obs = obs
        self._need, self._pending = np.ones(self.num_envs, bool), {}

    # --- decisions ------------------------------------------------------------------------
    @torch.no_grad()
    def _decide(self) -> None:
        """A new option for every env at a decision point (its obs, code, log-prob and value kept pending)."""
        idx = np.flatnonzero(self._need)
        if not len(idx):
            return
        sub = {k: np.asarray(v)[idx] for k, v in self._next_obs.items()}
        action, logprob, _, value, _ = self.net.get_action_and_value(obs_to_tensor(sub, self.device))
        p = self._pending
        if not p:
            n = self.num_envs
            p["obs"] = {k: np.zeros((n, *np.asarray(v).shape[1:]), np.asarray(v).dtype)
                        for k, v in self._next_obs.items()}
            p["action"], p["logprob"], p["value"] = np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32)
        for k, v in sub.items():
            p["obs"][k][idx] = v
        p["action"][idx] = action.cpu().numpy()
        p["logprob"][idx] = logprob.cpu().numpy()
        p["value"][idx] = value[:, 0].cpu().numpy()
        self._need[idx] = False

    @torch.no_grad()
    def _values(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return self.net.get_value(obs_to_tensor(obs, self.device))[:, 0].cpu().numpy()

    # --- training ---------------------------------------------------------------------------
    def _iteration(self, total_steps: int) -> None:
        """One rollout of at least ``num_steps × N`` finished options, then PPO's update on them."""
        N, env = self.num_envs, self.envs
        target = max(1, self.num_steps * N)
        if self.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = max(1.0 - self.global_step / total_steps, 0.0) * self.lr
        seqs: list[list[dict[str, Any]]] = [[] for _ in range(N)]
        finished, env_steps = 0, 0
        while finished < target:
            self._decide()
            out = env.step(self._pending["action"])
            self.global_step += N
            env_steps += 1
            dones = out.terminated | out.truncated
            env_infos = split_infos(out.infos, N) if dones.any() else []
            self._record_episodes(out.rewards, dones, env_infos)
            ended = np.flatnonzero(out.ended)
            if len(ended):
                self._finish(seqs, out, ended, dones)
                finished += len(ended)
            self._need = out.ended.copy()
            self._next_obs = out.obs
            step = StepTransition(obs=None, actions=out.option, next_obs=None, rewards=np.asarray(out.rewards),
                                  terminated=out.terminated, truncated=out.truncated, infos=env_infos,
                                  step=self.global_step)
            self._on_step(step)
        self._decide()   # every env's next decision: its value bootstraps the env's last finished option
        metrics = self._train_on(seqs)
        metrics.update({"options/decisions": finished, "options/env_steps_per_rollout": env_steps})
        metrics["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self._end_rollout(metrics, N * env_steps)

    def _finish(self, seqs: list[list[dict[str, Any]]], out: Any, ended: np.ndarray, dones: np.ndarray) -> None:
        """One SMDP transition per env in ``ended`` (its pending decision + the option's outcome)."""
        p = self._pending
        trunc = out.truncated & ~out.terminated
        final = out.infos.get("final_obs") if dones.any() else None
        nxt: dict[int, dict[str, np.ndarray]] = {}
        for i in ended:
            if dones[i] and final is not None and final[i] is not None:
                nxt[int(i)] = {k: np.asarray(v) for k, v in final[i].items()}
            else:
                nxt[int(i)] = {k: np.asarray(v)[i] for k, v in out.obs.items()}
        boot = {}
        tr = [int(i) for i in ended if trunc[i]]
        if tr:   # a time limit is not a terminal state: bootstrap from V(final_obs), as PPO does
            v = self._values({k: np.stack([nxt[i][k] for i in tr]) for k in nxt[tr[0]]})
            boot = dict(zip(tr, v.tolist(), strict=True))
        for i in ended:
            i = int(i)
            tau = int(out.option_steps[i])
            disc = self.gamma if self.option_discount == "option" else self.gamma ** tau
            seqs[i].append({"obs": {k: v[i].copy() for k, v in p["obs"].items()}, "next_obs": nxt[i],
                            "action": int(p["action"][i]), "logprob": float(p["logprob"][i]),
                            "value": float(p["value"][i]), "reward": float(out.option_return[i]), "tau": tau,
                            "discount": disc, "terminated": bool(out.terminated[i]), "truncated": bool(trunc[i]),
                            "boot": disc * boot.get(i, 0.0)})

    def _train_on(self, seqs: list[list[dict[str, Any]]]) -> dict[str, float]:
        """Rewards (env sum + reward modules), per-env GAE, then PPO's clipped update on the ``M`` options."""
        rows = [(i, r) for i, seq in enumerate(seqs) for r in seq]   # env-major: each env's options in order
        M = len(rows)
        col = lambda key, dtype: np.asarray([r[key] for _, r in rows], dtype)[:, None]  # noqa: E731
        obs = {k: np.stack([r["obs"][k] for _, r in rows])[:, None] for k in rows[0][1]["obs"]}
        next_obs = {k: np.stack([r["next_obs"][k] for _, r in rows])[:, None] for k in rows[0][1]["next_obs"]}
        ext = col("reward", np.float32)
        terms, truncs = col("terminated", bool), col("truncated", bool)
        batch = TransitionBatch(obs=obs, actions=col("action", np.int64), next_obs=next_obs, rewards=ext,
                                terminated=terms, truncated=truncs, infos=[[{}] for _ in range(M)])
        mixed, int_rewards, metrics = self._mix_rewards(batch)
        total = (mixed + col("boot", np.float32))[:, 0]
        values, discounts, dones = col("value", np.float32)[:, 0], col("discount", np.float32)[:, 0], (terms | truncs)[:, 0]
        advantages, returns = np.zeros(M, np.float32), np.zeros(M, np.float32)
        start = 0
        for i, seq in enumerate(seqs):
            end = start + len(seq)
            if end > start:
                s = slice(start, end)
                advantages[s], returns[s] = smdp_gae(total[s], values[s], dones[s], discounts[s],
                                                     float(self._pending["value"][i]), self.gae_lambda)
            start = end
        metrics.update(self._update(obs, batch.actions, col("logprob", np.float32), values[:, None, None],
                                    advantages[:, None], returns[:, None, None], np.zeros((M, 1), bool), None))
        metrics.update({"charts/extrinsic_reward": float(ext.mean()), "charts/intrinsic_reward": float(int_rewards.mean()),
                        "options/mean_steps": float(col("tau", np.float32).mean())})
        return metrics
