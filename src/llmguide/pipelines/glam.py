"""GLAM pipeline: ``llmguide train env=babyai method=glam llm=hf ...``.

seed -> run dir -> BabyAI-Text vector env -> HFLM (trainable; LoRA adapters when ``method.lora``) ->
:class:`LMPolicy` -> :class:`GLAMPPO` (resume from ``checkpoints/latest.pt`` with ``run.resume=true``)
-> final checkpoint -> greedy and sampled evaluation into ``eval.json``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from omegaconf import DictConfig

from llmguide.core.config import non_negative, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.core.seeding import seed_everything

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000

for _key in ("k_history", "lora_r", "lora_alpha", "value_hidden", "rollout_steps", "epochs", "minibatch", "lr",
             "reward_scale"):
    register_rule(f"method.{_key}", positive)
for _key in ("vf_coef", "ent_coef", "max_grad_norm", "lora_dropout", "torch_threads"):
    register_rule(f"method.{_key}", non_negative)


def build_policy(cfg: DictConfig) -> Any:
    """HFLM from ``cfg.llm`` (trainable), LoRA-wrapped if ``method.lora``, as an :class:`LMPolicy`."""
    from llmguide.envs.babyai_text import ACTION_STRINGS
    from llmguide.learners.llm_policy import LMPolicy, ValueHead, apply_lora, d_model_of
    from llmguide.llm.hf import HFLM

    m, llm = cfg.method, cfg.llm
    if llm.backend != "hf":
        raise ConfigError("llm", f"method=glam needs a trainable local model (llm=hf), got llm.backend={llm.backend}")
    if cfg.env.name != "babyai":
        raise ConfigError("env", f"method=glam runs on BabyAI-Text (env=babyai), got env={cfg.env.name}")
    lm = HFLM(model_path=llm.get("model_path"), gguf_file=llm.get("gguf_file"), device=str(llm.device),
              dtype=str(llm.dtype), trainable=not m.lora, max_batch=int(llm.max_batch))
    if m.lora:
        apply_lora(lm, r=int(m.lora_r), alpha=int(m.lora_alpha), dropout=float(m.lora_dropout),
                   target_modules=list(m.lora_targets))
    head = ValueHead(d_model_of(lm), int(m.value_hidden)).to(lm.device)
    return LMPolicy(lm, ACTION_STRINGS, head, normalize=bool(m.normalize_scores))


def train(cfg: DictConfig) -> int:
    """Train a GLAM agent; writes metrics, checkpoints and ``eval.json`` into the run dir; returns 0."""
    from llmguide.envs import make_vector_env
    from llmguide.learners.llm_policy import GLAMPPO, evaluate_policy

    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    if int(cfg.method.torch_threads) > 0:
        torch.set_num_threads(int(cfg.method.torch_threads))
    policy = build_policy(cfg)
    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        try:
            agent = GLAMPPO(envs, policy, cfg.method, run=run, seed=int(cfg.seed))
            state = run.load_checkpoint() if cfg.run.resume else None
            if state is not None:
                agent.load_state_dict(state["agent"])
                run.truncate_metrics_after(int(state["step"]))
                log.info("resumed %s at step %d", run.path, agent.global_step)
            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress), checkpoint_every=int(cfg.checkpoint_every))
            run.save_checkpoint({"agent": agent.state_dict()}, agent.global_step)
        finally:
            envs.close()
        episodes, seed, k = int(cfg.eval.episodes), int(cfg.seed) + EVAL_SEED_OFFSET, int(cfg.method.k_history)
        results: dict[str, Any] = {"step": agent.global_step,
                                   **evaluate_policy(policy, cfg.env, episodes, seed, k, greedy=bool(cfg.eval.greedy))}
        run.write_json("eval.json", results)
        run.log(agent.global_step, {f"eval/{k}": v for k, v in results.items() if isinstance(v, float)})
    return 0
