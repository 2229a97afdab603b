"""WordBonus's recipe: everything llmguide needs from the method, declared on :class:`Recipe`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from llmguide.core.errors import ConfigError
from llmguide.llm.prompts import load_template
from llmguide.pipelines.runner import Parts, Recipe, Step
from llmguide.rewards.base import RewardModule

PROMPTS = Path(__file__).parent / "prompts"


class WordBonus(RewardModule):
    """``bonus`` on each step whose caption holds ``word``."""

    name = "wordbonus"

    def __init__(self, word: str, bonus: float = 1.0):
        self.word, self.bonus = word, bonus

    def compute(self, batch: Any) -> np.ndarray:
        return np.array([[self.bonus * (self.word in str(info.get("caption", ""))) for info in row]
                         for row in batch.infos], np.float32).reshape(batch.rewards.shape)


def answer_queries(cfg: DictConfig, dataset: Any) -> list[Any]:
    """The hint requests of the dataset's captions, one per distinct caption weighted by its steps."""
    from llmguide.llm.table import Query

    m = cfg.method
    template = load_template(str(m.prompt), PROMPTS)
    counts = Counter(str(c) for episode in dataset for c in episode.captions[:-1] if c)
    return [Query("generate", {"prompt": template.render(caption=c), "max_tokens": int(m.max_tokens),
                               "temperature": 0.0, "stop": ["\n"]}, float(n), c) for c, n in counts.most_common()]


def collect(cfg: DictConfig) -> int:
    """Random actions for ``method.collect_steps`` env steps into ``<run>/dataset/``."""
    from llmguide.pipelines.collect import Collection, explore

    explore(cfg, Collection(steps=int(cfg.method.collect_steps), policy="random", intrinsic="none"))
    return 0


def tally(cfg: DictConfig) -> int:
    """The caption words of the dataset ``method.data``, most common first, into ``<data>/tally.json``."""
    from llmguide.data import EpisodeDataset

    if not cfg.method.data:
        raise ConfigError("method.data", "name the dataset folder (or a collect run's directory)")
    words = Counter(w for episode in EpisodeDataset(cfg.method.data) for c in episode.captions for w in str(c).split())
    out = Path(cfg.method.data) / "tally.json"
    out.write_text(json.dumps(dict(words.most_common())))
    print(f"tally: {len(words)} words into {out}")
    return 0


class WordBonusRecipe(Recipe):
    """PPO with :class:`WordBonus`; an answer table of hints; the ``collect`` and ``tally`` verbs."""

    agents = ("ppo",)
    env_families = ("crafter", "craftax")
    steps = {"collect": Step(collect, "wordbonus: random actions into a dataset"),
             "tally": Step(tally, "wordbonus: count a dataset's caption words into <data>/tally.json")}
    answer_queries = staticmethod(answer_queries)
    prompt_keys = ("prompt", "max_tokens")   # what shapes its LM requests: the answer table's prompt hash

    def build(self, envs: Any, run: Any) -> Parts:
        m = self.cfg.method
        return Parts(envs, [(float(m.intrinsic_coef), WordBonus(str(m.word)))], float(m.extrinsic_coef))
