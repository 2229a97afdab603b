"""The progress bar shows steps/s, episode stats and LM statistics."""

import io

from llmguide.core.progress import Progress


def test_postfix_has_sps_episode_and_lm_stats():
    bar = Progress(total=100, desc="t")
    bar.bar.fp = io.StringIO()
    bar.episode(2.0, 10)
    bar.episode(4.0, 30)
    bar.update(50, lm_stats={"calls": 7, "hit_rate": 0.25})
    post = bar.bar.postfix
    assert "ep_ret=3.00" in post and "ep_len=20" in post
    assert "lm_calls=7" in post and "hit=25%" in post
    assert "sps=" in post
    assert bar.step == 50
    bar.update(10)
    assert "lm_calls" not in bar.bar.postfix
    bar.close()
