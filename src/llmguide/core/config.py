"""Hydra configuration: composition, validation before compute, secret redaction.

Config groups mirror the layers (``env=``, ``method=``, ``llm=``, ``agent=``); plain
``key=value`` overrides change values.  :func:`load_config` composes and validates, and
raises :class:`ConfigError` naming the offending key before any compute starts.
"""

from __future__ import annotations

import difflib
import numbers
import os
import re
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmguide.core.errors import ConfigError

GROUPS = ("env", "method", "llm", "agent")
SECRET_KEY = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)
REDACTED = "***redacted***"


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.key`` of a DictConfig, dict or namespace (None: an absent config); ``default`` when the key is
    missing or null.  The project's one config getter."""
    if cfg is None:
        return default
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value


def plain_dict(cfg: Any) -> dict:
    """A picklable plain-dict copy of a config (DictConfig resolved, or any mapping)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def group_options(group: str) -> list[str]:
    """Names of the options available for one config group (the YAML files in every config folder's <group>/)."""
    folders = [d / group for d in config_dirs()]
    return sorted({p.name[:-5] for f in folders if f.is_dir() for p in f.iterdir() if p.name.endswith(".yaml")})


# Config folders registered at run time (:func:`add_config_dir`), searched after the package's and the plugins'
# (:func:`llmguide.core.plugins.plugin_config_dirs`: the ``conf/`` beside each installed method, backend and env
# family, the paper methods' included), so the kernel's conf/ names no method.
PACKAGE_CONFIG_DIRS: list[Path] = []


def add_config_dir(folder: Path) -> None:
    """Search ``folder`` (laid out as conf/: ``<group>/<option>.yaml``) for config options, after the package's."""
    folder = Path(folder).resolve()
    if folder not in PACKAGE_CONFIG_DIRS:
        PACKAGE_CONFIG_DIRS.append(folder)


def extra_config_dirs(user: bool = True) -> list[Path]:
    """The config folders searched after the package's conf/: the plugins', the registered ones, then (``user``)
    ``$LLMGUIDE_CONFIG_PATH``'s."""
    from llmguide.core.plugins import plugin_config_dirs

    folders = [*plugin_config_dirs(), *PACKAGE_CONFIG_DIRS, *(user_config_dirs() if user else [])]
    return [f for i, f in enumerate(folders) if f not in folders[:i]]


def user_config_dirs() -> list[Path]:
    """Extra config folders from ``$LLMGUIDE_CONFIG_PATH`` (``:``-separated), searched after the package's:
    a ``method/my_reward.yaml`` there is ``method=my_reward``."""
    return [Path(p).expanduser().resolve() for p in os.environ.get("LLMGUIDE_CONFIG_PATH", "").split(os.pathsep) if p]


def config_dirs(user: bool = True) -> list[Any]:
    """Every config folder in Hydra's search order: the package's conf/, then :func:`extra_config_dirs`."""
    return [resources.files("llmguide.conf"), *extra_config_dirs(user)]


def option_file(group: str, option: str, user: bool = True) -> Any:
    """The YAML file of ``group=option``: the last searched folder's that has one (a user config folder's first,
    as Hydra searches them), or None.  ``user=False``: the shipped files only (a learner's defaults)."""
    for folder in reversed(config_dirs(user)):
        path = folder / group / f"{option}.yaml"
        if path.is_file():
            return path
    return None


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The Hydra composition of the shipped config (the package's conf/, the registered folders and
    ``$LLMGUIDE_CONFIG_PATH``'s) with ``overrides``, not validated (:func:`load_config` validates)."""
    GlobalHydra.instance().clear()
    extra = extra_config_dirs()
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in extra)}]"] if extra else []
    with initialize_config_module(config_module="llmguide.conf", version_base="1.3"):
        return compose(config_name="config", overrides=[*search, *overrides])


def translate_hydra_error(err: Exception, overrides: Sequence[str]) -> ConfigError:
    """A Hydra / OmegaConf composition error as a ConfigError naming the group or key it is about."""
    text = str(err) or str(err.__cause__ or "") or type(err).__name__
    for group in GROUPS:
        if f"'{group}/" in text or f"In '{group}'" in text:
            choice = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == group), "?")
            close = difflib.get_close_matches(choice, group_options(group), n=2, cutoff=0.6)
            hint = f"did you mean {' or '.join(f'{group}={c}' for c in close)}? " if close else ""
            return ConfigError(group, f"unknown option '{choice}'; {hint}choose one of {group_options(group)}")
    match = re.search(r"Key '([^']+)' is not in struct", text) or re.search(r"override '([^']+)'", text)
    if match:
        key = match.group(1)
        for o in overrides:
            name = o.split("=", 1)[0].lstrip("+~")
            if name.endswith(key):
                key = name
                break
        detail = text.splitlines()[0]
        detail = "" if detail.startswith("Could not override") else f" ({detail})"
        return ConfigError(key, f"unknown key{did_you_mean(key, overrides)}{detail}")
    odd = next((o for o in overrides if "LexerNoViableAlt" in text and not o.isascii()), None)
    if odd is not None:                      # Hydra's grammar reads unquoted values in ASCII only
        key, _, value = odd.partition("=")
        return ConfigError(key.lstrip("+~"), f"{value!r} holds characters outside ASCII, which an override reads "
                                             f"only quoted: {key}='{value}'")
    return ConfigError("overrides", (text.splitlines() or [type(err).__name__])[0])


def flat_keys(node: Any, prefix: str = "") -> list[str]:
    """The dotted paths of every leaf of a config node."""
    if not isinstance(node, DictConfig | dict):
        return [prefix.rstrip(".")]
    return [k for key in node.keys() for k in flat_keys(node[key], f"{prefix}{key}.")]


def did_you_mean(key: str, overrides: Sequence[str] = ()) -> str:
    """``"; did you mean X?"`` for an unknown ``key`` (difflib over the keys the config's group choices
    declare), or ``""``."""
    try:
        known = flat_keys(compose_config([o for o in overrides if o.split("=", 1)[0] in GROUPS]))
    except (HydraException, OmegaConfBaseException):
        return ""
    parent = key.rpartition(".")[0]
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.8) or [
        k for k in difflib.get_close_matches(key, [k for k in known if k.rpartition(".")[0] == parent], n=2,
                                             cutoff=0.6)]
    return f"; did you mean {' or '.join(close)}?" if close else ""


Providers = Sequence[Callable[[DictConfig], None]]


def check_overrides(overrides: Sequence[str], example: str = "env=crafter total_steps=1000") -> None:
    """Every override looks like ``key=value`` (else a ConfigError naming it)."""
    for o in overrides:
        if "=" not in o:
            raise ConfigError(o, f"an override must look like key=value (e.g. {example})")


def load_config(overrides: Sequence[str] = (), providers: Providers = ()) -> DictConfig:
    """Compose the config from ``overrides`` and validate it; raise ConfigError naming the bad key.

    ``providers`` register the rules of the layers above ``core`` for this config (the CLI passes
    :func:`llmguide.pipelines.register_rules`; ``core`` never imports those layers itself).  A resumed run's
    config (the saved one with the overrides on top) is :func:`llmguide.core.saved_config.load_run_config`."""
    check_overrides(overrides)
    try:
        cfg = compose_config(overrides)
        group_choices = [o for o in overrides if o.split("=", 1)[0] in GROUPS]
        base = compose_config(group_choices)
    except (HydraException, OmegaConfBaseException) as err:
        raise translate_hydra_error(err, overrides) from None
    return validated_config(cfg, base, providers)


def validated_config(cfg: DictConfig, base: DictConfig, providers: Providers) -> DictConfig:
    """``cfg`` checked: the types of the shipped config ``base``, then every layer's value rules.  The types
    are checked after the providers registered the layers' rules: a key whose rule takes another type than its
    shipped value (``llm.n_threads: auto`` or a number) is known only then."""
    _check_types(cfg, base, "", defer=True)   # before any layer reads a value ("num_envs=four" named, not int()'d)
    for provider in providers:
        provider(cfg)
    for provider in list(RULE_PROVIDERS):   # read after the providers ran: importing a layer may add some
        provider(cfg)
    _check_types(cfg, base, "")
    validate(cfg)
    OmegaConf.set_readonly(cfg, False)
    return cfg


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_types(cfg: Any, base: Any, prefix: str, defer: bool = False) -> None:
    """Every overridden value must have the type the shipped config declares for it.  ``defer``: a number where
    the shipped value is text passes for now (``llm.n_threads: auto`` takes a number: its layer says so later)."""
    if isinstance(base, DictConfig):
        if cfg is not None and not isinstance(cfg, DictConfig):
            raise ConfigError(prefix.rstrip("."), f"expected a mapping of keys, got {cfg!r} ({_type_name(cfg)})")
        for key in base.keys():
            path = f"{prefix}{key}"
            if not isinstance(cfg, DictConfig) or key not in cfg:
                continue
            _check_types(cfg[key], base[key], path + ".", defer)
        return
    path = prefix.rstrip(".")
    if base is None or cfg is None or isinstance(base, ListConfig) or path in ANY_TYPE:
        return
    if defer and isinstance(base, str) and isinstance(cfg, int | float):
        return
    if isinstance(base, bool):
        ok = isinstance(cfg, bool)
    elif isinstance(base, int):
        ok = isinstance(cfg, int) and not isinstance(cfg, bool)
    elif isinstance(base, float):
        ok = isinstance(cfg, int | float) and not isinstance(cfg, bool)
    elif isinstance(base, str):
        ok = isinstance(cfg, str)
    else:
        ok = True
    if not ok:
        raise ConfigError(path, f"expected {_type_name(base)}, got {cfg!r} ({_type_name(cfg)})")


# --- value rules -------------------------------------------------------------------------
Rule = Callable[[Any], str | None]


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive(value: Any) -> str | None:
    return None if _number(value) and value > 0 else f"must be a number > 0, got {value!r}"


def non_negative(value: Any) -> str | None:
    return None if _number(value) and value >= 0 else f"must be a number >= 0, got {value!r}"


def in_range(low: float, high: float) -> Rule:
    def rule(value: Any) -> str | None:
        return None if low <= value <= high else f"must be in [{low}, {high}], got {value!r}"

    return rule


def one_of(*choices: Any) -> Rule:
    def rule(value: Any) -> str | None:
        return None if value in choices else f"must be one of {list(choices)}, got {value!r}"

    return rule


def text_or_null(value: Any) -> str | None:
    """A name or a path: Hydra reads ``run.name=nan`` or ``run.name=1e3`` as a number."""
    if value is None or isinstance(value, str):
        return None
    return f"must be text, got {value!r} ({_type_name(value)}); quote it (e.g. key='\"{value}\"')"


NAME_MAX = 255   # bytes in one folder name (Linux, macOS)


def run_name(value: Any) -> str | None:
    """``run.name``: text (or null) naming a folder inside ``run.dir`` (no ``..``, not absolute), each part of it
    short enough to be a folder name."""
    if value is None or text_or_null(value):
        return text_or_null(value)
    parts = Path(value).parts
    if Path(value).is_absolute() or ".." in parts:
        return (f"{value!r} would put the run outside run.dir: name a folder inside it, and choose where runs go "
                "with run.dir=DIR")
    longest = max(parts, key=lambda part: len(part.encode()), default="")
    if len(longest.encode()) > NAME_MAX:
        return f"is {len(longest.encode())} bytes long; a folder name holds at most {NAME_MAX}: choose a shorter one"
    return None


# Rules keyed by dotted path.  Modules add their own with :func:`register_rule`.
RULES: dict[str, Rule] = {
    "run.name": run_name,
    "run.dir": text_or_null,
    "total_steps": positive,
    "num_envs": positive,
    "seed": non_negative,
    "checkpoint_every": non_negative,
    "log_every": positive,
    "eval.episodes": non_negative,
    "eval.max_steps": lambda v: None if v is None or (_number(v) and v > 0) else f"must be > 0 or null, got {v!r}",
    "agent.lr": positive,
    "agent.gamma": in_range(0.0, 1.0),
    "agent.gae_lambda": in_range(0.0, 1.0),
    "agent.clip_coef": positive,
    "agent.num_steps": positive,
    "agent.num_minibatches": positive,
    "agent.update_epochs": non_negative,   # 0: the policy is never updated (a frozen reference row)
    "llm.temperature": non_negative,
    "llm.max_tokens": positive,
    "llm.concurrency": positive,
    "llm.timeout": positive,
    "method.intrinsic_coef": non_negative,
    "method.extrinsic_coef": non_negative,
}


# Extra hooks called with the composed config before validation (after the package root's
# ``llmguide.register_config_rules``, which imports the configured method's recipe).
RULE_PROVIDERS: list[Callable[[DictConfig], None]] = []


def add_rule_provider(provider: Callable[[DictConfig], None]) -> None:
    """Call ``provider(cfg)`` in :func:`load_config` before the rules are applied."""
    if provider not in RULE_PROVIDERS:
        RULE_PROVIDERS.append(provider)


# rules of one recipe's keys, by its ``method.recipe`` (``module:Class``): two recipes may give the same key
# different meanings
RECIPE_RULES: dict[str, dict[str, Rule]] = {}


ANY_TYPE: set[str] = set()   # keys whose value rule, not the shipped value's type, decides (e.g. ``auto`` or 4)


def register_rule(key: str, rule: Rule, recipe: str | None = None, any_type: bool = False) -> None:
    """Add a validation rule for a dotted config key (when ``recipe`` is given, only for configs whose
    ``method.recipe`` is that ``module:Class``).

    ``any_type``: an override need not have the type of the shipped value (``llm.n_threads: auto``
    takes a number too); the rule alone checks it."""
    if recipe is None:
        RULES[key] = rule
    else:
        RECIPE_RULES.setdefault(recipe, {})[key] = rule
    if any_type:
        ANY_TYPE.add(key)


def validate(cfg: DictConfig) -> None:
    """Apply the value rules; raise ConfigError naming the first bad key."""
    recipe = OmegaConf.select(cfg, "method.recipe", default=None)
    for key, rule in {**RULES, **RECIPE_RULES.get(str(recipe), {})}.items():
        value = OmegaConf.select(cfg, key, default=ABSENT)
        if value is ABSENT:
            continue
        problem = rule(value)
        if problem:
            raise ConfigError(key, problem)
    for key in ("env.name", "method.name", "llm.backend", "agent.name"):
        if OmegaConf.select(cfg, key, default=None) in (None, ""):
            raise ConfigError(key, "is required")


ABSENT = object()   # ``OmegaConf.select(cfg, key, default=ABSENT)``: the key is not in the config


def redact(cfg: DictConfig | dict) -> dict:
    """Plain-dict copy of ``cfg`` with every secret-looking value replaced by a marker."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "") else walk(v))
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(data)


def default_cache_dir() -> Path:
    """``$LLMGUIDE_CACHE_DIR`` or ``~/.cache/llmguide``: where LM caches live by default."""
    return Path(os.environ.get("LLMGUIDE_CACHE_DIR") or Path.home() / ".cache" / "llmguide").expanduser()
