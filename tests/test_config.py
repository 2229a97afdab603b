"""Config composition and validation: bad input fails before compute and names the key."""

import pytest
from omegaconf import OmegaConf

from llmguide.core.config import GROUPS, REDACTED, group_options, redact
from llmguide.core.errors import ConfigError
from llmguide.pipelines import load_config


def test_defaults_compose_with_every_group():
    cfg = load_config([])
    for group in GROUPS:
        assert group in cfg
    assert cfg.env.name == "crafter"
    assert cfg.llm.backend == "embedded"


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    for option in group_options(group):
        try:
            cfg = load_config([f"{group}={option}"])
        except ConfigError as err:   # a method refuses the default env (crafter): compose it on one it runs on
            assert group == "method" and err.key == "env", err
            cfg = next(c for env in ("craftax", "babyai", "minihack", "nethack")
                       if (c := _loads([f"{group}={option}", f"env={env}"])) is not None)
        assert cfg[group] is not None


def _loads(overrides):
    try:
        return load_config(overrides)
    except ConfigError:
        return None


@pytest.mark.parametrize(
    ("override", "key", "fragment"),
    [
        ("total_steps=abc", "total_steps", "expected int"),
        ("total_steps=-5", "total_steps", "> 0"),
        ("agent.gamma=1.5", "agent.gamma", "[0.0, 1.0]"),
        ("agent.lr=0", "agent.lr", "> 0"),
        ("num_envs=0", "num_envs", "> 0"),
        ("agent.update_epochs=-1", "agent.update_epochs", ">= 0"),
        ("eval.greedy=3", "eval.greedy", "expected bool"),
        ("not_a_key=1", "not_a_key", "unknown key"),
        ("agent.not_a_key=1", "agent.not_a_key", "unknown key"),
        ("env=atari", "env", "unknown option 'atari'"),
        ("total_steps", "total_steps", "key=value"),
    ],
)
def test_bad_config_names_the_key(override, key, fragment):
    with pytest.raises(ConfigError) as info:
        load_config([override])
    assert info.value.key == key
    assert key in str(info.value)
    assert fragment in str(info.value)


def test_valid_overrides_apply():
    cfg = load_config(["total_steps=123", "agent.gamma=0.9", "agent.lr=1", "seed=7", "agent.update_epochs=0"])
    assert cfg.total_steps == 123
    assert cfg.agent.update_epochs == 0   # a policy that acts and is never updated (a frozen reference row)
    assert cfg.agent.gamma == 0.9
    assert cfg.agent.lr == 1  # an int where a float is declared is accepted
    assert cfg.seed == 7


def test_redact_hides_secret_values_but_keeps_env_var_names():
    cfg = OmegaConf.create({"llm": {"api_key": "sk-live-123", "api_key_env": "MY_KEY", "nested": {"token": "t0k"}},
                            "password": None})
    out = redact(cfg)
    assert out["llm"]["api_key"] == REDACTED
    assert out["llm"]["nested"]["token"] == REDACTED
    assert out["llm"]["api_key_env"] == "MY_KEY"
    assert out["password"] is None
    assert "sk-live-123" not in str(out)


def test_recipe_rules_apply_only_to_their_recipe():
    """ELLM's method.mode (pretrain|finetune|guided) and PTGM's (options|bc_finetune) do not collide."""
    assert load_config(["env=crafter", "method=ellm", "method.mode=pretrain"]).method.mode == "pretrain"
    assert load_config(["env=babyai", "method=ptgm", "method.mode=bc_finetune"]).method.mode == "bc_finetune"
    with pytest.raises(ConfigError, match="method.mode"):
        load_config(["env=crafter", "method=ellm", "method.mode=options"])
    with pytest.raises(ConfigError, match="method.mode"):
        load_config(["env=babyai", "method=ptgm", "method.mode=pretrain"])
