"""llmguide: reinforcement learning guided by language models."""

__version__ = "0.1.0"
