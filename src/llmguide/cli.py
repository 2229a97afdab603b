"""The ``llmguide`` command line: ``llmguide <verb> [group=option ...] [key=value ...]``."""

from __future__ import annotations

import argparse
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from llmguide.core.config import GROUPS, group_options
from llmguide.core.errors import (
    ConfigError,
    Interrupted,
    LLMGuideError,
    StorageError,
    UsageError,
    file_ancestor,
)
from llmguide.core.stopping import stop_requests
from llmguide.pipelines import load_config

VERBS = {
    "train": "train an agent: compose the config, validate it, run the method's pipeline into runs/<name>/",
    "eval": "evaluate a trained run's latest checkpoint (greedy and sampled episodes, and whatever its method's "
            "evaluation adds, e.g. method.post_tests) -> RUN_DIR/eval.json",
    "report": "write report.md with PNG plots for one or more run directories (seeds are aggregated)",
    "bench": "run a benchmark script from benchmarks/ (e.g. `llmguide bench envs`)",
    "cache": "inspect the persistent LM cache: stats | export FILE | clear | check",
    "answers": "answer a method's LM queries over a data source once, into a table every arm reads (llm.table=)",
    "list": "list the env families and their tasks, the methods (env families each runs on, status) and the LM "
            "backends",
}
CONFIG_VERBS = ("train", "answers")   # and every method's offline steps (method_steps)


def method_steps() -> dict[str, str]:
    """``{verb: help}`` of the installed methods' offline steps (each recipe's ``Recipe.steps``; a verb several
    methods have: their helps joined), the verbs after :data:`VERBS`."""
    from llmguide.core.plugins import entries, load

    helps: dict[str, list[str]] = {}
    for name, target in entries("llmguide.methods").items():
        try:
            steps = load(target).steps
        except Exception as err:   # one broken plugin does not take the command line down
            print(f"llmguide: warning: the installed method {name!r} ({target}) does not import: {err}",
                  file=sys.stderr)
            continue
        for verb, step in steps.items():
            if verb not in VERBS and step.help not in helps.setdefault(verb, []):
                helps[verb].append(step.help)
    return {verb: "; ".join(texts) for verb, texts in helps.items()}


def _verbs(argv: list[str]) -> dict[str, str]:
    """The verbs the parser offers: the built-in ones, and the methods' steps unless ``argv`` names a built-in
    verb (importing every recipe is needed only for a step, ``--help`` or a wrong verb)."""
    return VERBS if argv and argv[0] in VERBS else {**VERBS, **method_steps()}


def _groups_help() -> str:
    lines = ["config groups (choose with group=option):"]
    for group in GROUPS:
        lines.append(f"  {group:<7} {', '.join(group_options(group))}")
    lines.append("plain overrides: key=value, e.g. total_steps=20000 seed=3 llm.base_url=http://127.0.0.1:8000/v1")
    return "\n".join(lines)


def build_parser(verbs: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: ``verbs`` (default: the built-in ones and every method's steps)."""
    verbs = {**VERBS, **method_steps()} if verbs is None else verbs
    parser = argparse.ArgumentParser(
        prog="llmguide",
        description="Reinforcement learning guided by language models.",
        epilog=_groups_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, text in verbs.items():
        p = sub.add_parser(verb, help=text, description=text, epilog=_groups_help(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if verb in CONFIG_VERBS or verb not in VERBS:
            p.add_argument("overrides", nargs="*", help="group=option and key=value overrides "
                                                        "(`--help method=rnd` lists that option's keys)")
            p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
            if verb == "train":
                p.add_argument("-m", "--multirun", action="store_true",
                               help="sweep: one run per combination of comma-separated values "
                                    "(e.g. -m seed=0,1,2 method=rnd,none), sweep.jobs at a time; "
                                    "sweep.launcher=ray: as Ray tasks on ray.address's cluster")
        elif verb == "eval":
            p.add_argument("run_dir", help="run directory to evaluate")
            p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. eval.episodes=20")
        elif verb == "report":
            p.add_argument("run_dirs", nargs="+", help="run directories (several seeds of one or more methods)")
            p.add_argument("--out", default=None, help="output folder (default: a single run's own folder; several "
                           "runs: a new <their common parent>/report-<timestamp>/)")
            p.add_argument("--smooth", type=int, default=None, metavar="N",
                           help="smooth each run's curve: trailing mean over its last N logged values (episodes)")
            p.add_argument("--control", default=None,
                           help="arm the others are compared with seed by seed (paired statistics), e.g. ppo")
            p.add_argument("--metric", default=None,
                           help="metrics.jsonl key of the per-run value (default: the episodic return)")
            p.add_argument("--group-by", choices=["method", "folder"], default="method",
                           help="arms by method.name, or by the run's parent folder (llmguide train -m layout)")
        elif verb == "bench":
            p.add_argument("name", help="benchmark script name in benchmarks/ (without .py)")
            p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
        elif verb == "list":
            p.add_argument("what", nargs="?", choices=["envs", "methods", "llms"], help="one section only")
        elif verb == "cache":
            p.add_argument("action", choices=["stats", "export", "clear", "check"])
            p.add_argument("file", nargs="?", help="output file for export (JSONL)")
            p.add_argument("--path", default=None, help="cache file (default: the llm config's cache.path)")
    return parser


def _cache_file(path: str | None) -> Path:
    """``llmguide cache``'s file: ``--path``, else the default in ``$LLMGUIDE_CACHE_DIR``; a folder there, or a
    file where its folder should be, is a :class:`StorageError` naming the setting."""
    from llmguide.llm.cache.store import default_cache_path

    file = Path(path).expanduser() if path else default_cache_path()
    code = errno.EISDIR if file.is_dir() else errno.ENOTDIR if file_ancestor(file) is not None else None
    if code is not None:
        raise StorageError(OSError(code, os.strerror(code), str(file)), key="--path" if path else "LLMGUIDE_CACHE_DIR")
    return file


def _run_bench(name: str, args: list[str]) -> int:
    root = Path(os.environ.get("LLMGUIDE_ROOT", Path.cwd()))
    script = root / "benchmarks" / f"{name}.py"
    if not script.exists():
        available = sorted(p.stem for p in (root / "benchmarks").glob("*.py")) if (root / "benchmarks").exists() else []
        raise LLMGuideError(f"no benchmark '{name}' in {root / 'benchmarks'}; available: {available}")
    return subprocess.call([sys.executable, str(script), *args])


_KEY_ERROR = re.compile(r"^((?:env|agent|method|llm|eval|run)\.[A-Za-z_][\w.]*)(?::|=| must )")


def _named_key(err: ValueError) -> str | None:
    """The config key a ValueError's message starts with (``env.id: ...``), or None (a bug: traceback)."""
    match = _KEY_ERROR.match(str(err))
    return match.group(1) if match else None


def _option_help(argv: list[str]) -> str | None:
    """``llmguide train --help method=ellm``: the verb's help, then each named option's keys with their comments."""
    if len(argv) < 2 or argv[0] in VERBS and argv[0] not in CONFIG_VERBS or not {"-h", "--help"} & set(argv):
        return None
    choices = [a.split("=", 1) for a in argv[1:] if "=" in a and a.split("=", 1)[0] in GROUPS]
    verbs = _verbs(argv)
    if not choices or argv[0] not in verbs:
        return None
    from llmguide.core.config_help import describe_option

    parser = build_parser(verbs)
    verb_help = parser._subparsers._group_actions[0].choices[argv[0]].format_help()  # noqa: SLF001
    sections = [verb_help.rstrip()]
    for group, option in choices:
        sections.append(describe_option(group, option))
        if group == "method":
            from llmguide.pipelines import recipe_class

            families = recipe_class(OmegaConf.create({"method": {"recipe": _recipe_of(option)}})).env_families
            sections[-1] += f"\n  runs on env={'|'.join(families) if families else 'any family'}"
    return "\n\n".join(sections)


def _yaml_of(group: str, option: str) -> dict:
    import yaml

    from llmguide.core.config_help import option_file

    return yaml.safe_load(option_file(group, option).read_text()) or {}


def _recipe_of(option: str) -> str:
    """``method.recipe`` of a method option, following its ``defaults`` (``ellm_oracle`` extends ``ellm``)."""
    data = _yaml_of("method", option)
    if data.get("recipe"):
        return str(data["recipe"])
    parents = [d for d in data.get("defaults") or [] if isinstance(d, str) and d != "_self_"]
    return _recipe_of(parents[0]) if parents else "standard"


def _about(group: str, option: str) -> str:
    import textwrap

    from llmguide.core.config_help import option_file, yaml_comments

    return textwrap.shorten(" ".join(yaml_comments(option_file(group, option).read_text(), group)[0]), 110,
                            placeholder=" ...")


def list_catalog(what: str | None = None) -> str:
    """``llmguide list``: env families with their tasks, methods with the env families each runs on and their
    status, LM backends (the counterfactual ones included)."""
    import textwrap

    from llmguide.envs.registry import FAMILIES, family_tasks
    from llmguide.pipelines import recipe_class

    out: list[str] = []
    if what in (None, "envs"):
        out.append("env families (env=NAME; a task with env.task=, NetHack/MiniHack tasks with env.id=):")
        for name, fam in FAMILIES.items():
            tasks = family_tasks(name)
            out.append(f"  {name:<9} {fam.env_id}; {len(tasks)} tasks:")
            out.extend(textwrap.wrap(", ".join(tasks), 110, initial_indent=" " * 12, subsequent_indent=" " * 12,
                                     break_on_hyphens=False))
            if fam.variants:
                out.extend(textwrap.wrap("variant: " + fam.variants, 110, initial_indent=" " * 12,
                                         subsequent_indent=" " * 14, break_on_hyphens=False))
    if what in (None, "methods"):
        out.append("methods (method=NAME): env families, status, what it is:")
        for option in group_options("method"):
            cls = recipe_class(OmegaConf.create({"method": {"recipe": _recipe_of(option)}}))
            families = "|".join(cls.env_families) if cls.env_families else "any"
            out.append(f"  {option:<19} {families:<23} {cls.status:<6} {_about('method', option)}")
    if what in (None, "llms"):
        out.append("LM backends (llm=NAME; random, shuffled, constant: knowledge controls in the oracle's format):")
        out.extend(f"  {option:<10} {_about('llm', option)}" for option in group_options("llm"))
    return "\n".join(out)


def _run(args: argparse.Namespace) -> int:
    """The command ``args`` names; its exit status."""
    if args.verb == "list":
        print(list_catalog(args.what))
        return 0
    if args.verb in CONFIG_VERBS or args.verb not in VERBS:   # train, answers, a method's step
        cfg = load_config(args.overrides)
        if args.print_config:
            from omegaconf import OmegaConf

            from llmguide.core.config import redact

            print(OmegaConf.to_yaml(OmegaConf.create(redact(cfg))))
            return 0
        from llmguide import pipelines
        from llmguide.distributed import connect, uses_ray

        if uses_ray(cfg):  # runners=N or llm.actor=true: join ray.address's cluster before anything starts
            connect(cfg.ray)
        return pipelines.run(args.verb, cfg) or 0
    if args.verb == "eval":
        from llmguide.pipelines import evaluate_run

        return evaluate_run(args.run_dir, args.overrides) or 0
    if args.verb == "report":
        from llmguide.report import write_report

        path = write_report(args.run_dirs, out=args.out, group_by=args.group_by, control=args.control,
                            metric=args.metric, smooth=args.smooth)
        print(f"report: {path}")
        return 0
    if args.verb == "bench":
        return _run_bench(args.name, args.args)
    if args.verb == "cache":
        from llmguide.llm.cache.cli import cache_command

        return cache_command(args.action, args.file, str(_cache_file(args.path))) or 0
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors are one line ``llmguide: ...`` on stderr, never a traceback: exit 2 for a user
    error (:class:`UsageError`: a bad config, a run directory in use, a folder with no run), 130 for Ctrl-C /
    SIGTERM, 1 for any other error of llmguide or of the file system (no space, read-only, a wrong path)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        text = _option_help(argv)
    except ConfigError as err:
        print(f"llmguide: {err}", file=sys.stderr)
        return 2
    if text is not None:
        print(text)
        return 0
    args = build_parser(_verbs(argv)).parse_args(argv)
    try:
        if args.verb == "train" and args.multirun:   # the launcher's own handler forwards a stop to its runs
            from llmguide.sweep import run_sweep

            return run_sweep(args.overrides)
        with stop_requests(at_boundary=False):       # Ctrl-C / SIGTERM anywhere in the command: one line, 130
            code = _run(args)
            sys.stdout.flush()                       # a closed pipe is told here, not at exit
            return code
    except UsageError as err:
        print(f"llmguide: {err}", file=sys.stderr)
        return 2
    except ValueError as err:   # a layer's own check of a key ("env.task: unknown BabyAI task ..."): a user error
        key = _named_key(err)
        if key is None:
            raise
        text = str(err).splitlines()[0]
        print(f"llmguide: {ConfigError(key, text[len(key):].lstrip(': ') if text.startswith(key + ':') else text)}",
              file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"llmguide: {err}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("llmguide: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:     # the reader of stdout went away (``llmguide cache stats | head -1``)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit's flush
        print("llmguide: the output was closed before it was all written (broken pipe)", file=sys.stderr)
        return 1
    except (LLMGuideError, FileExistsError, FileNotFoundError) as err:
        print(f"llmguide: {err}", file=sys.stderr)
        return 1
    except OSError as err:      # the file system refused: no space, read-only, a path under a file ...
        if not StorageError.explains(err):
            raise
        print(f"llmguide: {StorageError(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
