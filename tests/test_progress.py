"""The progress bar shows steps/s, episode stats and LM statistics."""

import io

from llmguide.core.progress import Progress


def test_postfix_has_sps_episode_and_lm_stats():
    bar = Progress(total=100, desc="t")
    bar.bar.fp = io.StringIO()
    bar.episode(2.0, 10)
    bar.episode(4.0, 30)
    bar.update(50, lm_stats={"calls": 7.0, "answered": 0.25, "fallbacks": 2.0, "table": 0.875})
    post = bar.bar.postfix
    assert "ep_ret=3.00" in post and "ep_len=20" in post
    assert "lm_calls=7" in post and "lm_answered=25%" in post and "lm_fallbacks=2" in post and "lm_table=88%" in post
    assert "sps=" in post
    assert bar.step == 50
    bar.update(10)
    assert "lm_calls" not in bar.bar.postfix
    bar.close()


def test_the_bar_shows_what_the_lm_progress_keys_find_in_the_metrics():
    """The keys a recipe names (LM_PROGRESS) are read from its metrics; a key a run does not have (no table) is not
    shown as 0 (it was: the bar read ``hit_rate``, which no metric supplies, and showed hit=0% on every run)."""
    from llmguide.learners.callbacks import MetricsCallback
    from llmguide.pipelines.services import LM_PROGRESS

    metrics = {"lm/calls": 3.0, "lm/answered_fraction": 0.5, "lm/fallbacks": 1.0}
    stats = MetricsCallback(None, 1, lambda: metrics, LM_PROGRESS).progress_stats()
    assert stats == {"calls": 3.0, "answered": 0.5, "fallbacks": 1.0}
    metrics["lm/table_coverage"] = 0.9
    assert MetricsCallback(None, 1, lambda: metrics, LM_PROGRESS).progress_stats()["table"] == 0.9
