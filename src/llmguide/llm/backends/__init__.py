"""The LM backends behind :class:`~llmguide.llm.base.LanguageModel`, one module each, built by
:mod:`llmguide.llm.factory` from the ``llm=`` config group; each loads its heavy dependency only when built.

- :mod:`.embedded` (and :mod:`.embedded_batch`): a GGUF run in-process by llama-cpp-python (Gemma 3 270M, Qwen);
- :mod:`.http` (and :mod:`.http_transport`, :mod:`.probe`): any OpenAI-compatible server;
- :mod:`.hf` (and :mod:`.gguf_convert`): a local Hugging Face model, trainable (GLAM);
- :mod:`.oracle`: an env family's ground truth, no LM;
- :mod:`.counterfactual`: the knowledge controls (random, shuffled, constant).
"""
