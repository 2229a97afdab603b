"""A study: its arm table (:class:`Study`), the shared sparse Craftax task's settings and the command line of
every study script (:func:`build_parser`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .where import RESULTS

if TYPE_CHECKING:
    from .plan import Plan

VALUES = ("final", "auc")
ORDERS = ("arm", "seed", "alternate")

# The shared sparse Craftax task (issues 29, 30, 34): one task, episode cap and PPO for every method's study on it,
# so the index sets the methods side by side and their `ppo` arms are one command (a study run with the same
# --runs and --resume reuses another's finished `ppo` runs). The task is one achievement: reward 1 on success, the
# episode ends there, capped at 1500 steps (llmguide.envs.crafter.rules.TASK_MAX_STEPS), no health reward.
SPARSE_TASK = "make_stone_pickaxe"
# flat encoder over the symbolic view, a GRU core (ONI/Motif's reference policy), 64-step rollouts, 256 hidden,
# extrinsic x10 (ONI/Motif on sparse tasks, BK's coefficient); no held-out evaluation (success is logged per episode).
# Learning rate 1e-3 and entropy coefficient 0.003: the winner of benchmarks/studies/ppo_sweep.py on make_wood_pickaxe
# (results/ppo_sweep_craftax/). Every sparse-task result committed before that sweep ran with CleanRL's 2.5e-4 and
# 0.01 (SPARSE_PPO_UNTUNED; each result.json lists its overrides): rerun a study's arms to compare with them.
SPARSE_PPO = ["agent=ppo", "agent.image_encoder=flat", "agent.recurrent=gru", "agent.num_steps=64", "agent.hidden=256",
              "agent.lr=1e-3", "agent.ent_coef=0.003", "method.extrinsic_coef=10.0", "eval.episodes=0"]
SPARSE_PPO_UNTUNED = [o for o in SPARSE_PPO if not o.startswith(("agent.lr=", "agent.ent_coef="))]
SPARSE_PER_ENV = {"craftax": ["num_envs=64", *SPARSE_PPO], "crafter": ["num_envs=8", *SPARSE_PPO]}


@dataclass
class Study:
    """An arm table: ``arms`` (name -> overrides) run over seeds with ``common`` overrides for every arm."""

    name: str
    arms: dict[str, list[str]]
    control: str
    metric: str                                   # a metrics.jsonl key (per episode or per log record)
    metric_name: str = ""                         # how the report names it
    common: list[str] = field(default_factory=list)
    env: str = "crafter"
    task: str | None = None
    steps: int = 100_000
    seeds: int = 3
    per_env: dict[str, list[str]] = field(default_factory=dict)   # extra overrides on one env group only
    upper_reference: tuple[str, ...] = ()         # arms that are labelled upper references, never baselines
    higher_is_better: bool = True
    title: str = ""
    about: str = ""                               # a paragraph at the top of report.md
    jobs: int = 1
    retries: int = 1
    value: str = "final"                          # the value of a run: "final" (last 10%) or "auc" (see above)
    bins: int = 20                                # env-step bins of value="auc"
    default_arms: tuple[str, ...] = ()            # --arms default (empty: every arm)
    env_id: str = "env"                           # what --env-id names: "env" (the env group) or "task"
    order: str = "arm"                            # "arm", "seed" or "alternate" (see above)
    flags: Callable[[argparse.ArgumentParser], None] | None = None      # the script's own flags
    configure: Callable[[argparse.Namespace], None] | None = None      # resolve them before the plan
    prepare: Callable[[Plan], None] | None = None                       # offline steps before the arms
    details: Callable[[Plan], tuple[list[str], dict[str, Any]]] | None = None   # report lines, result.json data

    def __post_init__(self) -> None:
        if self.control not in self.arms:
            raise ValueError(f"control arm {self.control!r} is not in the arm table {list(self.arms)}")
        unknown = [a for a in self.default_arms if a not in self.arms]
        if unknown:
            raise ValueError(f"default arms {unknown} are not in the arm table {list(self.arms)}")
        for key, value, allowed in (("value", self.value, VALUES), ("order", self.order, ORDERS),
                                    ("env_id", self.env_id, ("env", "task"))):
            if value not in allowed:
                raise ValueError(f"Study.{key} must be one of {allowed}, got {value!r}")


# --- arguments -----------------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``3`` -> [0, 1, 2]; ``100,101`` -> [100, 101]; ``2,`` -> [2]; ``100-102`` -> [100, 101, 102].

    ValueError when that names no seed: ``0`` is a count of none, not seed 0 (``0,`` is seed 0)."""
    text = text.strip()
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        elif "-" in text.lstrip("-"):
            low, high = text.split("-", 1)
            seeds = list(range(int(low), int(high) + 1))
        else:
            seeds = list(range(int(text)))
    except ValueError:
        seeds = []
    if not seeds:
        raise ValueError(f"{text!r} names no seed: give a count (3 = seeds 0,1,2), a list (0,2 or 2, for seed 2 "
                         "alone) or a range (100-104)")
    return seeds


def seeds_arg(text: str) -> str:
    """argparse type of ``--seeds``: checked now (one line, exit 2), parsed by :func:`parse_seeds` later."""
    try:
        parse_seeds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def budget_name(steps: int) -> str:
    """120000 -> '120k', 1000000 -> '1m', 300 -> '300'."""
    if steps >= 1_000_000 and steps % 1_000_000 == 0:
        return f"{steps // 1_000_000}m"
    if steps >= 1000 and steps % 1000 == 0:
        return f"{steps // 1000}k"
    return str(steps)


def build_parser(study: Study) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(study.title or study.name) + "\n\n" + (study.about or ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    env_flags, task_flags = ["--env"], ["--task"]
    (env_flags if study.env_id == "env" else task_flags).append("--env-id")
    p.add_argument(*env_flags, dest="env", default=study.env, help=f"env group (default {study.env})")
    p.add_argument(*task_flags, dest="task", default=study.task,
                   help=f"env.task (env.id on nethack/minihack); default {study.task or 'the env config default'}")
    p.add_argument("--seeds", default=str(study.seeds), type=seeds_arg,
                   help="a count (3 = seeds 0,1,2), a list 100,101 (2, = seed 2 alone) or a range 100-104")
    p.add_argument("--steps", type=int, default=study.steps, help="env steps per run")
    p.add_argument("--variant", default=None, help="results subfolder (default: <task>-<budget>)")
    p.add_argument("--study", default=None, help="results folder <results>/<study>/ (default: the study's name)")
    p.add_argument("--arms", default=",".join(study.default_arms or study.arms),
                   help=f"comma-separated subset of the arm table {list(study.arms)}")
    p.add_argument("--jobs", type=int, default=study.jobs, help="runs at a time (sweep.jobs)")
    p.add_argument("--retries", type=int, default=study.retries, help="sweep.retries: a failed run is resumed this often")
    p.add_argument("--num-envs", type=int, default=None, help="num_envs for every arm")
    p.add_argument("--extra", nargs="*", default=[], help="extra overrides for every arm")
    p.add_argument("--metric", default=study.metric, help=f"metrics.jsonl key of the value (default {study.metric})")
    p.add_argument("--value", default=study.value, choices=VALUES,
                   help="value of a run: final (mean over the last 10%% of logged steps) or auc (mean over --bins "
                        f"equal env-step bins of the budget); default {study.value}")
    p.add_argument("--bins", type=int, default=study.bins, help="env-step bins of --value auc")
    p.add_argument("--resume", action="store_true", help="keep finished runs; continue unfinished ones")
    p.add_argument("--dry-run", action="store_true",
                   help="print the preparation steps and the sweeps, validate every config, run nothing")
    p.add_argument("--prepare-only", action="store_true", help="run the preparation steps only")
    p.add_argument("--report-only", action="store_true", help="no training: report the runs already in --runs")
    p.add_argument("--allow-dirty", action="store_true",
                   help="train although src/ or benchmarks/ have uncommitted changes; the diff and its sha256 are "
                        "kept in <runs>/code/ and named in the report")
    p.add_argument("--allow-mixed", action="store_true",
                   help="report although a comparison's arms come from different commits (the report says so first)")
    p.add_argument("--replace-report", action="store_true",
                   help="let this call's report replace one that holds arms whose runs are not in --runs")
    p.add_argument("--runs", "--out", dest="runs", type=Path, default=None,
                   help="run folder (default runs/bench/<study>/<variant>)")
    p.add_argument("--prep", type=Path, default=None, help="preparation folder (default <runs>/prep)")
    p.add_argument("--results", type=Path, default=RESULTS, help="results root (default benchmarks/results)")
    p.add_argument("--notes", type=Path, default=None, help="a Markdown file appended to report.md")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples for >= 10 seeds")
    p.add_argument("--control", default=study.control,
                   help=f"the arm paired differences are taken against (default {study.control}; e.g. a knowledge "
                        "control, to compare the treatment with it)")
    p.set_defaults(metric_name=study.metric_name)
    if study.flags:
        study.flags(p.add_argument_group("study flags"))
    return p


