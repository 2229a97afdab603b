"""The one-line summaries a verb ends with: an evaluation's returns, a training run's steps, seconds and report,
and how well its LM answered (a run whose LM answered little must not look like a normal run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainResult:
    """What a finished training run left: its directory, last step, final evaluation (``eval``: eval.json) and
    report, and training's own return: ``train_return``, the mean episodic return logged in the last 10 % of
    its steps, over ``train_episodes`` episodes (None: no episode finished).  Two numbers, two names:
    ``train_return`` is how the agent did while learning, ``eval_return`` the evaluation's mean return."""

    path: Path
    step: int
    eval: dict[str, Any]
    report: Path | None
    seconds: float
    lm: dict[str, Any] = field(default_factory=dict)   # the final lm/* metrics (no LM: empty)
    train_return: float | None = None
    train_episodes: int = 0

    @property
    def eval_return(self) -> float | None:
        """The evaluation's mean return (greedy unless ``eval.greedy=false``; ``eval["greedy"]`` says which)."""
        return self.eval.get("return_mean")


def _num(x: Any) -> str:
    """A value as printed on the console: 3 significant digits; float noise (|x| < 1e-9) is 0."""
    if isinstance(x, float) and abs(x) < 1e-9:
        return "0"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def eval_summary(results: dict[str, Any]) -> str:
    """``eval return (greedy) 1.2 ± 0.4 over 5 episodes of ≤ 2000 steps (success 0.6)`` of an evaluation's
    results: the evaluation's own name, never "final return" (training's last 10 % is :func:`train_summary`)."""
    mode = "greedy" if results.get("greedy", True) else "sampled"
    if not results.get("episodes") or "return_mean" not in results:
        return f"eval return ({mode}): no episodes"
    cap = f" of ≤ {results['max_steps']} steps" if results.get("max_steps") else ""
    text = (f"eval return ({mode}) {_num(results['return_mean'])} ± {_num(results.get('return_std', 0.0))} over "
            f"{results['episodes']} episodes{cap}")
    names = {"success_rate": "success", "achievements_per_episode": "achievements/episode"}
    extra = [f"{name} {_num(results[key])}" for key, name in names.items() if key in results]
    return text + (f" ({', '.join(extra)})" if extra else "")


def train_summary(value: float | None, episodes: int = 0) -> str:
    """``train return (last 10%) 2.3 over 40 episodes``: the mean episodic return logged in the last 10 % of
    training's steps (the report's train return), or that no episode finished."""
    if value is None:
        return "train return (last 10%): no episode finished"
    return f"train return (last 10%) {_num(float(value))} over {episodes} episodes"


def summary_line(result: Any) -> str:
    """``train: runs/NAME — N steps in S s; train return (last 10%) ...; eval return (greedy) ...; LM ...;
    report ...`` of a :class:`TrainResult`: each number under its own name."""
    report = f"; report {result.report}" if result.report else ""
    return (f"train: {result.path} — {result.step} steps in {result.seconds:.0f} s; "
            f"{train_summary(result.train_return, result.train_episodes)}; {eval_summary(result.eval)}"
            f"{lm_summary(result.lm)}{report}")


LOW_ANSWERED = 0.5   # below this share of its requests answered, the summary line says the LM arm is not fair


def lm_summary(lm: dict[str, Any]) -> str:
    """``; LM answered 3 of 290 requests (1 %) ...`` for a run that asked an LM (empty otherwise): a run whose LM
    answered little must not look like a normal run.  With an answer table, its coverage of the run's steps."""
    asked = float(lm.get("lm/requests", 0)) - float(lm.get("lm/deduplicated", 0))
    if asked <= 0:
        return ""
    done = float(lm.get("lm/completed", 0))
    text = f"; LM answered {done:.0f} of {asked:.0f} requests ({done / asked:.0%})"
    if "lm/table_coverage" in lm:
        text += f", answer table covered {float(lm['lm/table_coverage']):.0%} of the steps"
    elif "lm/fresh_fraction" in lm:
        text += f", {float(lm['lm/fresh_fraction']):.0%} of steps acted on a fresh answer"
    if done / asked < LOW_ANSWERED:
        text += " — WARNING: too few answers for a fair LM arm (lm_stats.json; an answer table: llmguide answers)"
    return text
