"""The standard training pipeline (methods none / rnd / noveld / icm / apt) and ``llmguide eval``.

``train(cfg)``: seed → run dir → vector env → reward modules → PPO or DQN → (resume from
``checkpoints/latest.pt`` when ``run.resume=true``) → learn with a checkpoint every
``checkpoint_every`` env steps → final checkpoint → evaluation into ``eval.json`` → report.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.core.seeding import seed_everything

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000  # evaluation episodes never reuse training seeds


def build_reward_modules(cfg: DictConfig, obs_space: Any, action_space: Any) -> list:
    """The method's ``(coef, RewardModule)`` pairs (none for ``method=none``)."""
    try:
        from llmguide.rewards import build_reward_modules as build
    except ImportError:
        if cfg.method.name != "none":
            raise ConfigError("method.name", f"reward modules for '{cfg.method.name}' are not available") from None
        return []
    return build(cfg.method, obs_space, action_space, int(cfg.num_envs), device=str(cfg.device),
                 seed=int(cfg.seed))


def build_agent(cfg: DictConfig, envs: Any, reward_modules: list, run: RunDir | None, on_step: Any = None):
    """PPO or DQN as named by ``agent.name``."""
    kwargs = dict(reward_modules=reward_modules, extrinsic_coef=float(cfg.method.extrinsic_coef), run=run,
                  seed=int(cfg.seed), device=str(cfg.device), on_step=on_step)
    name = str(cfg.agent.name)
    if name == "ppo":
        from llmguide.learners.ppo import PPO

        return PPO(envs, cfg.agent, **kwargs)
    if name == "dqn":
        from llmguide.learners.dqn import DQN

        return DQN(envs, cfg.agent, **kwargs)
    raise ConfigError("agent.name", f"unknown agent '{name}'; choose ppo or dqn")


def _eval_callback(cfg: DictConfig, run: RunDir):
    every = int(cfg.eval.every)
    state = {"last": None}

    def callback(agent: Any) -> None:
        from llmguide.learners.evaluation import evaluate

        if state["last"] is None:
            state["last"] = agent.global_step // every
        if agent.global_step // every > state["last"]:
            state["last"] = agent.global_step // every
            res = evaluate(agent, cfg.env, int(cfg.eval.episodes), int(cfg.seed) + EVAL_SEED_OFFSET,
                           greedy=bool(cfg.eval.greedy))
            run.log(agent.global_step, {f"eval/{k}": v for k, v in res.items()
                                        if isinstance(v, int | float) and not isinstance(v, bool)})

    return callback if every > 0 and int(cfg.eval.episodes) > 0 else None


def train(cfg: DictConfig) -> int:
    """``llmguide train method=none|rnd|noveld|icm|apt agent=ppo|dqn ...``; returns 0."""
    from llmguide.envs import make_vector_env
    from llmguide.learners.evaluation import evaluate as run_episodes

    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        try:
            modules = build_reward_modules(cfg, envs.single_observation_space, envs.single_action_space)
            agent = build_agent(cfg, envs, modules, run)
            state = run.load_checkpoint() if cfg.run.resume else None
            if state is not None:
                agent.load_state_dict(state["agent"])
                run.truncate_metrics_after(int(state["step"]))
                log.info("resumed %s at step %d", run.path, agent.global_step)
            elif cfg.run.resume:
                log.warning("run.resume=true but %s has no checkpoint: starting from step 0", run.path)
            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress),
                        checkpoint_every=int(cfg.checkpoint_every), callback=_eval_callback(cfg, run))
            run.save_checkpoint({"agent": agent.state_dict()}, agent.global_step)
        finally:
            envs.close()
        results = run_episodes(agent, cfg.env, int(cfg.eval.episodes), int(cfg.seed) + EVAL_SEED_OFFSET,
                               greedy=bool(cfg.eval.greedy))
        run.write_json("eval.json", {"step": agent.global_step, **results})
        run_path = run.path
    try:
        from llmguide.report import write_report
    except ImportError as err:
        log.warning("report not written (%s)", err)
    else:
        write_report([str(run_path)])
    return 0


def load_run_config(run_dir: str | Path, overrides: list[str] = ()) -> DictConfig:
    """A run's saved ``config.yaml`` with ``key=value`` overrides of existing keys applied."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml)")
    cfg = OmegaConf.create(yaml.safe_load(path.read_text()))
    OmegaConf.set_struct(cfg, True)
    for o in overrides:
        if "=" not in o:
            raise ConfigError(o, "an override must look like key=value (e.g. eval.episodes=20)")
        try:
            cfg.merge_with(OmegaConf.from_dotlist([o]))
        except OmegaConfBaseException as err:
            raise ConfigError(o.split("=", 1)[0], f"unknown key or bad value ({str(err).splitlines()[0]})") from None
    OmegaConf.set_struct(cfg, False)
    return cfg


def evaluate(run_dir: str, overrides: list[str]) -> int:
    """``llmguide eval RUN_DIR [key=value ...]``: greedy and sampled episodes of the latest checkpoint."""
    from llmguide.envs import make_env
    from llmguide.learners.evaluation import evaluate as run_episodes

    cfg = load_run_config(run_dir, overrides)
    run = RunDir(run_dir, tensorboard=False)
    try:
        state = run.load_checkpoint()
        if state is None:
            raise FileNotFoundError(f"{run_dir} has no checkpoints/latest.pt to evaluate")
        probe = make_env(cfg.env, int(cfg.seed))
        spaces = SimpleNamespace(single_observation_space=probe.observation_space,
                                 single_action_space=probe.action_space, num_envs=int(cfg.num_envs))
        probe.close()
        agent = build_agent(cfg, spaces, [], None)
        agent.load_state_dict({**state["agent"], "reward_modules": []})  # modules do not act
        seed = int(cfg.seed) + EVAL_SEED_OFFSET
        episodes = int(cfg.eval.episodes)
        results: dict[str, Any] = {"step": int(state["step"]),
                                   **run_episodes(agent, cfg.env, episodes, seed, greedy=True)}
        results["sampled"] = run_episodes(agent, cfg.env, episodes, seed, greedy=False)
        run.write_json("eval.json", results)
        print(f"eval: {Path(run_dir) / 'eval.json'} (greedy return {results.get('return_mean')}, "
              f"sampled return {results['sampled'].get('return_mean')})")
    finally:
        run.close()
    return 0
