"""Config composition and validation: bad input fails before compute and names the key."""

import sys

import pytest
import yaml
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


def test_method_yamls_name_their_recipe_in_full_and_the_pipelines_name_none():
    """Each method package's recipe is named by its YAML as ``module:Class``; the pipelines know only ``standard``."""
    from llmguide.core.config import compose_config
    from llmguide.pipelines import RECIPES, recipe_class

    assert RECIPES == {"standard": "llmguide.pipelines.standard:StandardRecipe"}
    for option in group_options("method"):
        name = str(compose_config([f"method={option}"]).method.get("recipe") or "standard")
        assert name == "standard" or name.startswith("llmguide.methods."), (option, name)
        cls = recipe_class(OmegaConf.create({"method": {"recipe": name}}))
        assert name == "standard" or name == f"{cls.__module__}:{cls.__name__}"
        # a recipe module's own rules are keyed by the same name (ELLM's, Motif's, PTGM's)
        assert getattr(sys.modules[cls.__module__], "RECIPE", name) == name, option


@pytest.mark.parametrize(("short", "full"), [("ellm", "llmguide.methods.ellm.recipe:ELLMRecipe"),
                                             ("motif", "llmguide.methods.oni.motif_recipe:MotifRecipe"),
                                             ("drrn", "llmguide.methods.glam.drrn_recipe:DRRNRecipe")])
def test_a_short_recipe_name_is_refused_naming_the_full_one(short, full):
    with pytest.raises(ConfigError, match="method.recipe") as err:
        load_config(["env=crafter", "method=ellm", f"method.recipe={short}"])
    assert repr(full) in err.value.message and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="'module:Class'"):
        load_config(["env=crafter", "method=ellm", "method.recipe=nosuchrecipe"])


def test_a_run_saved_with_a_short_recipe_name_still_loads(tmp_path):
    """Runs saved before recipes were named in full (``recipe: bk``) resume and evaluate with the shipped name."""
    from llmguide.pipelines import load_run_config, recipe_class

    cfg = load_config(["env=babyai", "method=bk_pref", f"run.dir={tmp_path}", "run.name=old"])
    saved = redact(cfg)
    saved["method"]["recipe"] = "bk"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    loaded = load_run_config(tmp_path / "old")
    assert loaded.method.recipe == cfg.method.recipe == "llmguide.methods.bk.recipe:BKRecipe"
    assert recipe_class(loaded).__name__ == "BKRecipe"


def test_a_methods_own_config_options_are_found_in_its_package() -> None:
    """GLAM's and DRRN's learner settings live in their package's conf/ (issue 51), found through the methods'
    config search path: ``agent=glam`` composes, the learner reads its defaults there, the kernel's conf/ lacks it."""
    from pathlib import Path

    from llmguide import methods
    from llmguide.core.config import option_file
    from llmguide.core.plugins import plugin_config_dirs
    from llmguide.learners.common import agent_config

    package = Path(methods.__file__).parent / "glam" / "conf"
    assert package in plugin_config_dirs()
    for name in ("glam", "drrn"):
        assert Path(str(option_file("agent", name))) == package / "agent" / f"{name}.yaml"
        assert name in group_options("agent")
    assert load_config(["env=babyai", "method=glam"]).agent.name == "glam"
    assert agent_config({}, "glam").reward_scale == 20.0
    assert not (Path(str(option_file("agent", "ppo"))).parent / "glam.yaml").exists()
