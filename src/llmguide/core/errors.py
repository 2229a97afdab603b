"""Exceptions shared by every layer."""


class LLMGuideError(Exception):
    """Base class for errors raised by llmguide."""


class ConfigError(LLMGuideError):
    """A configuration key or value is invalid. The message names the key."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"config error at '{key}': {message}")


class LLMUnavailableError(LLMGuideError):
    """A language-model backend could not be reached or does not support a call."""
