"""``llmguide eval RUN_DIR``: a finished run's latest checkpoint evaluated again with its method's recipe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.pipelines.runner import Recipe, evaluate_agent, reopen_run
from llmguide.pipelines.summary import eval_summary


def evaluate_run(run_dir: str, cfg: DictConfig, recipe_for: Callable[[DictConfig], Recipe]) -> int:
    """``llmguide eval RUN_DIR [key=value ...]``: greedy and sampled episodes of the latest checkpoint, with the
    run's config ``cfg`` (:func:`llmguide.pipelines.load_run_config`)."""
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
