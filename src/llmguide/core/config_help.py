"""``llmguide train --help group=option``: what a config option sets, key by key, with its YAML comments."""

from __future__ import annotations

import difflib
import re
from importlib import resources

from hydra.errors import HydraException
from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmguide.core.config import (
    compose_config,
    flat_keys,
    group_options,
    option_file,
    translate_hydra_error,
)
from llmguide.core.errors import ConfigError


def _split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)`` of one YAML line; a ``#`` inside quotes is not a comment."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def yaml_comments(text: str, prefix: str) -> tuple[list[str], dict[str, str], list[str]]:
    """(header comment lines, {dotted key: its comment}, the options named in ``defaults:``) of a YAML file."""
    header: list[str] = []
    comments: dict[str, str] = {}
    parents: list[str] = []
    stack: list[tuple[int, str]] = []
    last, in_defaults = None, False
    for raw in text.splitlines():
        code, comment = _split_comment(raw)
        if not code.strip():
            if comment and last is None:
                header.append(comment)
            elif comment and last is not None:     # a comment line continuing the key above
                comments[last] = f"{comments.get(last, '')} {comment}".strip()
            continue
        indent = len(code) - len(code.lstrip())
        item = code.strip()
        if item.startswith("- "):
            name = item[2:].strip()
            if in_defaults and re.fullmatch(r"[\w.]+", name) and name != "_self_":
                parents.append(name)
            continue
        key, _, value = item.partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        in_defaults = indent == 0 and key == "defaults"
        if in_defaults:
            continue
        path = ".".join(k for k in [prefix, *(k for _, k in stack), key] if k)
        if not value.strip():
            stack.append((indent, key))
        last = path
        if comment:
            comments[path] = comment
    return header, comments, parents


def describe_option(group: str, option: str) -> str:
    """``llmguide train --help group=option``: the option's story and every key it sets (as
    ``group.key = value``) with the comment its YAML file (or the file it extends) gives it."""
    path = option_file(group, option)
    if path is None:
        close = difflib.get_close_matches(option, group_options(group), n=2, cutoff=0.6)
        raise ConfigError(group, f"unknown option '{option}'" + (f"; did you mean {' or '.join(close)}?" if close
                                                                   else f"; choose one of {group_options(group)}"))
    header, comments, chain = yaml_comments(path.read_text(), group)
    for parent in chain:    # the options it extends (method=ellm_oracle is ellm.yaml + its own keys)
        if option_file(group, parent) is not None:
            _, inherited, more = yaml_comments(option_file(group, parent).read_text(), group)
            comments = {**inherited, **comments}
            chain.extend(m for m in more if m not in chain)
    try:
        node = compose_config([f"{group}={option}"])[group]
    except (HydraException, OmegaConfBaseException) as err:
        raise translate_hydra_error(err, [f"{group}={option}"]) from None
    _, root, _ = yaml_comments((resources.files("llmguide.conf") / "config.yaml").read_text(), "")
    comments = {**root, **comments}      # keys a group's block of config.yaml declares (llm.service.*)
    lines = [f"{group}={option} ({path}):", *(f"  {h}" for h in header)]
    if chain:
        lines.append(f"  extends {group}={', '.join(chain)}")
    for key in flat_keys(node, f"{group}."):
        value = OmegaConf.select(node, key.partition(".")[2])
        shown = ("null" if value is None else str(value).lower() if isinstance(value, bool)
                 else list(value) if isinstance(value, ListConfig) else value)
        lines.append(f"  {key} = {shown}" + (f"    # {comments[key]}" if key in comments else ""))
    return "\n".join(lines)
