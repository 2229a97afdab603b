"""ONI pipeline: ``llmguide train method=oni_retrieval|oni_classification|oni_ranking|ellm_bow
env=minihack|nethack|crafter|craftax``.

PPO on the env; the intrinsic reward module labels the agent's messages online through the async
:class:`~llmguide.llm.service.core.LLMService` (never blocking the learner; labels persisted in the LM
cache, so later runs and seeds reuse them).  The Runner writes metrics (``lm/*`` and
``reward/<module>/*``), checkpoints (agent incl. the reward module's labels and weights), ``eval.json``
and the report.  The message is the env's message line: NetHack's (``info["caption"]``, with status changes when
``env.blstats_deltas``), Crafter's and Craftax-Classic's ``info["message"]`` (:mod:`llmguide.envs.crafter.messages`,
labelled with ONI's own Crafter prompts, :mod:`.prompts`, and ONI's task-agnostic goal unless ``method.goal`` is set).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from llmguide.core.config import in_range, non_negative, one_of, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.pipelines.runner import Parts, Recipe
from llmguide.pipelines.services import LM_PROGRESS
from llmguide.rewards.base import RewardModule

log = logging.getLogger(__name__)

ONI_METHODS = ("oni_retrieval", "oni_classification", "oni_ranking")
MESSAGE_LINES = {"crafter": "message", "craftax": "message"}  # families whose message line is not the caption

for _key, _rule in {
    "method.beta": non_negative, "method.count_scope": one_of("episode", "global"),
    "method.label_mode": one_of("score", "generate"), "method.max_in_flight": positive,
    "method.max_tokens": positive, "method.lr": positive,
    "method.batch_size": positive, "method.steps_per_round": positive, "method.duty": in_range(0.01, 1.0),
    "method.pairs_per_batch": positive, "method.max_messages": positive, "method.min_labels": positive,
    "method.min_pairs": positive, "method.drain_timeout": non_negative,
    "method.label_rate": lambda v: None if v is None or (isinstance(v, int | float) and 0 < v < 1)
    else f"must be in (0, 1) or null, got {v!r}",
}.items():
    register_rule(_key, _rule)


def use_reference_policy(cfg: Any) -> None:
    """The ONI/Motif reference policy by default: ``agent.recurrent`` := ``method.recurrent`` (gru) when the
    agent has no core, and the message bytes in the observation (``env.message_obs``) on NetHack/MiniHack.
    ``method.recurrent=null`` keeps a feed-forward policy."""
    from omegaconf import open_dict

    with open_dict(cfg):
        if cfg.method.get("recurrent") and cfg.agent.get("recurrent") is None:
            cfg.agent.recurrent = str(cfg.method.recurrent)
        if str(cfg.env.name) in ("nethack", "minihack") and cfg.env.get("message_obs") is None:
            cfg.env.message_obs = True


def method_goal(cfg: Any) -> str | None:
    """The goal the labeller is prompted with: ``method.goal``; null → the task's goal
    (:func:`llmguide.envs.nethack.env.task_goal` of ``env.id``: the ONI/Motif reference's goal strings, e.g. the
    score goal on ``NetHackScore-v0``; none for MiniHack); ``""`` → no goal (task-agnostic prompts)."""
    goal = cfg.method.get("goal")
    if goal is not None:
        return str(goal) or None
    if str(cfg.env.name) in ("nethack", "minihack"):
        from llmguide.envs.nethack.oracle import task_goal

        return task_goal(cfg.env.get("id"))
    return None


def message_key(cfg: Any) -> str:
    """The info key that ONI and Motif read as the agent's message: ``message`` (the message line) on Crafter and
    Craftax-Classic, ``caption`` elsewhere (NetHack's and MiniHack's message line)."""
    return MESSAGE_LINES.get(str(cfg.env.name), "caption")


def family_templates(env_name: str) -> tuple[str | None, str | None, str | None]:
    """The labelling templates of an env family when ``method.template`` is null: (label in score mode, label in
    generate mode, pair); ``None`` entries leave the annotators' NetHack defaults."""
    from llmguide.methods.oni.prompts import FAMILY_TEMPLATES

    return FAMILY_TEMPLATES.get(str(env_name), (None, None, None))


def oracle_answers(cfg: Any) -> Any:
    """ONI's questions answered by the env's ground truth (``llm=oracle`` and its controls); with ``llm.target``
    (a task id) the oracle answers for that task's goal instead (wrong knowledge)."""
    from llmguide.envs import get_oracle
    from llmguide.methods.oni.oracle import ONIOracleAnswers

    target = cfg.llm.get("target")
    goal = None
    if target:
        from llmguide.envs.nethack.oracle import task_goal

        goal = (task_goal(str(target)) if str(cfg.env.name) in ("nethack", "minihack") else None) or str(target)
    return ONIOracleAnswers(get_oracle(str(cfg.env.name)), goal=goal)


def message_annotator(m: Any, service: Any, goal: str | None, family: str | None) -> Any:
    """The single-message labeller of ONI-retrieval / -classification (``m``: the method config): what a run asks
    its LM through ``service``, and what ``llmguide answers`` tables (``service=None``)."""
    from llmguide.methods.oni.annotator import MessageAnnotator

    score_t, generate_t, _ = family_templates(str(family))
    return MessageAnnotator(service, template=m.get("template") or (score_t if m.label_mode == "score" else generate_t),
                            mode=m.label_mode, max_tokens=int(m.max_tokens),
                            score_margin=float(m.get("score_margin", 1.0)), max_in_flight=int(m.max_in_flight),
                            yes_rate=None if m.get("label_rate") is None else float(m.label_rate), goal=goal)


def build_oni_module(method_cfg: Any, num_envs: int, service: Any, seed: int = 0,
                     goal: str | None = None, family: str | None = None,
                     message_key: str = "caption") -> RewardModule:
    """The reward module of an ONI method; ``service`` is the LLMService the annotator talks to, ``goal``
    the task's goal in the labelling prompt (:func:`method_goal`), ``family`` the env family (its prompts,
    :func:`family_templates`), ``message_key`` the info key of the message (:func:`message_key`)."""
    from llmguide.methods.oni.annotator import PairAnnotator
    from llmguide.methods.oni.ranking import ONIRanking
    from llmguide.methods.oni.reward import ONIClassification, ONIRetrieval

    m = method_cfg
    common = {"beta": float(m.beta), "count_scope": str(m.count_scope), "pending_default": float(m.pending_default),
              "canonicalize": bool(m.canonicalize), "message_key": message_key}
    _, _, pair_t = family_templates(str(family))
    if m.name == "oni_ranking":
        annot = PairAnnotator(service, template=m.template or pair_t or "motif_pref", mode=m.label_mode,
                              max_tokens=int(m.max_tokens), max_in_flight=int(m.max_in_flight), goal=goal,
                              both_orders=bool(m.get("both_orders", False)))
        return ONIRanking(annot, num_envs, threshold=float(m.threshold), pairs_per_batch=int(m.pairs_per_batch),
                          max_messages=int(m.max_messages), min_pairs=int(m.min_pairs), lr=float(m.lr),
                          batch_size=int(m.batch_size), steps_per_round=int(m.steps_per_round),
                          duty=float(m.duty), seed=seed,
                          clip_min=None if m.get("clip_min") is None else float(m.clip_min), **common)
    annot = message_annotator(m, service, goal, family)
    if m.name == "oni_classification":
        return ONIClassification(annot, num_envs, threshold=float(m.threshold), min_labels=int(m.min_labels),
                                 lr=float(m.lr), batch_size=int(m.batch_size),
                                 steps_per_round=int(m.steps_per_round), duty=float(m.duty), seed=seed, **common)
    return ONIRetrieval(annot, num_envs, **common)


def lm_metrics(service: Any, module: Any) -> dict[str, float]:
    """``lm/*`` as the LM service defines them, plus the annotator's counts and parse errors."""
    out: dict[str, float] = dict(service.lm_metrics()) if service is not None else {}
    annot = getattr(module, "annotator", None)
    if annot is not None:
        out.update({f"lm/annot_{k}": v for k, v in annot.metrics().items()})
        out["lm/parse_errors"] = float(sum(annot.stats.malformed.values()))
    return out


def answer_queries(cfg: Any, dataset: Any) -> list[Any]:
    """``llmguide answers``: the label requests an ONI run (retrieval or classification) with ``cfg`` sends for the
    messages of ``dataset`` (its ``messages``, or its captions where the caption is the message line), one
    :class:`~llmguide.llm.table.Query` per distinct message weighted by the steps that show it."""
    from collections import Counter

    from llmguide.llm.table import Query
    from llmguide.methods.oni.annotator import canonicalize_message

    m = cfg.method
    if m.name not in ("oni_retrieval", "oni_classification"):
        raise ConfigError("method", f"{m.name} asks about pairs sampled during training: no answer table yet "
                                    "(oni_retrieval and oni_classification label single messages)")
    key = message_key(cfg)
    counts: Counter = Counter()
    for episode in dataset:
        lines = episode.messages if key == "message" else episode.captions[1:]
        counts.update(str(x) for x in lines if x)
    if key == "message" and not counts:
        raise ConfigError("answers.data", "the dataset has no message line (collected before messages were "
                                          "recorded): collect it again")
    annot = message_annotator(m, None, method_goal(cfg), str(cfg.env.name))
    merged: Counter = Counter()
    for message, n in counts.items():
        merged[canonicalize_message(message) if bool(m.canonicalize) else message] += n
    out = []
    for message, n in merged.most_common():
        asked = annot.asked(message)
        if "candidates" in asked:
            out.append(Query("score", {**asked, "normalize": False}, float(n), message))
        else:
            out.append(Query("generate", {**asked, **annot.generate_kwargs()}, float(n), message))
    return out


class ONIRecipe(Recipe):
    """ONI (and ELLM-BoW): PPO with an intrinsic reward from online, asynchronous LM labels."""

    agents = ("ppo",)
    # the families with a message line, and your own env (env=gym: its caption is the message, method.goal the goal)
    env_families = ("minihack", "nethack", "crafter", "craftax", "gym")
    answer_queries = staticmethod(answer_queries)   # llmguide answers: the requests a table must hold
    lm_mode_key = "label_mode"
    # the keys that shape its LM requests; the answer tables built before each recipe declared its own were hashed
    # over ELLM's and ONI's keys together, so both declare all 13 (a key absent from the config counts as None)
    prompt_keys = ("suggester", "prompt", "vocabulary", "top_k", "max_tokens", "temperature", "normalize_scores",
                   "label_mode", "template", "goal", "canonicalize", "score_margin", "label_rate")

    @staticmethod
    def table_answerers(cfg: Any) -> list[Any]:
        """The ground truth ``llm=oracle`` (and its controls) answers these requests with."""
        return [oracle_answers(cfg)]

    def check(self) -> None:
        super().check()
        m = self.cfg.method
        if m.get("label_rate") is not None and m.get("label_mode") != "score":
            raise ConfigError("method.label_rate", "ranks the LM's yes-no score margins: it needs "
                                                   f"method.label_mode=score, not {m.get('label_mode')!r}")
        use_reference_policy(self.cfg)
        if str(self.cfg.env.name) == "gym" and not method_goal(self.cfg):
            raise ConfigError("method.goal", "env=gym: say what the agent should achieve (method.goal=\"...\"); "
                                             "the labeller knows nothing else of your game")

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        cfg = self.cfg
        if cfg.method.name == "ellm_bow":
            from llmguide.methods.oni.bow import build_ellm_bow

            module = build_ellm_bow(cfg.method, envs.single_observation_space, envs.single_action_space,
                                    envs.num_envs, message_key=message_key(cfg))
            return Parts(envs, [(float(cfg.method.intrinsic_coef), module)], float(cfg.method.extrinsic_coef),
                         closers=[module.close])
        from llmguide.pipelines.services import close_service, open_service

        service = open_service(cfg, answerers=[oracle_answers(cfg)])
        module = build_oni_module(cfg.method, envs.num_envs, service, int(cfg.seed), goal=method_goal(cfg),
                                  family=str(cfg.env.name), message_key=message_key(cfg))
        return Parts(envs, [(float(cfg.method.intrinsic_coef), module)], float(cfg.method.extrinsic_coef),
                     metrics=lambda: lm_metrics(service, module),
                     progress=LM_PROGRESS,
                     closers=[partial(close_service, service), module.close])

    def finish(self, parts: Parts, run: RunDir) -> None:
        """Training is over: let in-flight labels land in the cache."""
        annot = getattr(parts.modules[0][1], "annotator", None) if parts.modules else None   # ellm_bow has none
        if annot is not None and annot.pending:
            drained = annot.wait(float(self.cfg.method.get("drain_timeout", 60.0)))
            log.info("annotation drain at the end: %s", "complete" if drained else f"{annot.pending} left")
