"""GLAM recipe: ``llmguide train env=babyai method=glam llm=hf ...`` (and ``method=npae``).

HFLM (pretrained, or random weights with pretrained embeddings for NPAE; LoRA adapters when
``method.lora``) → :class:`LMPolicy` (scored action strings, or action heads) → optional behavioural
cloning on BabyAI-bot demonstrations (``method.bc_episodes``) → :class:`GLAMPPO` with the settings of
``agent=glam`` (skipped with ``method.ppo=false``: GLAM's BC-Bot baseline) → greedy and sampled
evaluation, plus the generalisation tests named in ``method.post_tests``.  The Runner does the rest.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from llmguide.core.config import non_negative, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.learners.on_policy import DEPRECATED_KEYS
from llmguide.methods.glam.text_policy import TextPolicyRecipe
from llmguide.pipelines.runner import Parts

log = logging.getLogger(__name__)

BC_SEED_OFFSET = 20_000   # demonstrations come from other layouts than training and evaluation

for _key in ("k_history", "lora_r", "lora_alpha", "value_hidden", "bc_epochs", "bc_lr", "bc_minibatch"):
    register_rule(f"method.{_key}", positive)
for _key in ("lora_dropout", "bc_episodes", "lora_last_layers"):
    register_rule(f"method.{_key}", non_negative)
for _key in ("lr", "reward_scale"):
    register_rule(f"agent.{_key}", positive)
for _key in DEPRECATED_KEYS:   # GLAM's old names (agent.num_steps, ...: learners/__init__.py): null or > 0
    register_rule(f"agent.{_key}", lambda value: None if value is None else positive(value))
for _key in ("vf_coef", "ent_coef", "max_grad_norm", "torch_threads"):
    register_rule(f"agent.{_key}", non_negative)


class GLAMRecipe(TextPolicyRecipe):
    """GLAM / NPAE / BC-Bot: an LM policy fine-tuned with PPO."""

    agents = ("glam",)
    env_families = ("babyai",)

    def check(self) -> None:
        super().check()
        m, llm = self.cfg.method, self.cfg.llm
        if llm.backend != "hf":
            raise ConfigError("llm", f"method={m.name} needs a trainable local model (llm=hf), got llm.backend={llm.backend}")
        if not m.pretrained and m.lora:
            raise ConfigError("method.lora", "LoRA on a randomly initialised LM (method.pretrained=false) trains "
                                             "almost nothing; set method.lora=false")

    def build_policy(self) -> Any:
        """HFLM from ``cfg.llm`` (trainable), LoRA-wrapped if ``method.lora``, as an :class:`LMPolicy`."""
        from llmguide.envs.babyai.env import ACTION_STRINGS
        from llmguide.llm.backends.hf import HFLM
        from llmguide.methods.glam.device import default_dtype, require_device
        from llmguide.methods.glam.policy import LMPolicy, MLPHead, ValueHead, apply_lora, d_model_of

        m, llm = self.cfg.method, self.cfg.llm
        if (reason := require_device(str(llm.device))) is not None:
            raise ConfigError("llm.device", reason)
        dtype = default_dtype(str(llm.device)) if str(llm.dtype) == "auto" else str(llm.dtype)
        lm = HFLM(model_path=llm.get("model_path"), gguf_file=llm.get("gguf_file"), device=str(llm.device),
                  dtype=dtype, trainable=not m.lora, max_batch=int(llm.max_batch),
                  pretrained=bool(m.pretrained), attn_implementation=llm.get("attn_implementation"))
        if m.lora:
            apply_lora(lm, r=int(m.lora_r), alpha=int(m.lora_alpha), dropout=float(m.lora_dropout),
                       target_modules=m.lora_targets, last_layers=int(m.lora_last_layers))
        d_model = d_model_of(lm)
        head = ValueHead(d_model, int(m.value_hidden)).to(lm.device)
        actions = MLPHead(d_model, int(m.value_hidden), len(ACTION_STRINGS)) if m.action_heads else None
        return LMPolicy(lm, ACTION_STRINGS, head, normalize=bool(m.normalize_scores), action_head=actions,
                        score_batch=int(m.get("score_batch", 1)))

    def load_policy(self, agent_state: dict[str, Any]) -> None:
        self.policy.load_trainable_state(agent_state["policy"])

    def make_agent(self, parts: Parts, run: RunDir | None) -> Any:
        from llmguide.methods.glam.learner import GLAMPPO

        settings = {**OmegaConf.to_container(self.cfg.agent, resolve=True), "k_history": int(self.cfg.method.k_history)}
        return GLAMPPO(parts.envs, self.policy, settings, run=run, seed=int(self.cfg.seed))

    def prepare(self, agent: Any, run: RunDir) -> None:
        if agent.device_check:   # before behavioural cloning too: it trains on the same numbers
            agent.check_device()
        if int(self.cfg.method.bc_episodes) > 0:
            clone_bot(self.policy, self.cfg, run)

    def learns(self) -> bool:
        return bool(self.cfg.method.ppo)


def clone_bot(policy: Any, cfg: Any, run: RunDir) -> None:
    """Behavioural cloning on ``method.bc_episodes`` BabyAI-bot episodes; logs ``bc/*`` at step 0."""
    from llmguide.envs.babyai.env import bot_demonstrations
    from llmguide.methods.glam.learner import behaviour_clone, demonstration_samples

    m = cfg.method
    demos = bot_demonstrations(cfg.env, int(m.bc_episodes), int(cfg.seed) + BC_SEED_OFFSET)
    prompts, actions = demonstration_samples(demos, policy.action_strings, int(m.k_history))
    if not prompts:
        raise RuntimeError("the BabyAI bot produced no demonstration steps")
    losses = behaviour_clone(policy, prompts, actions, epochs=int(m.bc_epochs), minibatch=int(m.bc_minibatch),
                             lr=float(m.bc_lr), seed=int(cfg.seed))
    tail = losses[-max(1, len(losses) // 10):]
    run.log(0, {"bc/samples": float(len(prompts)), "bc/loss_first": float(losses[0]),
                "bc/loss_last": float(np.mean(tail)), "bc/demo_success": float(np.mean([d["success"] for d in demos]))})
    log.info("behavioural cloning: %d samples, loss %.3f -> %.3f", len(prompts), losses[0], np.mean(tail))
