"""llmguide: reinforcement learning guided by language models."""

__version__ = "0.1.0"


def register_config_rules(cfg) -> None:  # noqa: ANN001 - a DictConfig; no import of omegaconf here
    """Register the config rules of the configured method's recipe and of the env/learner/reward/LM
    packages.  ``llmguide.core.config.load_config`` calls this, so ``core`` never imports the layers
    above it by itself."""
    from llmguide.pipelines import register_rules

    register_rules(cfg)
