"""PTGM pipeline: ``collect`` (BabyAI bot, many missions; on Crafter / Craftax an exploring RND agent)
→ ``codebook`` (hindsight goals + KMeans) → ``pretrain`` (goal-conditioned BC low level + goal priors) → ``train`` (PPO over codebook options
with the KL-to-prior reward, through the Runner).  Each step reads and writes run directories::

    llmguide collect  env=babyai method=ptgm method.collect.episodes=3000 run.name=ptgm-data
    llmguide codebook env=babyai method=ptgm method.data=runs/ptgm-data run.name=ptgm-codes
    llmguide pretrain env=babyai method=ptgm method.data=runs/ptgm-data method.codebook.run=runs/ptgm-codes run.name=ptgm-pre
    llmguide train    env=babyai env.task=BabyAI-UnlockPickup-v0 method=ptgm method.pretrained=runs/ptgm-pre

``method=ptgm_no_kl`` (kl.coef 0), ``ptgm_random_codes`` (k random data goals instead of KMeans
codes: the no-clustering ablation) and ``ptgm_bc_finetune`` (the unconditioned low level fine-tuned
by flat PPO) train from the same ``pretrained`` run.  ``codebook`` writes ``<run>/ptgm/codebook.npz``
and ``codebook_random.npz`` (same PCA goal space); ``pretrain`` copies both and writes
``lowlevel.pt``, ``prior_kmeans.pt``, ``prior_random.pt`` and ``manifest.json`` into ``<run>/ptgm/``.

Craftax (``env=craftax``, one batched JAX env)::

    llmguide collect  env=craftax num_envs=64 method=ptgm method.collect.agent_steps=200000 run.name=cx-data
    llmguide codebook env=craftax method=ptgm method.data=runs/cx-data run.name=cx-codes
    llmguide pretrain env=craftax method=ptgm method.data=runs/cx-data method.codebook.run=runs/cx-codes run.name=cx-pre
    llmguide train    env=craftax num_envs=64 method=ptgm method.pretrained=runs/cx-pre agent.num_steps=4

The data come from an exploring PPO+RND agent (:func:`collect_agent`); goals are the future semantic
view + inventory (:func:`~llmguide.methods.ptgm.goals.env_goal_features`); the low level and the prior
see the whole observation vector (no mission in it).  Training wraps the batched env in
:class:`~llmguide.methods.ptgm.options.AsyncOptionsVectorEnv` (each env runs its own option; they end at
different times) and learns with :class:`~llmguide.methods.ptgm.smdp.AsyncOptionPPO`, which sees
only the envs at decision points (``agent.num_steps`` = finished options per env per update).
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

from llmguide.core.config import one_of, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.methods.ptgm.gate import check_pretrained
from llmguide.methods.ptgm.steps import codebook, collect, pretrain, run_input
from llmguide.pipelines.runner import EVAL_SEED_OFFSET, Parts, Recipe, Step

log = logging.getLogger(__name__)

RECIPE = f"{__name__}:PTGMRecipe"   # this recipe as method YAMLs name it (method.recipe): its rules apply there
register_rule("method.mode", one_of("options", "bc_finetune"), recipe=RECIPE)
register_rule("method.codes", one_of("kmeans", "random"), recipe=RECIPE)
register_rule("method.collect.policy", one_of("ppo", "expert"), recipe=RECIPE)
register_rule("method.collect.expert_mode", one_of("data", "plain"), recipe=RECIPE)
register_rule("method.goal_source", one_of("medoid", "centroid"), recipe=RECIPE)
register_rule("method.kl.direction", one_of("policy_prior", "prior_policy"), recipe=RECIPE)
register_rule("method.kl.mode", one_of("reward", "loss"), recipe=RECIPE)


# --- train: the Runner's recipe --------------------------------------------------------------------
class PTGMRecipe(Recipe):
    """``mode: options``: PPO over ``Discrete(k)`` codebook options of ``option_steps`` env steps, reward
    ``r_env − kl.coef · KL``; ``mode: bc_finetune``: flat PPO from the unconditioned low level."""

    agents = ("ppo",)
    env_families = ("babyai", "craftax")
    steps = {"collect": Step(collect, "PTGM: collect a dataset (the BabyAI bot, or an exploring agent)"),
             "codebook": Step(codebook, "PTGM: hindsight goals of a collected dataset -> KMeans goal codebook"),
             "pretrain": Step(pretrain, "PTGM: goal-conditioned BC low level and goal prior from a dataset and a "
                                        "codebook")}

    def check(self) -> None:
        super().check()
        m = self.cfg.method
        if self.cfg.agent.get("recurrent"):
            raise ConfigError("agent.recurrent", "PTGM's high level is feed-forward (the KL needs π(·|s)); use null")
        manifest = json.loads((self.pre / "manifest.json").read_text())
        # a low level that failed the BC gate is never trained on (as BK's failed labels), unless told so
        check_pretrained(manifest, self.pre.parent, m.lowlevel.get("gate"))
        if str(m.mode) == "bc_finetune":
            hidden, enc = manifest["lowlevel_hidden"], manifest["image_encoder"]
            if int(self.cfg.agent.hidden) != int(hidden):
                raise ConfigError("agent.hidden", f"BC-finetune loads the low level (hidden {hidden}); set agent.hidden={hidden}")
            if str(self.cfg.agent.get("image_encoder", "cnn")) != enc:
                raise ConfigError("agent.image_encoder", f"BC-finetune loads the low level ({enc}); set agent.image_encoder={enc}")
        if int(m.option_steps) < 1:
            raise ConfigError("method.option_steps", f"must be >= 1, got {m.option_steps}")

    @property
    def async_options(self) -> bool:
        """Options per env on the batched env (``method.async_options``; null: env=craftax, whose envs all
        step in one call) or synchronous options over per-env sub-envs (BabyAI)."""
        value = self.cfg.method.get("async_options")
        return str(self.cfg.env.name) == "craftax" if value is None else bool(value)

    @property
    def pre(self) -> Path:
        """``<method.pretrained>/ptgm``, the pretrain run's files."""
        return run_input(self.cfg, "pretrained", "ptgm/manifest.json") / "ptgm"

    def _load(self, env_space) -> None:
        import torch

        from llmguide.methods.ptgm.goals import GoalCodebook
        from llmguide.methods.ptgm.models import GoalPrior, make_lowlevel
        from llmguide.methods.ptgm.options import DIRECTION_DIM, lowlevel_space

        if getattr(self, "lowlevel", None) is not None:
            return
        torch.set_num_threads(max(1, int(self.cfg.agent.get("torch_threads", 1) or 1)))
        kind = str(self.cfg.method.codes)
        self.book = GoalCodebook.load(self.pre / ("codebook.npz" if kind == "kmeans" else "codebook_random.npz"))
        ll = torch.load(self.pre / "lowlevel.pt", map_location="cpu", weights_only=True)
        self.goal_dim = int(ll["goal_dim"])
        self.state_dim = int(ll.get("state_dim", DIRECTION_DIM))
        self.lowlevel = make_lowlevel(lowlevel_space(env_space, self.goal_dim, self.state_dim), int(ll["n_actions"]),
                                      int(ll["hidden"]), str(ll["image_encoder"]))
        self.lowlevel.load_state_dict(ll["net"])
        self.lowlevel.eval()
        pr = torch.load(self.pre / f"prior_{kind}.pt", map_location="cpu", weights_only=True)
        self.prior = GoalPrior(env_space, int(pr["k"]), int(pr["hidden"]), str(pr["image_encoder"]),
                               int(pr.get("state_dim", DIRECTION_DIM)))
        self.prior.load_state_dict(pr["net"])
        self.prior.eval()

    def wrap(self, env, seed: int):
        """The method's view of one env: options over the codebook, or the unconditioned low-level input."""
        from llmguide.methods.ptgm.models import LowLevelActor
        from llmguide.methods.ptgm.options import GoalObservation, OptionsWrapper

        self._load(env.observation_space)
        m = self.cfg.method
        if str(m.mode) == "bc_finetune":
            return GoalObservation(env, self.goal_dim, state_dim=self.state_dim)
        actor = LowLevelActor(self.lowlevel, self.goal_dim, float(m.lowlevel.cfg_scale), bool(m.lowlevel.greedy), seed,
                              self.state_dim)
        return OptionsWrapper(env, actor, self.book.codes(str(m.goal_source)), int(m.option_steps))

    def _make(self, seed: int):
        from llmguide.envs import make_env

        return self.wrap(make_env(self.cfg.env, seed), seed)

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        from llmguide.envs import make_env
        from llmguide.methods.ptgm.models import LowLevelActor
        from llmguide.methods.ptgm.options import OptionsVectorEnv

        cfg, m = self.cfg, self.cfg.method
        self._load(envs.single_observation_space)
        if self.async_options:   # a batched env (Craftax): wrapped as it is, options per env (ends differ)
            from llmguide.methods.ptgm.options import AsyncOptionsVectorEnv, GoalObservationVector

            if str(m.mode) == "options":
                actor = LowLevelActor(self.lowlevel, self.goal_dim, float(m.lowlevel.cfg_scale),
                                      bool(m.lowlevel.greedy), int(cfg.seed), self.state_dim)
                venv = AsyncOptionsVectorEnv(envs, actor.batch, self.book.codes(str(m.goal_source)),
                                             int(m.option_steps))
            else:
                venv = GoalObservationVector(envs, self.goal_dim, self.state_dim)
            return self._parts(venv)
        envs.close()   # replaced by the method's envs (in-process: they share the frozen low level)
        seeds = [int(cfg.seed) + i for i in range(int(cfg.num_envs))]
        if str(m.mode) == "options":   # one batched low-level pass per env step over the N envs
            actor = LowLevelActor(self.lowlevel, self.goal_dim, float(m.lowlevel.cfg_scale), bool(m.lowlevel.greedy),
                                  int(cfg.seed), self.state_dim)
            venv = OptionsVectorEnv([partial(make_env, cfg.env, s) for s in seeds], actor.batch,
                                    self.book.codes(str(m.goal_source)), int(m.option_steps))
        else:
            venv = SyncVectorEnv([partial(self._make, s) for s in seeds], autoreset_mode=AutoresetMode.SAME_STEP)
        return self._parts(venv)

    def _parts(self, venv: Any) -> Parts:
        from llmguide.methods.ptgm.models import KLToPrior

        m = self.cfg.method
        parts = Parts(venv, extrinsic_coef=float(m.extrinsic_coef), closers=[venv.close])
        if str(m.mode) == "options":
            kl = KLToPrior(self.prior, str(m.kl.direction))
            # kl.mode=reward: reward = r_env − α·KL (PTGM's code); loss: α·KL is a loss term, the KL is only logged
            in_loss = str(m.kl.get("mode", "reward")) == "loss"
            parts.modules = [(0.0 if in_loss else -float(m.kl.coef), kl)]
            parts.metrics = lambda: {f"reward/kl_prior/{k}": v for k, v in kl.metrics().items()}
        return parts

    def make_agent(self, parts: Parts, run: RunDir | None) -> Any:
        from llmguide.learners.ppo import PPO
        from llmguide.methods.ptgm.models import KLToPrior, OptionPPO

        cfg = self.cfg
        kwargs = dict(reward_modules=parts.modules, extrinsic_coef=parts.extrinsic_coef, run=run,
                      seed=int(cfg.seed), device=str(cfg.device))
        if str(cfg.method.mode) == "options":
            if self.async_options:
                from llmguide.methods.ptgm.smdp import AsyncOptionPPO

                agent = AsyncOptionPPO(parts.envs, cfg.agent, option_discount=str(cfg.method.option_discount),
                                       **kwargs)
            else:
                agent = OptionPPO(parts.envs, cfg.agent, **kwargs)
            kl = next((m for _, m in parts.modules if isinstance(m, KLToPrior)), None)
            if kl is not None:
                kl.policy = agent.net
                if str(cfg.method.kl.get("mode", "reward")) == "loss":
                    coef = float(cfg.method.kl.coef)
                    agent.policy_penalty = lambda obs: coef * kl.loss(obs)
            return agent
        agent = PPO(parts.envs, cfg.agent, **kwargs)
        state = {k: v for k, v in self.lowlevel.state_dict().items() if not k.startswith("critic.")}
        agent.net.load_state_dict(state, strict=False)   # encoder, core and actor from BC; a fresh critic
        return agent

    def evaluate(self, agent: Any, episodes: int, greedy: bool) -> dict[str, Any]:
        from llmguide.learners.evaluation import evaluate

        return evaluate(agent, self.cfg.env, episodes, int(self.cfg.seed) + EVAL_SEED_OFFSET, greedy=greedy,
                        make_env_fn=lambda env_cfg, seed: self._make(seed))

    def load_for_eval(self, state: dict[str, Any]) -> Any:
        from types import SimpleNamespace

        probe = self._make(int(self.cfg.seed))
        spaces = SimpleNamespace(single_observation_space=probe.observation_space,
                                 single_action_space=probe.action_space, num_envs=int(self.cfg.num_envs))
        probe.close()
        agent = self.make_agent(Parts(spaces), None)
        agent.load_state_dict({**state, "reward_modules": []})
        return agent
