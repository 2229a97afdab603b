"""ELLM pipeline: ``llmguide train method=ellm`` (and the ellm_oracle / ellm_all_goals presets).

Modes (``method.mode``):

* ``pretrain``: train on the ELLM goal reward (``intrinsic_coef``) plus ``extrinsic_coef`` times
  the env reward (0 by default: the intrinsic reward replaces it), goal-conditioned on the
  current suggestion.
* ``finetune``: load a pretrained ELLM run's agent (``method.pretrained=RUN_DIR``) and train it
  on one Crafter task (``env.task=...``, +1 and the episode ends on success), conditioned on the
  task's goal; the ELLM reward may be kept with ``method.finetune_intrinsic_coef``.
* ``guided``: a fresh DQN agent learns the task; when it explores (ε), the pretrained agent
  picks the exploratory action with probability ``method.guide_prob``.

Metrics (``metrics.jsonl``): the learner's episode records (``charts/achievements_per_episode``,
``achievements/<name>``), plus every ``log_every`` steps ``crafter/score`` and
``crafter/achievements_per_episode`` over the last 100 episodes, ``lm/*`` (calls, hit_rate,
fallbacks, parse_errors, latency_p50) and ``ellm/*`` (suggestion quality good / ill_timed /
impossible / unparseable, requests, pending).  At the end: ``eval.json`` (greedy episodes with
the same suggester) and the report.
"""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.config import in_range, non_negative, one_of, positive, register_rule, validate
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.core.seeding import seed_everything
from llmguide.rewards.ellm import SUGGESTERS, ELLMReward, GoalMatcher, GoalSuggester, nearest_goal_map
from llmguide.rewards.ellm_wrapper import ELLMVecWrapper

log = logging.getLogger(__name__)

MODES = ("pretrain", "finetune", "guided")
for _key, _rule in {
    "method.mode": one_of(*MODES),
    "method.suggester": one_of(*SUGGESTERS),
    "method.top_k": positive,
    "method.threshold": in_range(-1.0, 1.0),
    "method.match": one_of("cosine", "exact"),
    "method.reward": one_of("one", "cosine"),
    "method.embedder": one_of("minilm", "bow"),
    "method.goal_choice": one_of("random", "first"),
    "method.guide_prob": in_range(0.0, 1.0),
    "method.finetune_intrinsic_coef": non_negative,
    "method.memo_size": positive,
}.items():
    register_rule(_key, _rule)


# --- building blocks -------------------------------------------------------------------------
_EMBEDDERS: dict[str, Any] = {}


class ELLMParts:
    """Everything ELLM adds around a vector env; ``close()`` stops the LM service."""

    def __init__(self, cfg: DictConfig, envs: Any, seed: int, fixed_goal: str | None = None,
                 extrinsic_coef: float | None = None, intrinsic_coef: float | None = None):
        from llmguide.envs import get_oracle
        from llmguide.llm.embeddings import make_embedder

        m = cfg.method
        family = str(cfg.env.name)
        self.oracle = get_oracle(family)
        kind = str(m.embedder)
        if kind not in _EMBEDDERS:  # loaded once per process (training and evaluation share it)
            _EMBEDDERS[kind] = make_embedder(kind)
        self.embedder = _EMBEDDERS[kind]
        self.matcher = GoalMatcher(self.embedder, str(m.match))
        self.lm = self.service = None
        template = None
        if m.suggester in ("generate", "score"):
            from llmguide.llm.factory import make_llm
            from llmguide.llm.prompts import load_template
            from llmguide.llm.service import LLMService

            self.lm = make_llm(cfg.llm, family)
            s = m.service
            self.service = LLMService(self.lm, max_batch=int(s.max_batch), max_queue=int(s.max_queue),
                                      timeout=float(s.timeout), max_retries=int(s.max_retries))
            template = load_template("ellm_goals" if m.suggester == "generate" else "ellm_goal_score")
        grade_matcher = GoalMatcher(self.embedder, "cosine")
        canonical = nearest_goal_map(grade_matcher, self.oracle.goals, float(m.threshold))
        self.suggester = GoalSuggester(
            str(m.suggester), envs.num_envs, self.oracle.goals, oracle=self.oracle, service=self.service,
            template=template, top_k=int(m.top_k), max_tokens=int(m.max_tokens),
            temperature=float(m.temperature), normalize_scores=bool(m.normalize_scores),
            grade_map=lambda g: self.oracle.canonical(g) or canonical(g), memo_size=int(m.memo_size),
        )
        self.reward = ELLMReward(self.matcher, envs.num_envs, float(m.threshold), str(m.reward))
        self.envs = ELLMVecWrapper(
            envs, self.suggester, self.reward, grade_matcher,
            extrinsic_coef=float(m.extrinsic_coef if extrinsic_coef is None else extrinsic_coef),
            intrinsic_coef=float(m.intrinsic_coef if intrinsic_coef is None else intrinsic_coef),
            goal_conditioned=bool(m.goal_conditioned), goal_choice=str(m.goal_choice),
            fixed_goal=fixed_goal, seed=seed,
        )

    def lm_metrics(self) -> dict[str, float]:
        """``lm/*``: real backend calls, hit rate (memo + persistent cache), fallbacks, parse errors, latency."""
        s = self.suggester.stats
        out: dict[str, float] = {"lm/requests": s.requests, "lm/fallbacks": s.fallbacks}
        parse = self.suggester.parse_stats
        out["lm/parse_errors"] = int(sum(parse.malformed.values())) if parse is not None else 0
        service = self.service.metrics() if self.service is not None else {}
        cache_hits = _first(service, ("cache_hits", "hits"), 0)
        calls = s.submitted - cache_hits - _first(service, ("deduplicated",), 0) if self.service else 0
        stats = getattr(self.lm, "stats", None)
        if isinstance(stats, dict) and "misses" in stats:
            calls = int(stats["misses"])
        out["lm/calls"] = max(int(calls), 0)
        # answered without the backend (memo + persistent cache) over all answered lookups
        hits = s.memo_hits + int(cache_hits)
        out["lm/hit_rate"] = hits / (hits + out["lm/calls"]) if hits + out["lm/calls"] else 0.0
        out["lm/fallbacks"] = s.fallbacks + int(_first(service, ("fallbacks",), 0))
        latency = _first(service, ("latency_p50", "latency_p50_s"), None)
        if latency is not None:
            out["lm/latency_p50"] = float(latency)
        return out

    def close(self) -> None:
        self.suggester.close()
        if self.service is not None:
            self.service.close()
        if self.lm is not None:
            self.lm.close()


def _first(d: dict, keys: tuple[str, ...], default: Any) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _make_agent(cfg: DictConfig, envs: Any, run: RunDir | None, on_step: Any) -> Any:
    name = str(cfg.agent.name)
    if name == "ppo":
        from llmguide.learners.ppo import PPO

        return PPO(envs, cfg.agent, reward_modules=[], extrinsic_coef=1.0, run=run, seed=int(cfg.seed),
                   device=str(cfg.device), on_step=on_step)
    if name == "dqn":
        from llmguide.learners.dqn import DQN

        return DQN(envs, cfg.agent, reward_modules=[], extrinsic_coef=1.0, run=run, seed=int(cfg.seed),
                   device=str(cfg.device), on_step=on_step)
    raise ConfigError("agent.name", f"ELLM supports agent=ppo or agent=dqn, got {name!r}")


def _task_goal(cfg: DictConfig) -> str:
    task = cfg.env.get("task")
    if not task:
        raise ConfigError("env.task", f"method.mode={cfg.method.mode} trains on one task: set env.task=place_table etc.")
    return str(task).replace("_", " ")


def _pretrained_state(cfg: DictConfig) -> dict[str, Any]:
    path = cfg.method.get("pretrained")
    if not path:
        raise ConfigError("method.pretrained", f"method.mode={cfg.method.mode} needs the run directory of a "
                          "pretrained ELLM agent (method.pretrained=runs/NAME)")
    ckpt = Path(str(path)) / "checkpoints" / "latest.pt"
    if not ckpt.exists():
        raise ConfigError("method.pretrained", f"no checkpoint at {ckpt}")
    import torch

    return torch.load(ckpt, map_location="cpu", weights_only=False)["agent"]


class _Monitor:
    """on_step hook: episode achievements from the wrapper's transitions, periodic ELLM/LM metrics."""

    def __init__(self, parts: ELLMParts, run: RunDir, log_every: int):
        self.parts, self.run, self.log_every = parts, run, max(int(log_every), 1)
        self.episodes: deque[dict[str, int]] = deque(maxlen=100)
        self.next_log = self.log_every

    def __call__(self, step: int, obs: Any, actions: Any, rewards: Any, dones: Any, infos: Any) -> None:
        transitions = self.parts.envs.last_transitions
        for i in np.flatnonzero(np.asarray(dones)):
            ach = transitions[i].get("achievements") if i < len(transitions) else None
            if isinstance(ach, dict):
                self.episodes.append({k: int(v) for k, v in ach.items()})
        if step >= self.next_log:
            self.next_log = (step // self.log_every + 1) * self.log_every
            self.run.log(step, self.metrics())

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.parts.envs.metrics(), **self.parts.lm_metrics()}
        if self.episodes:
            from llmguide.envs.crafter import achievement_summary

            summary = achievement_summary(list(self.episodes))
            out["crafter/score"] = summary["crafter_score_percent"]
            out["crafter/achievements_per_episode"] = summary["achievements_per_episode"]
        return out


# --- evaluation ------------------------------------------------------------------------------
def evaluate_ellm(cfg: DictConfig, agent: Any, episodes: int, seed: int, greedy: bool = True,
                  fixed_goal: str | None = None) -> dict[str, Any]:
    """Episodes on one env with the same suggester and goal conditioning as in training."""
    from llmguide.envs import make_vector_env

    results: dict[str, Any] = {"episodes": episodes, "greedy": greedy}
    if episodes <= 0:
        return results
    parts = ELLMParts(cfg, make_vector_env(cfg.env, 1, seed, "sync"), seed, fixed_goal=fixed_goal)
    returns, lengths, achievements, successes = [], [], [], []
    try:
        obs, _ = parts.envs.reset(seed=seed)
        ret, length = 0.0, 0
        while len(returns) < episodes:
            action = agent.act(obs, greedy=greedy)
            obs, _, term, trunc, _ = parts.envs.step(action)
            info = parts.envs.last_transitions[0]
            ret += float(parts.envs.last_env_rewards[0])
            length += 1
            if term[0] or trunc[0]:
                returns.append(ret)
                lengths.append(length)
                if isinstance(info.get("achievements"), dict):
                    achievements.append({k: int(v) for k, v in info["achievements"].items()})
                if "success" in info:
                    successes.append(float(bool(info["success"])))
                ret, length = 0.0, 0
        results.update({"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
                        "length_mean": float(np.mean(lengths)), "episode_returns": returns})
        if successes:
            results["success_rate"] = float(np.mean(successes))
        if achievements:
            from llmguide.envs.crafter import achievement_summary

            results["achievements"] = achievement_summary(achievements)
            results["achievements_per_episode"] = results["achievements"]["achievements_per_episode"]
            results["crafter_score"] = results["achievements"]["crafter_score_percent"]
        results.update(parts.envs.metrics())
        results.update(parts.lm_metrics())
    finally:
        parts.close()
        parts.envs.close()
    return results


# --- train -----------------------------------------------------------------------------------
def train(cfg: DictConfig) -> int:
    """``llmguide train method=ellm ...``: pretrain / finetune / guided ELLM run into runs/<name>/."""
    from llmguide.envs import make_vector_env

    validate(cfg)  # again, now that this module's rules for method.* are registered
    m = cfg.method
    mode = str(m.mode)
    fixed_goal = extrinsic = intrinsic = None
    pretrained = None
    if mode in ("finetune", "guided"):
        fixed_goal = _task_goal(cfg)
        pretrained = _pretrained_state(cfg)
        extrinsic, intrinsic = 1.0, float(m.finetune_intrinsic_coef)
        if mode == "guided" and str(cfg.agent.name) != "dqn":
            raise ConfigError("agent.name", "method.mode=guided replaces ε-exploration actions: use agent=dqn")
    seed_everything(int(cfg.seed), bool(cfg.get("deterministic", False)))

    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        parts = ELLMParts(cfg, envs, int(cfg.seed), fixed_goal=fixed_goal,
                          extrinsic_coef=extrinsic, intrinsic_coef=intrinsic)
        monitor = _Monitor(parts, run, int(cfg.log_every))
        try:
            agent = _make_agent(cfg, parts.envs, run, monitor)
            agent.progress_stats = lambda: {"calls": (m := parts.lm_metrics())["lm/calls"], "hit_rate": m["lm/hit_rate"]}
            state = run.load_checkpoint() if cfg.run.resume else None
            if state is not None:
                agent.load_state_dict(state["agent"])
                parts.reward.load_state_dict(state.get("ellm", {}))
                run.truncate_metrics_after(int(state["step"]))
                log.info("resumed %s at step %d", run.path, state["step"])
            elif mode == "finetune":
                _load_weights(agent, pretrained)
            elif mode == "guided":
                if not hasattr(agent, "set_exploration_policy"):
                    raise ConfigError("method.mode", "guided mode needs DQN.set_exploration_policy(policy, prob) "
                                      "(the pretrained agent picks ε-actions); this DQN has none")
                guide = _make_agent(cfg, parts.envs, None, None)
                _load_weights(guide, pretrained)
                agent.set_exploration_policy(lambda obs: guide.act(obs, greedy=True), float(m.guide_prob))

            every = int(cfg.checkpoint_every)
            done_checkpoints = [int(agent.global_step) // every if every > 0 else 0]

            def checkpoint(a: Any) -> None:
                """After each update: a checkpoint with the ELLM state every ``checkpoint_every`` steps."""
                step = int(a.global_step)
                if every > 0 and step // every > done_checkpoints[0]:
                    done_checkpoints[0] = step // every
                    run.save_checkpoint({"agent": a.state_dict(), "ellm": parts.reward.state_dict()}, step)

            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress), callback=checkpoint)
            run.save_checkpoint({"agent": agent.state_dict(), "ellm": parts.reward.state_dict()},
                                int(agent.global_step))
            run.log(int(agent.global_step), monitor.metrics())
        finally:
            parts.close()
            parts.envs.close()
        results = evaluate_ellm(cfg, agent, int(cfg.eval.episodes), int(cfg.seed) + 10_000,
                                greedy=bool(cfg.eval.greedy), fixed_goal=fixed_goal)
        results["step"] = int(agent.global_step)
        run.write_json("eval.json", results)
        run_path = run.path
    try:
        from llmguide.report import write_report

        write_report([str(run_path)])
    except ImportError as err:
        log.warning("report not written (%s)", err)
    return 0


def _load_weights(agent: Any, state: dict[str, Any]) -> None:
    """Network weights of a pretrained agent (optimiser and counters start fresh)."""
    key = "net" if hasattr(agent, "net") else "q_net"
    net = getattr(agent, key, None)
    if net is None or key not in state:
        raise ConfigError("method.pretrained", "the pretrained checkpoint does not match this agent; "
                          "pretrain and finetune with the same agent and method.goal_conditioned")
    try:
        net.load_state_dict(state[key])
    except RuntimeError as err:
        raise ConfigError("method.pretrained", f"pretrained weights do not fit this agent ({err})") from None
    target = getattr(agent, "target_net", None)
    if target is not None:
        target.load_state_dict(net.state_dict())

