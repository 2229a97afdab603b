"""The one-line summaries a verb ends with: an evaluation's returns, a training run's steps, seconds and report,
and how well its LM answered (a run whose LM answered little must not look like a normal run)."""

from __future__ import annotations

from typing import Any


def _num(x: Any) -> str:
    """A value as printed on the console: 3 significant digits; float noise (|x| < 1e-9) is 0."""
    if isinstance(x, float) and abs(x) < 1e-9:
        return "0"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def eval_summary(results: dict[str, Any]) -> str:
    """``return 1.2 ± 0.4 over 5 greedy episodes (success 0.6)`` of an evaluation's results."""
    if not results.get("episodes") or "return_mean" not in results:
        return "no evaluation episodes"
    text = (f"return {_num(results['return_mean'])} ± {_num(results.get('return_std', 0.0))} over "
            f"{results['episodes']} {'greedy' if results.get('greedy', True) else 'sampled'} episodes")
    names = {"success_rate": "success", "achievements_per_episode": "achievements/episode"}
    extra = [f"{name} {_num(results[key])}" for key, name in names.items() if key in results]
    return text + (f" ({', '.join(extra)})" if extra else "")


def summary_line(result: Any) -> str:
    """``train: runs/NAME — N steps in S s; final eval ...; LM ...; report ...`` of a :class:`TrainResult`."""
    report = f"; report {result.report}" if result.report else ""
    return (f"train: {result.path} — {result.step} steps in {result.seconds:.0f} s; final eval "
            f"{eval_summary(result.eval)}{lm_summary(result.lm)}{report}")


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
