"""ELLM pipeline: ``llmguide train method=ellm`` (and the ellm_oracle / ellm_all_goals presets).

Modes (``method.mode``):

* ``pretrain``: train on the ELLM goal reward (``intrinsic_coef``) plus ``extrinsic_coef`` times
  the env reward (0 by default: the intrinsic reward replaces it), goal-conditioned on the
  current suggestion.
* ``finetune``: load a pretrained ELLM run's agent (``method.pretrained=RUN_DIR``) and train it
  on one Crafter task (``env.task=...``, +1 and the episode ends on success), conditioned on the
  task's goal; the ELLM reward may be kept with ``method.finetune_intrinsic_coef``.
* ``guided``: a fresh DQN agent learns the task; when it explores (ε), the pretrained agent
  picks the exploratory action with probability ``method.guide_prob``.

The recipe adds :class:`~llmguide.methods.ellm.wrapper.ELLMGoalWrapper` (suggestions, goal
observation) and :class:`~llmguide.methods.ellm.suggester.ELLMReward` (an ordinary reward module, weighted by
``intrinsic_coef``).  Metrics: the learner's episode records (``charts/episodic_return`` is the env
return; the ELLM reward is ``charts/intrinsic_reward/ellm``), plus every ``log_every`` steps ``lm/*``
(the LM service's definitions, plus the suggester's ``lm/parse_errors``) and ``ellm/*`` (suggestion
quality good / ill_timed / impossible / unparseable, requests, pending, goals paid).  Evaluation runs
greedy episodes with the same suggester and goal conditioning.
"""

from __future__ import annotations

import logging
from functools import cached_property, partial
from typing import Any

from llmguide.core.config import in_range, non_negative, one_of, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.methods.ellm.reward import ELLMReward, GoalMatcher, nearest_goal_map
from llmguide.methods.ellm.suggester import SUGGESTERS, GoalSuggester
from llmguide.methods.ellm.transfer import load_weights, pretrained_state, task_goal
from llmguide.methods.ellm.wrapper import ELLMGoalWrapper
from llmguide.pipelines.runner import EVAL_SEED_OFFSET, Parts, Recipe
from llmguide.pipelines.services import LM_PROGRESS, close_service

log = logging.getLogger(__name__)

MODES = ("pretrain", "finetune", "guided")
RECIPE = f"{__name__}:ELLMRecipe"   # this recipe as method YAMLs name it (method.recipe): its rules apply there
for _key, _rule in {
    "method.mode": one_of(*MODES),
    "method.suggester": one_of(*SUGGESTERS, "all_actions"),
    "method.vocabulary": one_of("goals", "actions"),
    "method.match_on": one_of("auto", "events", "action"),
    "method.top_k": positive,
    "method.threshold": in_range(-1.0, 1.0),
    "method.match": one_of("cosine", "exact"),
    "method.payment": one_of("one", "cosine"),
    "method.embedder": one_of("minilm", "bow"),
    "method.goal_choice": one_of("joined", "random", "first"),
    "method.guide_prob": in_range(0.0, 1.0),
    "method.finetune_intrinsic_coef": non_negative,
    "method.memo_size": positive,
}.items():
    register_rule(_key, _rule, recipe=RECIPE)


_EMBEDDERS: dict[str, Any] = {}


def _embedder(kind: str) -> Any:
    """The sentence embedder, loaded once per process (training and evaluation share it)."""
    if kind not in _EMBEDDERS:
        from llmguide.llm.embeddings import make_embedder

        _EMBEDDERS[kind] = make_embedder(kind)
    return _EMBEDDERS[kind]


def lm_metrics(service: Any, suggester: GoalSuggester) -> dict[str, float]:
    """``lm/*`` as the LM service defines them, plus the suggester's parse errors and fallbacks."""
    out: dict[str, float] = service.lm_metrics() if service is not None else {"lm/calls": 0.0, "lm/hit_rate": 0.0}
    parse = suggester.parse_stats
    out["lm/parse_errors"] = float(sum(parse.malformed.values())) if parse is not None else 0.0
    out["lm/suggester_fallbacks"] = float(suggester.stats.fallbacks)
    return out


def suggester_vocabulary(cfg: Any, oracle: Any) -> tuple[str, list[str]]:
    """(suggester mode, goal vocabulary): the env's achievement goals, or every action string (open)."""
    m = cfg.method
    text_actions = str(cfg.env.get("actions") or "primitive") == "text"
    mode, vocabulary = str(m.suggester), list(oracle.goals)
    if str(m.vocabulary) == "actions":   # open vocabulary: the LM ranks every action string, not the 22
        if not text_actions:
            raise ConfigError("method.vocabulary", "the action-string vocabulary needs env.actions=text")
        from llmguide.envs.crafter.actions import ACTION_STRINGS

        vocabulary = list(ACTION_STRINGS)
    if mode == "all_actions":   # the novelty baseline: every action string is a goal
        from llmguide.envs.crafter.actions import ACTION_STRINGS

        mode, vocabulary = "all_goals", list(ACTION_STRINGS)
    return mode, vocabulary


def prompt_template(m: Any) -> Any:
    """The prompt of ``method.suggester`` (``method.prompt`` names another template of this package)."""
    from llmguide.methods.ellm.prompts import template

    default = "ellm_goals" if str(m.suggester) == "generate" else "ellm_goal_score"
    return template(str(m.get("prompt") or default))


def answer_queries(cfg: Any, dataset: Any) -> list[Any]:
    """``llmguide answers``: the LM requests an ELLM run with ``cfg`` sends for the states of ``dataset`` (an
    :class:`~llmguide.data.EpisodeDataset`): :func:`signature_queries` of every state an agent acted in."""
    return signature_queries(cfg, [c for episode in dataset for c in episode.captions[:-1]])


def signature_queries(cfg: Any, captions: Any) -> list[Any]:
    """The LM requests an ELLM run with ``cfg`` sends for the states whose captions are ``captions`` (one per
    step), one :class:`~llmguide.llm.table.Query` per state signature weighted by its steps."""
    from collections import Counter

    from llmguide.envs import get_oracle
    from llmguide.llm.table import Query
    from llmguide.methods.ellm.signature import goal_request, state_signature

    m = cfg.method
    if str(m.suggester) not in ("generate", "score"):
        raise ConfigError("method.suggester", f"suggester={m.suggester} asks no LM: an answer table needs "
                                              "generate or score")
    text_actions = str(cfg.env.get("actions") or "primitive") == "text"
    mode, vocabulary = suggester_vocabulary(cfg, get_oracle(str(cfg.env.name), "text" if text_actions else "primitive"))
    template = prompt_template(m)
    counts = Counter(state_signature(str(c)).caption() for c in captions if c)
    out = []
    for caption, n in counts.most_common():
        kind, payload = goal_request(mode, template, caption, vocabulary, max_tokens=int(m.max_tokens),
                                     temperature=float(m.temperature), normalize=bool(m.normalize_scores))
        out.append(Query(kind, payload, float(n), caption))
    return out


class ELLMRecipe(Recipe):
    """ELLM: goal suggestions → goal-conditioned agent paid for achieving them."""

    env_families = ("crafter", "craftax")
    answer_queries = staticmethod(answer_queries)   # llmguide answers: the requests a table must hold
    lm_mode_key = "suggester"
    # the keys that shape its LM requests; the answer tables built before each recipe declared its own were hashed
    # over ELLM's and ONI's keys together, so both declare all 13 (a key absent from the config counts as None)
    prompt_keys = ("suggester", "prompt", "vocabulary", "top_k", "max_tokens", "temperature", "normalize_scores",
                   "label_mode", "template", "goal", "canonicalize", "score_margin", "label_rate")

    @cached_property
    def pretrained(self) -> dict[str, Any]:
        """finetune / guided: the pretrained ELLM agent's state (``method.pretrained``)."""
        return pretrained_state(self.cfg)

    def check(self) -> None:
        super().check()
        m = self.cfg.method
        if str(m.mode) in ("finetune", "guided"):
            task_goal(self.cfg)
            if not self.pretrained:   # loads (and checks) the pretrained run before any compute
                raise ConfigError("method.pretrained", "the pretrained run holds no agent state")
            if str(m.mode) == "guided" and str(self.cfg.agent.name) != "dqn":
                raise ConfigError("agent.name", "method.mode=guided replaces ε-exploration actions: use agent=dqn")

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        from llmguide.envs import get_oracle

        cfg, m = self.cfg, self.cfg.method
        task = str(m.mode) in ("finetune", "guided")
        text_actions = str(cfg.env.get("actions") or "primitive") == "text"
        oracle = get_oracle(str(cfg.env.name), "text" if text_actions else "primitive")
        match_on = str(m.match_on) if m.match_on != "auto" else ("action" if text_actions else "events")
        if match_on == "action" and not text_actions:
            raise ConfigError("method.match_on", "matching the action string needs env.actions=text")
        mode, vocabulary = suggester_vocabulary(cfg, oracle)
        embedder = _embedder(str(m.embedder))
        service = template = None
        if m.suggester in ("generate", "score"):
            from llmguide.pipelines.services import open_service

            service = open_service(cfg)
            template = prompt_template(m)
        grade_matcher = GoalMatcher(embedder, "cosine")
        canonical = nearest_goal_map(grade_matcher, oracle.goals, float(m.threshold))
        suggester = GoalSuggester(
            mode, envs.num_envs, vocabulary, oracle=oracle, service=service, template=template,
            top_k=int(m.top_k), max_tokens=int(m.max_tokens), temperature=float(m.temperature),
            normalize_scores=bool(m.normalize_scores), grade_map=lambda g: oracle.canonical(g) or canonical(g),
            memo_size=int(m.memo_size), warm_start=bool(m.get("warm_start", True)), seed=int(cfg.seed),
            wait=service is not None and bool(cfg.llm.get("table")))
        reward = ELLMReward(GoalMatcher(embedder, str(m.match)), envs.num_envs, float(m.threshold), str(m.payment),
                            match_on=match_on, require_success=bool(m.require_success))
        wrapped = ELLMGoalWrapper(envs, suggester, reward, grade_matcher, goal_conditioned=bool(m.goal_conditioned),
                                  goal_choice=str(m.goal_choice), fixed_goal=task_goal(cfg) if task else None,
                                  seed=int(cfg.seed))
        coef = float(m.finetune_intrinsic_coef) if task else float(m.intrinsic_coef)
        parts = Parts(wrapped, [(coef, reward)], 1.0 if task else float(m.extrinsic_coef),
                      metrics=lambda: {**wrapped.metrics(), **lm_metrics(service, suggester)},
                      progress=LM_PROGRESS)
        if service is not None:   # closers run last first: the suggester, then the service, then the LM
            parts.closers.append(partial(close_service, service))
        parts.closers.append(suggester.close)
        return parts

    def make_agent(self, parts: Parts, run: RunDir | None) -> Any:
        agent = super().make_agent(parts, run)
        if str(self.cfg.method.mode) == "guided" and run is not None:
            guide = super().make_agent(Parts(parts.envs), None)
            load_weights(guide, self.pretrained)
            agent.set_exploration_policy(lambda obs: guide.act(obs, greedy=True), float(self.cfg.method.guide_prob))
        return agent

    def prepare(self, agent: Any, run: RunDir) -> None:
        if str(self.cfg.method.mode) == "finetune":
            load_weights(agent, self.pretrained)

    def evaluate(self, agent: Any, episodes: int, greedy: bool) -> dict[str, Any]:
        """Episodes on one env with the same suggester and goal conditioning as in training."""
        from llmguide.envs import make_vector_env
        from llmguide.learners.evaluation import evaluate_vector

        seed = int(self.cfg.seed) + EVAL_SEED_OFFSET
        if episodes <= 0:
            return {"episodes": 0, "greedy": greedy}
        parts = self.build(make_vector_env(self.cfg.env, 1, seed, "sync"), None)
        try:
            results = evaluate_vector(agent, parts.envs, episodes, seed, greedy, parts.modules)
            return {**results, **parts.metrics()}
        finally:
            parts.close()
            parts.envs.close()

    def load_for_eval(self, state: dict[str, Any]) -> Any:
        from llmguide.envs import make_vector_env

        parts = self.build(make_vector_env(self.cfg.env, 1, int(self.cfg.seed), "sync"), None)
        try:
            agent = super().make_agent(Parts(parts.envs), None)
        finally:
            parts.close()
            parts.envs.close()
        agent.load_state_dict({**state, "reward_modules": []})
        return agent
