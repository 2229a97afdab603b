"""``llmguide eval RUN_DIR``: a finished run's latest checkpoint evaluated again with its method's recipe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import load_saved_config
from llmguide.core.errors import ConfigError
from llmguide.pipelines.runner import Recipe, eval_summary, evaluate_agent, reopen_run


def load_run_config(run_dir: str | Path, overrides: list[str] = ()) -> DictConfig:
    """A run's saved ``config.yaml`` with ``key=value`` overrides applied, validated like the command line
    (:func:`~llmguide.core.config.load_saved_config`: a hand-edited file with a bad key or value is a
    ConfigError naming it)."""
    from llmguide.pipelines import register_rules

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml)")
    for o in overrides:
        if "=" not in o:
            raise ConfigError(o, "an override must look like key=value (e.g. eval.episodes=20)")
    return load_saved_config(path, overrides, providers=[register_rules])


def evaluate_run(run_dir: str, overrides: list[str], recipe_for: Callable[[DictConfig], Recipe]) -> int:
    """``llmguide eval RUN_DIR [key=value ...]``: greedy and sampled episodes of the latest checkpoint."""
    cfg = load_run_config(run_dir, overrides)
    recipe = recipe_for(cfg)
    run = reopen_run(run_dir)
    try:
        state = run.load_checkpoint()
        if state is None:
            raise FileNotFoundError(f"{run_dir} has no checkpoints/latest.pt to evaluate")
        agent = recipe.load_for_eval(state["agent"])
        episodes, greedy = int(cfg.eval.episodes), bool(cfg.eval.greedy)
        other = "sampled" if greedy else "greedy"
        progress = bool(cfg.get("progress", True))
        results: dict[str, Any] = {"step": int(state["step"]),
                                   **evaluate_agent(recipe, agent, episodes, greedy, progress=progress)}
        results[other] = evaluate_agent(recipe, agent, episodes, not greedy, progress=progress)
        run.write_json("eval.json", results)
        print(f"eval: {Path(run_dir) / 'eval.json'} — {eval_summary(results)}; {eval_summary(results[other])}")
    finally:
        run.close()
    return 0
