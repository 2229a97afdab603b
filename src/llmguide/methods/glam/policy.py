"""GLAM's policy: the prompt, the LM scoring action strings, the value/action heads and LoRA.

The prompt (action list, goal, last ``k`` captions interleaved with the last actions) is encoded once
per context; each action string is scored by its summed token log-prob (proper log-softmax, padding
masked; :meth:`HFLM.score_with_hidden`), and the policy is the softmax over those scores.  A value head
(MLP) reads the context representation (last context token, or the decoder start state of a seq2seq
model), computed once per context.  Optional LoRA (peft) with the base model frozen.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

HEADER = "Possible action of the agent: "


# --- prompts -------------------------------------------------------------------------------------
def glam_prompt(goal: str, observations: Sequence[str], actions: Sequence[str],
                action_strings: Sequence[str], action_list: bool = True) -> str:
    """GLAM's prompt: action list, goal, then ``Observation i`` / ``Action i`` lines ending at ``Action n:``.

    ``observations`` holds the last k captions (oldest first, the current one last) and ``actions``
    the actions taken after all but the last of them.  Candidates are scored as ``" " + action``.
    ``action_list=False`` leaves out the header line naming the actions (a prompt variant of the prior probe).
    """
    if len(actions) != max(len(observations) - 1, 0):
        raise ValueError(f"need one action fewer than observations, got {len(observations)} and {len(actions)}")
    lines = [HEADER + ", ".join(action_strings), f" Goal of the agent: {goal}"] if action_list \
        else [f"Goal of the agent: {goal}"]
    for i, obs in enumerate(observations):
        lines.append(f" Observation {i}: {obs or 'You see nothing'}")
        lines.append(f" Action {i}:" + (f" {actions[i]}" if i < len(actions) else ""))
    return "\n".join(lines)


class History:
    """Per-env memory of the last ``k`` captions and the actions between them (cleared at episode end)."""

    def __init__(self, num_envs: int, k: int):
        if k < 1:
            raise ValueError(f"k_history must be >= 1, got {k}")
        self.k = k
        self.obs: list[deque[str]] = [deque(maxlen=k) for _ in range(num_envs)]
        self.actions: list[deque[str]] = [deque(maxlen=k - 1) for _ in range(num_envs)]
        self.goals = [""] * num_envs

    def reset(self, i: int, goal: str, caption: str) -> None:
        self.obs[i].clear()
        self.actions[i].clear()
        self.goals[i] = goal
        self.obs[i].append(caption)

    def step(self, i: int, action: str, caption: str) -> None:
        if self.k > 1:
            self.actions[i].append(action)
        self.obs[i].append(caption)

    def peek(self, i: int, action: str, caption: str, action_strings: Sequence[str]) -> str:
        """Env ``i``'s prompt after one more step, without recording it (the bootstrap at a time limit)."""
        obs, acts = deque(self.obs[i], maxlen=self.k), deque(self.actions[i], maxlen=max(self.k - 1, 0))
        if self.k > 1:
            acts.append(action)
        obs.append(caption)
        return glam_prompt(self.goals[i], list(obs), list(acts), action_strings)

    def prompts(self, action_strings: Sequence[str]) -> list[str]:
        return [glam_prompt(g, list(o), list(a), action_strings)
                for g, o, a in zip(self.goals, self.obs, self.actions, strict=True)]


# --- policy --------------------------------------------------------------------------------------
class MLPHead(nn.Module):
    """MLP ``d_model -> hidden -> hidden -> outputs`` (tanh) on the context representation."""

    def __init__(self, d_model: int, hidden: int = 1024, outputs: int = 1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, outputs))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h.float())


class ValueHead(MLPHead):
    """:class:`MLPHead` with one output, squeezed: ``(n, d_model) -> (n,)``."""

    def __init__(self, d_model: int, hidden: int = 1024):
        super().__init__(d_model, hidden, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return super().forward(h).squeeze(-1)


def d_model_of(hf_lm: Any) -> int:
    """Hidden size of the LM's last layer (``config.hidden_size`` or ``d_model``)."""
    config = hf_lm.model.config
    for key in ("hidden_size", "d_model"):
        value = getattr(config, key, None) or getattr(getattr(config, "text_config", None), key, None)
        if value:
            return int(value)
    raise ValueError(f"cannot find the hidden size in {type(config).__name__}")


def apply_lora(hf_lm: Any, r: int = 8, alpha: int = 16, dropout: float = 0.0,
               target_modules: Sequence[str] | None = None, last_layers: int = 0) -> None:
    """Wrap ``hf_lm.model`` with peft LoRA adapters; the base weights are frozen, the adapters train.

    ``target_modules`` None: peft's default modules for the architecture (attention query and value).
    ``last_layers > 0`` puts adapters only in the top ``last_layers`` transformer blocks: the blocks
    below carry no trainable weight, so autograd neither records nor back-propagates through them.
    """
    from peft import LoraConfig, TaskType, get_peft_model

    task = TaskType.SEQ_2_SEQ_LM if hf_lm.is_seq2seq else TaskType.CAUSAL_LM
    layers = None
    if last_layers > 0:
        config = hf_lm.model.config
        total = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "num_layers", 0)
                    or getattr(getattr(config, "text_config", None), "num_hidden_layers", 0))
        if not total:
            raise ValueError(f"cannot find the number of layers in {type(config).__name__}")
        layers = list(range(max(total - last_layers, 0), total))
    targets = list(target_modules) if target_modules else None
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type=task,
                        layers_to_transform=layers)
    hf_lm.model = get_peft_model(hf_lm.model, config)
    hf_lm.model.eval()   # no dropout: PPO ratios need deterministic log-probs
    hf_lm.trainable = True


class LMPolicy(nn.Module):
    """Text policy: softmax over the LM's summed log-probs of each action string, plus a value head.

    With ``action_head`` (an :class:`MLPHead` with one output per action; GLAM's NPAE/AFLAN ablations)
    the action logits come from that head on the context state instead; no action string is scored.
    ``action_strings`` may be reassigned (the synonym-action test does): prompts and candidates follow.
    """

    def __init__(self, hf_lm: Any, action_strings: Sequence[str], value_head: nn.Module | None = None,
                 normalize: bool = False, action_head: nn.Module | None = None, score_batch: int = 1):
        super().__init__()
        self.score_batch = score_batch   # > 1: that many prompts per forward (methods/glam/batched.py)
        if not action_strings:
            raise ValueError("action_strings is empty")
        self.lm = hf_lm
        self.action_strings = list(action_strings)
        head = value_head if value_head is not None else ValueHead(d_model_of(hf_lm))
        self.value_head = head.to(hf_lm.device)
        self.action_head = action_head.to(hf_lm.device) if action_head is not None else None
        self.normalize = normalize
        self.lm_module = hf_lm.model   # registered, so .parameters() / state_dict() include the LM

    @property
    def candidates(self) -> list[str]:
        """The scored continuations: each action string after a space."""
        return [" " + a for a in self.action_strings]

    def forward(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log-probs over actions (n, A), values (n,))`` for a batch of prompts."""
        logits, hidden = self.action_logits(prompts)
        return torch.log_softmax(logits, dim=-1), self.value_head(hidden)

    def action_logits(self, prompts: Sequence[str], lm: Any = None,
                      action_head: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action logits (n, A) in float32, context states)``; ``lm`` and ``action_head`` default to the
        policy's own (the device check passes a float32 CPU copy of them)."""
        lm = self.lm if lm is None else lm
        action_head = self.action_head if action_head is None else action_head
        if action_head is not None:
            hidden = lm.context_states(list(prompts))
            return action_head(hidden).float(), hidden
        from llmguide.methods.glam.batched import score_with_hidden

        scores, hidden = score_with_hidden(lm, list(prompts), [self.candidates] * len(prompts),
                                           normalize=self.normalize, batch=self.score_batch)
        return torch.stack(scores).float(), hidden

    def act(self, prompts: Sequence[str], greedy: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled (or greedy) action indices, their log-probs and the values, without gradients."""
        with torch.no_grad():
            logp, values = self(prompts)
        actions = logp.argmax(-1) if greedy else torch.distributions.Categorical(logits=logp).sample()
        chosen = logp.gather(1, actions[:, None]).squeeze(1)
        return actions.cpu().numpy(), chosen.cpu().numpy(), values.cpu().numpy()

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters that train (LoRA adapters or the whole LM, plus the value head)."""
        return {n: p.detach().cpu().clone() for n, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.named_parameters())
        missing = [n for n in state if n not in params]
        if missing:
            raise ValueError(f"checkpoint holds parameters this policy does not have: {missing[:3]}")
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value)
