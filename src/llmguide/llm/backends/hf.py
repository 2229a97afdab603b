"""Local Hugging Face backend (transformers causal or seq2seq LM); trainable, for GLAM.

With no ``model_path`` the embedded Gemma 3 270M GGUF is de-quantised by transformers once and the
float weights are cached as safetensors (``save_pretrained`` of model and tokenizer) under
``${LLMGUIDE_MODEL_DIR:-~/.cache/llmguide/models}/gemma-3-270m/``; later loads read that folder.

Scoring follows Lamorel's pre-encoding, with a proper log-softmax: each context is run once
(``use_cache=True``), its key/value cache is repeated across that context's candidates, the candidates
run as one right-padded batch with an attention mask, and the candidate tokens' log-probs are
gathered, padding masked to 0, and summed.  Tokenisation boundary: as in the embedded backend, the
context (with BOS) and each candidate (no special tokens) are tokenised separately and concatenated.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llmguide.llm.backends.gguf_convert import convert_gguf, is_converted  # noqa: F401  (convert_gguf: re-exported)
from llmguide.llm.base import Completion, LanguageModel, check_score_args

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import torch

EMBEDDED_CACHE_NAME = "gemma-3-270m"


def model_dir() -> Path:
    """``$LLMGUIDE_MODEL_DIR`` or ``~/.cache/llmguide/models``: where converted model weights live."""
    return Path(os.environ.get("LLMGUIDE_MODEL_DIR") or Path.home() / ".cache" / "llmguide" / "models").expanduser()


def embedded_safetensors_dir() -> Path:
    """Folder holding the safetensors conversion of the embedded Gemma GGUF (may not exist yet)."""
    return model_dir() / EMBEDDED_CACHE_NAME


class HFLM(LanguageModel):
    """transformers model from a local path (or the embedded Gemma, converted once).  Thread-safe."""

    backend = "hf"

    def __init__(
        self,
        model_path: str | Path | None = None,
        gguf_file: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        trainable: bool = False,
        max_batch: int = 16,
        pretrained: bool = True,
        attn_implementation: str | None = None,
    ):
        """``pretrained=False``: the same architecture with random weights except the (pretrained) token
        embeddings, GLAM's NPAE baseline (``torch.manual_seed`` before the call fixes the draw).
        ``attn_implementation`` (None: transformers' default, sdpa): ``eager`` masks with a large negative number
        instead of a boolean mask, so the fully masked query rows of a left-padded batch stay finite in every
        kernel (the suspect in GLAM's non-finite gradients on a GPU: ``benchmarks/results/glam/gpu-h200-nanguard``)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if not hasattr(torch, dtype) or not isinstance(getattr(torch, dtype), torch.dtype):
            raise ValueError(f"unknown torch dtype {dtype!r} (use float32, bfloat16 or float16)")
        folder, gguf_kw = self._resolve(model_path, gguf_file)
        config = AutoConfig.from_pretrained(str(folder), **gguf_kw)
        self.is_seq2seq = bool(getattr(config, "is_encoder_decoder", False))
        auto = AutoModelForSeq2SeqLM if self.is_seq2seq else AutoModelForCausalLM
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), **gguf_kw)
        attn = {"attn_implementation": attn_implementation} if attn_implementation else {}
        self.model = auto.from_pretrained(str(folder), dtype=getattr(torch, dtype), **attn, **gguf_kw).to(device)
        if not pretrained:
            self.model = _random_init_keeping_embeddings(self.model, auto)
        self.model_id = Path(folder).name if not gguf_kw else Path(gguf_kw["gguf_file"]).stem
        self.model_path = Path(folder)
        self.device = torch.device(device)
        self.trainable = trainable
        self.max_batch = max_batch
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.model.eval()   # dropout off even when trainable: PPO ratios need deterministic log-probs
        self.model.requires_grad_(trainable)
        self._lock = threading.RLock()

    @staticmethod
    def _resolve(model_path: str | Path | None, gguf_file: str | None) -> tuple[Path, dict]:
        """Folder to load from, plus ``gguf_file=`` when loading a GGUF directly (converted once if embedded)."""
        if model_path is None and gguf_file is None:
            target = embedded_safetensors_dir()
            if not is_converted(target):
                from llmguide.llm.assets import embedded_gguf_path

                log.warning("converting the embedded Gemma GGUF to safetensors for the hf backend, once, into %s",
                            target)
                convert_gguf(embedded_gguf_path(), target)
            return target, {}
        if gguf_file is not None:
            gguf = Path(gguf_file).expanduser()
            if not gguf.is_absolute() and model_path is not None:
                gguf = Path(model_path).expanduser() / gguf
            if not gguf.is_file():
                raise FileNotFoundError(f"GGUF file not found: {gguf}")
            return gguf.parent, {"gguf_file": gguf.name}
        folder = Path(model_path).expanduser()  # type: ignore[arg-type]
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"no transformers model (config.json) in {folder}")
        return folder, {}

    def __repr__(self) -> str:
        return f"HFLM(model_path={str(self.model_path)!r}, device={str(self.device)!r}, trainable={self.trainable})"

    # --- tokens ------------------------------------------------------------------------------
    def _context_ids(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if not ids:
            raise ValueError("context tokenises to nothing and the tokenizer adds no BOS token")
        return ids

    def _candidate_ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # --- scoring -------------------------------------------------------------------------------
    def score_with_hidden(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per context, a tensor of candidate log-probs, and the ``(n_contexts, d_model)`` context states.

        The context state is the last layer's hidden state at the last context token (causal) or at the
        decoder start position (seq2seq), the same for every candidate.  Carries gradients when trainable.
        """
        import torch

        check_score_args(contexts, candidates)
        scores, hidden = [], []
        with self._lock, torch.set_grad_enabled(self.trainable and torch.is_grad_enabled()):
            for context, cands in zip(contexts, candidates, strict=True):
                ctx_ids = self._context_ids(context)
                cand_ids = [self._candidate_ids(c) for c in cands]
                row, h = self._score_one(ctx_ids, cand_ids)
                if normalize:
                    row = row / torch.tensor([max(len(c), 1) for c in cand_ids], device=row.device, dtype=row.dtype)
                scores.append(row)
                hidden.append(h)
        return scores, torch.stack(hidden)

    def score_tensors(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[torch.Tensor]:
        """Like :meth:`score` but returns one tensor per context (with gradients when trainable)."""
        return self.score_with_hidden(contexts, candidates, normalize=normalize)[0]

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Summed candidate token log-probs given each context (context encoded once)."""
        import torch

        with torch.no_grad():
            rows = self.score_tensors(contexts, candidates, normalize=normalize)
        return [[float(v) for v in row] for row in rows]

    def _shifted_batch(self, seqs: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """Right-padded inputs ``seq[:-1]``, targets ``seq[1:]`` and the mask of real input tokens."""
        import torch

        width = max(len(s) for s in seqs) - 1
        inputs = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        targets = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, seq in enumerate(seqs):
            inputs[j, : len(seq) - 1] = torch.tensor(seq[:-1])
            targets[j, : len(seq) - 1] = torch.tensor(seq[1:])
            mask[j, : len(seq) - 1] = 1
        return inputs.to(self.device), targets.to(self.device), mask.to(self.device)

    @staticmethod
    def _gather(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-position log_softmax(logits)[target] (computed in float32)."""
        import torch

        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return logp

    def _score_one(self, ctx_ids: list[int], cand_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal LM: one pass over the context gives the context state and every candidate's first-token
        log-prob; only candidates longer than one token run again, on top of the cached context."""
        import torch

        if self.is_seq2seq:
            return self._score_one_seq2seq(ctx_ids, cand_ids)
        model = self.model
        res = model(torch.tensor([ctx_ids], device=self.device), use_cache=True, logits_to_keep=1,
                    output_hidden_states=True)
        hidden = res.hidden_states[-1][0, -1]
        first = torch.log_softmax(res.logits[0, -1].float(), dim=-1)
        out = torch.zeros(len(cand_ids), device=self.device)
        real = [j for j, c in enumerate(cand_ids) if c]
        if real:
            heads = torch.tensor([cand_ids[j][0] for j in real], device=self.device)
            out = out.index_put((torch.tensor(real, device=self.device),), first[heads])
        longer = [j for j in real if len(cand_ids[j]) > 1]
        for start in range(0, len(longer), self.max_batch):
            chunk = longer[start : start + self.max_batch]
            seqs = [cand_ids[j] for j in chunk]
            inputs, targets, mask = self._shifted_batch(seqs)
            n = inputs.shape[0]
            mask = torch.cat([torch.ones((n, len(ctx_ids)), dtype=mask.dtype, device=mask.device), mask], 1)
            logits = model(inputs, attention_mask=mask, past_key_values=_repeat_cache(res.past_key_values, n),
                           use_cache=True).logits
            out = out + self._candidate_sums(len(cand_ids), chunk, logits, targets, [len(s) - 1 for s in seqs])
        return out, hidden

    def _score_one_seq2seq(self, ctx_ids: list[int], cand_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        model = self.model
        from transformers.modeling_outputs import BaseModelOutput

        enc = model.get_encoder()(input_ids=torch.tensor([ctx_ids], device=self.device))
        start_id = self._decoder_start()
        real = [j for j, c in enumerate(cand_ids) if c]
        out = torch.zeros(len(cand_ids), device=self.device)
        hidden = None
        for start in range(0, max(len(real), 1), self.max_batch):
            chunk = real[start : start + self.max_batch] or []
            seqs = [[start_id, *cand_ids[j]] for j in chunk] or [[start_id, start_id]]
            inputs, targets, mask = self._shifted_batch(seqs)
            n = inputs.shape[0]
            enc_states = enc.last_hidden_state.expand(n, -1, -1)
            res = model(encoder_outputs=BaseModelOutput(last_hidden_state=enc_states), decoder_input_ids=inputs,
                        decoder_attention_mask=mask,
                        output_hidden_states=True)
            if hidden is None:
                hidden = res.decoder_hidden_states[-1][0, 0]
            if chunk:
                out = out + self._candidate_sums(len(cand_ids), chunk, res.logits, targets, [len(s) - 1 for s in seqs])
        return out, hidden

    def _candidate_sums(self, size: int, chunk: list[int], logits, targets, lengths: list[int]):
        """A ``(size,)`` tensor holding, at ``chunk``, each row's summed target log-probs (padding masked)."""
        import torch

        logp = self._gather(logits, targets)
        keep = torch.arange(targets.shape[1], device=self.device)[None, :] < torch.tensor(lengths, device=self.device)[:, None]
        return torch.zeros(size, device=self.device).index_put((torch.tensor(chunk, device=self.device),),
                                                               (logp * keep).sum(1))

    def _decoder_start(self) -> int:
        start = self.model.config.decoder_start_token_id
        return self.pad_id if start is None else int(start)

    def context_states(self, contexts: Sequence[str]) -> torch.Tensor:
        """``(n, d_model)`` context representations without scoring candidates (NPAE's action heads read them).

        The same state :meth:`score_with_hidden` returns: last-layer hidden state at the last context
        token (causal) or at the decoder start position (seq2seq).  Carries gradients when trainable.
        """
        if not contexts:
            raise ValueError("contexts is empty")
        return self.score_with_hidden(contexts, [[] for _ in contexts])[1]

    def naive_score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Reference scorer: one full forward of ``context + candidate`` per candidate, no prefix reuse."""
        import torch

        results = []
        with self._lock, torch.no_grad():
            for context, cands in zip(contexts, candidates, strict=True):
                ctx_ids = self._context_ids(context)
                row = []
                for cand in cands:
                    ids = self._candidate_ids(cand)
                    if not ids:
                        row.append(0.0)
                        continue
                    if self.is_seq2seq:
                        start_id = self._decoder_start()
                        res = self.model(input_ids=torch.tensor([ctx_ids], device=self.device),
                                         decoder_input_ids=torch.tensor([[start_id, *ids[:-1]]], device=self.device))
                        logits = res.logits[0]
                    else:
                        seq = torch.tensor([[*ctx_ids, *ids[:-1]]], device=self.device)
                        logits = self.model(seq, logits_to_keep=len(ids)).logits[0]
                    total = float(self._gather(logits, torch.tensor(ids, device=self.device)).sum())
                    row.append(total / len(ids) if normalize else total)
                results.append(row)
        return results

    # --- generation ----------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per prompt (greedy at ``temperature=0``); text cut at the first stop string."""
        import torch

        out = []
        with self._lock, torch.no_grad():
            for prompt in prompts:
                ids = torch.tensor([self._context_ids(prompt)], device=self.device)
                if seed is not None:
                    torch.manual_seed(seed)
                kwargs = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
                gen = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                    pad_token_id=self.pad_id, top_k=None, top_p=None, **kwargs,
                )
                new = gen[0] if self.is_seq2seq else gen[0, ids.shape[1] :]
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                finish = "length" if len(new) >= max_tokens else "stop"
                for s in stop or ():
                    if s and s in text:
                        text, finish = text[: text.index(s)], "stop"
                out.append(Completion(text=text, prompt_tokens=ids.shape[1], completion_tokens=len(new),
                                      finish_reason=finish))
        return out


def _random_init_keeping_embeddings(model, auto):
    """A freshly initialised copy of ``model``'s architecture that keeps its input token embeddings."""
    import torch

    fresh = auto.from_config(model.config).to(device=model.device, dtype=model.dtype)
    with torch.no_grad():
        fresh.get_input_embeddings().weight.copy_(model.get_input_embeddings().weight)
    fresh.generation_config = model.generation_config
    return fresh


def _repeat_cache(past, n: int):
    """A key/value cache holding the context ``n`` times along the batch axis; ``past`` stays untouched.

    Layers are copied shallowly (new layer objects, same tensors), so autograd still reaches the context.
    """
    import copy

    cache = copy.copy(past)
    cache.layers = [copy.copy(layer) for layer in past.layers]
    cache.batch_repeat_interleave(n)
    return cache
