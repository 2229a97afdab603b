"""De-quantise a GGUF with transformers into a safetensors folder, and check that the tokenizer it converts is
the GGUF's own (transformers 5.17 made Gemma 3's into a BOS-less, one-token-per-character Unigram model: the
model ran, its distributions were off; measured in benchmarks/results/glam/gpu-h200/)."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

from llmguide.core.errors import LLMGuideError


def is_converted(folder: Path) -> bool:
    """``folder`` holds a converted model: its ``config.json`` and safetensors weights."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def convert_gguf(gguf: Path, target: Path) -> Path:
    """De-quantise ``gguf`` with transformers and save model + tokenizer as safetensors into ``target``.

    Written into a temporary sibling folder and renamed, so a concurrent reader never sees half a model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if (reason := gguf_tokenizer_error(tokenizer, gguf)) is not None:
        import transformers

        raise LLMGuideError(f"the tokenizer transformers {transformers.__version__} converted from {gguf.name} "
                            f"is not the GGUF's own: {reason}; upgrade transformers (5.24 converts Gemma 3 right, "
                            "5.17 does not)")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The weights are plain floats now; drop the GGUF "quantizer" marker so save_pretrained accepts them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)
        try:
            tmp.rename(target)
        except OSError:
            if not is_converted(target):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


TOKENIZER_PROBE = "Goal of the agent: go to the red ball.\n Observation 0: You see a wall 2 steps forward\n Action 0:"


def gguf_tokenizer_error(tokenizer, gguf: Path, probe: str = TOKENIZER_PROBE) -> str | None:
    """None when ``tokenizer`` (converted from ``gguf`` by transformers) tokenises ``probe`` as the GGUF says:
    with its BOS token first when its metadata asks for one, and, where llama.cpp is installed, into the same
    ids as llama.cpp's tokenizer of that file; else the difference.

    transformers 5.17 converts Gemma 3's GGUF tokenizer into a Unigram model that adds no BOS: the model then
    loads and runs, but its next-token distributions are off (GLAM's action prior on BabyAI-Text put all
    its mass on one action; measured on one H200, benchmarks/results/glam/gpu-h200/), while 5.24 gives
    llama.cpp's distributions.  Nothing downstream can tell: every later check compares with the same tokenizer.
    """
    bos, add_bos, reference = _gguf_reference(str(gguf), probe)
    ids = list(tokenizer(probe).input_ids)
    if add_bos and bos is not None and (not ids or ids[0] != bos):
        return f"it adds no BOS token (id {bos}; the GGUF asks for one): {probe!r} -> {ids[:6]}..."
    if reference is not None and list(reference) != ids:
        return f"{probe!r} -> {ids} here, {list(reference)} by llama.cpp"
    return None


@functools.lru_cache(maxsize=4)
def _gguf_reference(gguf: str, probe: str) -> tuple[int | None, bool, list[int] | None]:
    """(BOS id, whether the GGUF adds it, llama.cpp's ids of ``probe`` or None without llama.cpp)."""
    try:
        from llama_cpp import Llama
    except ImportError:   # the metadata alone (gguf, which transformers reads GGUF with; slower: every field)
        from gguf import GGUFReader

        fields = GGUFReader(gguf).fields

        def value(key: str):
            field = fields.get(key)
            return None if field is None or not field.data else field.parts[field.data[0]].tolist()[0]

        return value("tokenizer.ggml.bos_token_id"), bool(value("tokenizer.ggml.add_bos_token")), None
    vocab = Llama(model_path=gguf, vocab_only=True, verbose=False)
    meta = vocab.metadata
    bos = meta.get("tokenizer.ggml.bos_token_id")
    add_bos = str(meta.get("tokenizer.ggml.add_bos_token", "false")).lower() == "true"
    return (None if bos is None else int(bos)), add_bos, list(vocab.tokenize(probe.encode(), add_bos=add_bos,
                                                                             special=False))
