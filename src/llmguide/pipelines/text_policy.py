"""What the text-policy pipelines (GLAM, NPAE, DRRN) share: evaluation with GLAM's generalisation
tests, the ``llmguide eval`` verb on a checkpoint, the torch thread setting and their config rules.

A text policy has ``action_strings`` and ``act(prompts, greedy)``; the pipeline supplies how to build
one from the config and how to load its weights from a checkpoint's ``agent`` state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import non_negative, register_rule
from llmguide.core.rundir import RunDir
from llmguide.core.seeding import seed_everything

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000


def _known_tests(value: Any) -> str | None:
    from llmguide.learners.generalisation import TESTS

    unknown = [v for v in value or [] if v not in TESTS]
    return f"unknown test(s) {unknown}; choose from {sorted(TESTS)}" if unknown else None


register_rule("method.post_tests", _known_tests)
register_rule("method.post_test_episodes", non_negative)


def set_threads(cfg: DictConfig) -> None:
    """``torch.set_num_threads(method.torch_threads)`` unless it is 0 (torch's default)."""
    import torch

    if int(cfg.method.torch_threads) > 0:
        torch.set_num_threads(int(cfg.method.torch_threads))


def evaluation(policy: Any, cfg: DictConfig, step: int, both_modes: bool = False) -> dict[str, Any]:
    """Episodes on held-out seeds (``eval.greedy``; greedy and sampled with ``both_modes``), plus
    the generalisation tests named in ``method.post_tests`` (in the ``eval.greedy`` mode)."""
    from llmguide.learners.generalisation import run_tests
    from llmguide.learners.llm_policy import evaluate_policy

    episodes, seed, k = int(cfg.eval.episodes), int(cfg.seed) + EVAL_SEED_OFFSET, int(cfg.method.k_history)
    greedy = bool(cfg.eval.greedy)
    results: dict[str, Any] = {"step": step, **evaluate_policy(policy, cfg.env, episodes, seed, k, greedy=greedy)}
    if both_modes:
        results["sampled" if greedy else "greedy"] = evaluate_policy(policy, cfg.env, episodes, seed, k,
                                                                     greedy=not greedy)
    tests = list(cfg.method.get("post_tests") or [])
    if tests:
        results["generalisation"] = run_tests(policy, cfg.env, tests, int(cfg.method.post_test_episodes), seed, k,
                                              greedy=greedy)
    return results


def finish(run: RunDir, policy: Any, cfg: DictConfig, step: int) -> None:
    """Write the end-of-training evaluation into ``eval.json`` and the metrics."""
    results = evaluation(policy, cfg, step)
    run.write_json("eval.json", results)
    run.log(step, {f"eval/{k}": v for k, v in results.items() if isinstance(v, float)})


def train_text_policy(cfg: DictConfig, build_policy: Callable[[DictConfig], Any],
                      make_agent: Callable[[Any, Any, RunDir], Any],
                      prepare: Callable[[Any, RunDir], None] | None = None) -> int:
    """seed -> policy -> run dir -> vector env -> agent (resumed from ``checkpoints/latest.pt`` with
    ``run.resume=true``, else ``prepare(policy, run)``) -> ``learn`` unless ``method.ppo`` is false ->
    final checkpoint -> :func:`finish`.  The agent has ``learn``, ``state_dict``, ``load_state_dict``
    and ``global_step``."""
    from llmguide.envs import make_vector_env

    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    set_threads(cfg)
    policy = build_policy(cfg)
    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        try:
            agent = make_agent(envs, policy, run)
            state = run.load_checkpoint() if cfg.run.resume else None
            if state is not None:
                agent.load_state_dict(state["agent"])
                run.truncate_metrics_after(int(state["step"]))
                log.info("resumed %s at step %d", run.path, agent.global_step)
            elif prepare is not None:
                prepare(policy, run)
            if cfg.method.get("ppo", True):
                agent.learn(int(cfg.total_steps), progress=bool(cfg.progress),
                            checkpoint_every=int(cfg.checkpoint_every))
            run.save_checkpoint({"agent": agent.state_dict()}, agent.global_step)
        finally:
            envs.close()
        finish(run, policy, cfg, agent.global_step)
    return 0


def evaluate_checkpoint(run_dir: str, overrides: list[str], build_policy: Callable[[DictConfig], Any],
                        load: Callable[[Any, dict[str, Any]], None]) -> int:
    """``llmguide eval RUN_DIR [key=value ...]``: greedy and sampled episodes and the generalisation
    tests of the latest checkpoint, into ``eval.json``."""
    from llmguide.pipelines.standard import load_run_config

    cfg = load_run_config(run_dir, overrides)
    set_threads(cfg)
    run = RunDir(run_dir, tensorboard=False)
    try:
        state = run.load_checkpoint()
        if state is None:
            raise FileNotFoundError(f"{run_dir} has no checkpoints/latest.pt to evaluate")
        policy = build_policy(cfg)
        load(policy, state["agent"])
        results = evaluation(policy, cfg, int(state["step"]), both_modes=True)
        run.write_json("eval.json", results)
        other = "sampled" if cfg.eval.greedy else "greedy"
        print(f"eval: {Path(run_dir) / 'eval.json'} (success {results.get('success_rate')}, "
              f"{other} {results[other].get('success_rate')})")
    finally:
        run.close()
    return 0
