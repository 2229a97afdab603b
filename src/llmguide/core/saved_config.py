"""A run's saved ``config.yaml`` read back: a resumed run (``run.resume=true``) and ``llmguide eval`` compose the
saved options and values, then the explicit overrides, and check them like the command line; a change to what
the checkpoint was built for (the env, method, agent, network) is refused before anything is written, and a
resumed session's config becomes the run's record only once it has trained (:class:`ConfigRecord`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from llmguide.core.config import (
    ABSENT,
    GROUPS,
    REDACTED,
    Providers,
    check_overrides,
    compose_config,
    did_you_mean,
    group_options,
    load_config,
    translate_hydra_error,
    validated_config,
)
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir, atomic_write_bytes


def load_run_config(overrides: Sequence[str] = (), providers: Providers = ()) -> DictConfig:
    """:func:`~llmguide.core.config.load_config`, or with ``run.resume=true`` and a ``config.yaml`` in the run
    directory, the saved config with the overrides on top (:func:`load_saved_config`)."""
    check_overrides(overrides)
    saved = resumed_run_config(overrides)
    if saved is not None:
        return load_saved_config(saved, overrides, providers, keep=RUN_IDENTITY + RESUME_SHAPE)
    return load_config(overrides, providers)


# what a run's checkpoint was built for: a resumed run (or ``llmguide eval``) may not change them
RUN_IDENTITY = ("env.name", "env.id", "method.name", "agent.name", "agent.hidden", "agent.recurrent",
                "agent.image_encoder", "agent.two_value_heads")


# what the checkpoint's training state is shaped by (per-env reward normalisers, n-step windows): a resumed run may
# not change them either (``llmguide eval`` may: it acts from the networks alone)
RESUME_SHAPE = ("num_envs",)


def _key(override: str) -> str:
    """The dotted key of one ``key=value`` override (``+`` and ``~`` prefixes dropped)."""
    return override.split("=", 1)[0].lstrip("+~")


def resumed_run_config(overrides: Sequence[str]) -> Path | None:
    """``<run.dir>/<run.name>/config.yaml`` when ``overrides`` resume a run (``run.resume=true``) that saved one."""
    try:
        run = compose_config([o for o in overrides if _key(o).startswith("run.")]).run
    except (HydraException, OmegaConfBaseException):
        return None                          # the full composition names the bad key
    path = Path(str(run.dir)) / str(run.name) / "config.yaml" if run.resume and run.name else None
    return path if path is not None and path.is_file() else None


def read_saved_config(path: Path) -> dict:
    """A run's ``config.yaml`` as a dict, secrets that were redacted left out (ConfigError if it does not parse)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        # an alias (``*name``) is never written by a run; expanded by OmegaConf, a few nested ones take forever
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise ConfigError(str(path), "holds a YAML alias (*name); a run's config is plain keys and values: "
                                         "write the values out, or restore the file")
        data = yaml.safe_load(text)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), f"does not parse ({str(err).splitlines()[0]}); fix or restore the file") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"holds {type(data).__name__}, not a mapping of keys; fix or restore the file")

    def keep(node: Any) -> Any:
        return {k: keep(v) for k, v in node.items() if v != REDACTED} if isinstance(node, dict) else node

    return keep(data)


def load_saved_config(path: Path, overrides: Sequence[str] = (), providers: Providers = (),
                      keep: Sequence[str] = RUN_IDENTITY) -> DictConfig:
    """The config a run saved (``path``: its ``config.yaml``) with ``overrides`` on top, validated like the
    command line: the run's ``env``, ``method``, ``agent`` and ``llm`` options are composed, the file's
    values merged over them (an unknown key, a wrong type or a bad value is a ConfigError naming the key
    and the file), then each override.  An override may not change ``keep`` (:data:`RUN_IDENTITY`: what the
    checkpoint was built for; a resume also :data:`RESUME_SHAPE`); ``llm=OPTION`` replaces the saved LM."""
    saved = read_saved_config(path)
    given = {_key(o): o for o in overrides}
    run_options = _saved_choices(saved, overrides)
    options = [*run_options, *(o for o in overrides if _key(o) in GROUPS)]
    base = _compose_saved_options(run_options, options, path)
    try:
        cli = compose_config([*options, *overrides])
    except (HydraException, OmegaConfBaseException) as err:
        raise translate_hydra_error(err, overrides) from None
    _check_identity(OmegaConf.create(saved), cli, given, path, keep)
    cfg = _merge_saved(base, _with_shipped_recipe(saved, base), path, options)
    for key in given:
        if key == "llm":                     # another LM: its option's keys, not the saved LM's
            cfg.llm = cli.llm
        elif key not in GROUPS:              # (env, method, agent: the saved ones, or refused above)
            _set(cfg, key, OmegaConf.select(cli, key, default=ABSENT))
    try:
        return validated_config(cfg, base, providers)
    except ConfigError as err:
        if err.key in given:
            raise
        raise ConfigError(err.key, f"{err.message} (in {path})") from None


def _saved_choices(saved: dict, overrides: Sequence[str]) -> list[str]:
    """``group=option`` of the saved ``env``, ``method``, ``agent`` (their ``name``) and ``llm`` (:func:`_llm_option`)
    that the overrides do not choose."""
    chosen = {_key(o) for o in overrides}
    options = {group: saved[group].get("name") for group in ("env", "method", "agent")
               if isinstance(saved.get(group), dict)}
    options["llm"] = _llm_option(saved.get("llm"))
    return [f"{group}={option}" for group, option in options.items() if option and group not in chosen]


def _llm_option(llm: Any) -> str | None:
    """The ``llm`` option a saved LM block comes from: the one with its ``backend``, and its ``model`` when
    several share the backend (``embedded``, ``qwen``)."""
    import yaml

    from llmguide.core.config_help import option_file

    if not isinstance(llm, dict):
        return None
    matches = []
    for option in group_options("llm"):
        shipped = yaml.safe_load(option_file("llm", option).read_text()) or {}
        if shipped.get("backend") == llm.get("backend"):
            matches.append((shipped.get("model") != llm.get("model"), option))
    return min(matches)[1] if matches else None


def _compose_saved_options(run_options: Sequence[str], options: Sequence[str], path: Path) -> DictConfig:
    """The shipped config of ``options`` (what the saved values are checked against); ``run_options``, those
    read from the file at ``path``, must name options that exist."""
    for option in run_options:
        group, name = option.split("=", 1)
        if name not in group_options(group):
            raise ConfigError(group, f"{name!r} ({path}) is no {group} option; choose one of {group_options(group)}")
    try:
        return compose_config(options)
    except (HydraException, OmegaConfBaseException) as err:
        raise translate_hydra_error(err, options) from None


def _check_identity(saved: DictConfig, cli: DictConfig, given: dict[str, str], path: Path,
                    keep: Sequence[str]) -> None:
    """Refuse an override that changes one of the ``keep`` keys (what the run's checkpoint was built for)."""
    for key in keep:
        group, _, leaf = key.partition(".")
        if key not in given and not (leaf == "name" and group in given):
            continue
        old, new = OmegaConf.select(saved, key, default=None), OmegaConf.select(cli, key, default=None)
        if old != new:
            shown = group if leaf == "name" else key
            raise ConfigError(shown, f"the run in {path.parent} was trained with {shown}={old}, not {new}: leave "
                                     f"{shown} out to continue it, or start a new run (another run.name)")


def _with_shipped_recipe(saved: dict, base: DictConfig) -> dict:
    """``saved`` with the method option's shipped ``method.recipe`` when the run was saved before method YAMLs
    named their recipe as ``module:Class`` (``recipe: ellm``), so that it still resumes and evaluates."""
    method = saved.get("method")
    recipe = method.get("recipe") if isinstance(method, dict) else None
    shipped = OmegaConf.select(base, "method.recipe", default=None)
    if isinstance(recipe, str) and ":" not in recipe and isinstance(shipped, str) and ":" in shipped:
        return {**saved, "method": {**method, "recipe": shipped}}
    return saved


def _merge_saved(base: DictConfig, saved: dict, path: Path, options: Sequence[str]) -> DictConfig:
    """``saved`` merged over ``base``; a key the shipped config does not have is a ConfigError naming it."""
    try:
        cfg = OmegaConf.merge(base, saved)
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", "") or path.name)
        detail = f"unknown key{did_you_mean(key, options)}" if "not in struct" in str(err) else str(err).splitlines()[0]
        raise ConfigError(key, f"{detail} (in {path}); fix the file") from None
    assert isinstance(cfg, DictConfig)
    return cfg


def _set(cfg: DictConfig, key: str, value: Any) -> None:
    """``cfg.<key> = value`` for a dotted key (``ABSENT``: the key is deleted, as ``~key`` does)."""
    if value is not ABSENT:
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
        return
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if isinstance(node, DictConfig):
        with open_dict(node):
            node.pop(leaf, None)


class ConfigRecord:
    """A resumed session's config becomes the run's ``config.yaml`` only once the session has trained (the Runner
    calls :meth:`write` at its first update that completes, or at its end when it has none to do), never as its
    checkpoint loads; a session that diverges puts the file it found back (:meth:`restore`), so the next plain
    resume does not repeat it.  A fresh run wrote its config when its folder opened: nothing to do."""

    def __init__(self, run: RunDir, cfg: DictConfig, resumed: bool):
        self.run, self.cfg, self.pending = run, cfg, resumed
        saved = run.path / "config.yaml"
        self.found = saved.read_bytes() if resumed and saved.is_file() else None

    def write(self) -> None:
        if self.pending:
            self.run.write_config(self.cfg)
            self.pending = False

    def restore(self) -> str:
        """The ``config.yaml`` the session found, back in place (a diverged session is not the run's record); the
        words that say so (empty for a fresh run)."""
        if self.found is None:
            return ""
        if not self.pending:
            atomic_write_bytes(self.run.path / "config.yaml", self.found)
            self.pending = True
        return f"; {self.run.path / 'config.yaml'} is the one this session found"
