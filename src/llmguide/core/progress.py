"""Progress bar for long work: steps, steps/s, episode stats, LM calls and cache hit rate."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

SHARES = ("answered", "table")   # progress keys that are shares of 1


class Progress:
    """A tqdm bar whose postfix shows steps/s, recent episode return/length and LM statistics."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", disable: bool | None = None):
        if disable is None:
            disable = False
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True,
                        disable=disable, mininterval=1.0, smoothing=0.1)
        self.returns: deque[float] = deque(maxlen=20)
        self.lengths: deque[int] = deque(maxlen=20)
        self._start = time.perf_counter()
        self._start_step = initial
        self.step = initial

    def episode(self, ret: float, length: int) -> None:
        self.returns.append(float(ret))
        self.lengths.append(int(length))

    @property
    def steps_per_second(self) -> float:
        elapsed = time.perf_counter() - self._start
        return (self.step - self._start_step) / elapsed if elapsed > 0 else 0.0

    def update(self, steps: int, lm_stats: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
               **extra: Any) -> None:
        """Advance by ``steps``; ``lm_stats`` (or a function giving it, called only when the bar is shown) holds
        the LM's short progress keys (``LM_PROGRESS``: ``calls``, ``answered``, ``fallbacks``, with an answer table
        ``table``); shares (``answered``, ``table``) are shown as percentages."""
        self.step += steps
        if self.bar.disable:
            return
        if callable(lm_stats):
            lm_stats = lm_stats()
        post: dict[str, Any] = {"sps": f"{self.steps_per_second:.0f}"}
        if self.returns:
            post["ep_ret"] = f"{sum(self.returns) / len(self.returns):.2f}"
            post["ep_len"] = f"{sum(self.lengths) / len(self.lengths):.0f}"
        for key, value in (lm_stats or {}).items():
            post[f"lm_{key}"] = f"{float(value):.0%}" if key in SHARES else (int(value) if float(value).is_integer()
                                                                              else f"{float(value):.3g}")
        post.update(extra)
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()
