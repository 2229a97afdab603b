"""The Runner: the one place that owns a run, and the :class:`Recipe` that says what a method adds.

``train(cfg, recipe)``: seed → run dir → vector env → ``recipe.build`` (env wrappers, reward
modules, periodic metrics) → ``recipe.make_agent`` → resume from the newest checkpoint that loads with
``run.resume=true`` (metrics after the checkpoint dropped; the step resumed from is printed), else
``recipe.prepare`` (offline steps such as behavioural cloning) → ``agent.learn`` with the callbacks
(checkpoint every ``checkpoint_every``, evaluation every ``eval.every``, the recipe's metrics every
``log_every``) → final checkpoint → ``recipe.evaluate`` into ``eval.json`` → ``report.md``.  Every
method writes the same artefacts: ``config.yaml``, ``metrics.jsonl``, ``tb/``, ``checkpoints/``, ``eval.json``,
``report.md``.

A run holds its directory's lock throughout (:class:`~llmguide.core.rundir.RunLock`).  A resumed run
writes ``config.yaml`` only once it has trained an update (:class:`ConfigRecord`; a session that diverges puts
the old file back).  Ctrl-C or SIGTERM stops training at the next step boundary: a checkpoint and the metrics
are saved and :class:`Interrupted` says how to resume (a second Ctrl-C stops at once); during setup or the
final evaluation it stops at once, saving what it can.  A non-finite loss or parameter stops the run
(:class:`~llmguide.learners.common.NonFiniteError`) with its last good checkpoint kept.

Offline steps (``collect``, ``label``) open their run directory with :func:`open_run`; ``llmguide eval``
is :mod:`llmguide.pipelines.evaluate`.
"""

from __future__ import annotations

import logging
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import DictConfig, open_dict

from llmguide.core.errors import ConfigError, Interrupted
from llmguide.core.hparams import write_config_text
from llmguide.core.rundir import RunDir, read_metrics
from llmguide.core.saved_config import ConfigRecord
from llmguide.core.seeding import seed_everything
from llmguide.core.stopping import Stopped, stop_requests
from llmguide.learners.callbacks import (
    Callback,
    CheckpointCallback,
    EvalCallback,
    FunctionCallback,
    MetricsCallback,
    StopCallback,
    TrainingStopped,
)
from llmguide.learners.common import NonFiniteError
from llmguide.llm.service.metrics import check_answered_fraction
from llmguide.pipelines.summary import TrainResult, summary_line

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000  # evaluation episodes never reuse training seeds


@dataclass
class Parts:
    """What a recipe adds around the vector env for one run."""

    envs: Any                                                  # the (wrapped) vector env the agent sees
    modules: list[tuple[float, Any]] = field(default_factory=list)  # (coef, RewardModule)
    extrinsic_coef: float = 1.0
    metrics: Callable[[], dict[str, Any]] | None = None        # periodic metrics (lm/*, method/*)
    progress: dict[str, str] = field(default_factory=dict)     # progress-bar name -> metric key
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            try:
                close()
            except Exception as err:  # closing must not hide the run's own error
                log.warning("closing %s failed: %s", close, err)


@dataclass(frozen=True)
class Step:
    """An offline verb of a method (``llmguide <verb> method=...``): ``run(cfg) -> exit code``, its one-line
    ``help`` (the CLI's ``--help``), and ``asks_lm``: the LM server is probed first, as for training."""

    run: Callable[[DictConfig], int]
    help: str
    asks_lm: bool = False

    def __call__(self, cfg: DictConfig) -> int:
        return self.run(cfg)


class Recipe:
    """A method: everything the pipelines and the CLI need from it.  ``build`` (reward modules, env wrappers),
    the agent kind, offline preparation, evaluation, and these declarations:

    - :attr:`steps`: its offline CLI verbs (``collect``, ``label`` ...), each a :class:`Step` with its help;
    - :attr:`answer_queries` and :meth:`table_answerers`: what ``llmguide answers`` asks and who answers it;
    - :attr:`lm_mode_key`: the method key (``score`` or ``generate``) that says how its LM is asked;
    - :attr:`prompt_keys`: the method keys that shape its LM requests (an answer table's and a run's prompt hash).

    The defaults train PPO or DQN (``agent.name``); :class:`~llmguide.pipelines.standard.StandardRecipe`
    adds the reward module named by ``method.reward``.
    """

    agents: tuple[str, ...] = ("ppo", "dqn")
    env_families: tuple[str, ...] | None = None   # the env families the method runs on (None: every family)
    status: str = "ready"                          # shown by ``llmguide list``
    # offline CLI verbs of the method, e.g. {"collect": Step(collect, "collect a dataset ...")}
    steps: dict[str, Step] = {}
    # ``llmguide answers``: fn(cfg, dataset) -> the LM requests (llmguide.llm.table.Query) a run with cfg would send
    # for the dataset's states; None: the method has no answer table
    answer_queries: Callable[[DictConfig, Any], list[Any]] | None = None
    lm_mode_key: str | None = None      # method.<key> is score | generate: how the LM is asked (probed, switched)
    prompt_keys: tuple[str, ...] = ()   # method.<key>s that shape the LM's requests (absent keys count as None)

    @staticmethod
    def table_answerers(cfg: DictConfig) -> Sequence[Any]:
        """The ground-truth answers ``llm=oracle`` (and its controls) gives to this method's table requests."""
        return ()

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    @classmethod
    def check_env(cls, cfg: DictConfig) -> None:
        """``env`` must be one of :attr:`env_families` (checked when the config loads, and by :meth:`check`)."""
        name = str(cfg.env.name)
        if cls.env_families is not None and name not in cls.env_families:
            raise ConfigError("env", f"method={cfg.method.name} runs on env={'|'.join(cls.env_families)}, "
                                     f"got env={name}")

    def check(self) -> None:
        """Config checks beyond the schema, before any compute (raise ConfigError naming the key)."""
        self.check_env(self.cfg)
        if str(self.cfg.agent.name) not in self.agents:
            raise ConfigError("agent", f"method={self.cfg.method.name} trains with agent={'|'.join(self.agents)}, "
                                       f"got agent={self.cfg.agent.name}")
        if str(self.cfg.agent.name) == "scripted":
            from llmguide.learners.scripted import check

            if (problem := check(self.cfg.agent, self.cfg.env)) is not None:
                raise ConfigError("agent.policy", problem)

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        """Env wrappers, ``(coef, RewardModule)`` pairs and periodic metrics (default: nothing added)."""
        return Parts(envs, extrinsic_coef=float(self.cfg.method.extrinsic_coef))

    def make_agent(self, parts: Parts, run: RunDir | None) -> Any:
        cfg = self.cfg
        kwargs = dict(reward_modules=parts.modules, extrinsic_coef=parts.extrinsic_coef, run=run,
                      seed=int(cfg.seed), device=str(cfg.device))
        if str(cfg.agent.name) == "scripted":   # plays, never learns: a reference row
            from llmguide.learners.scripted import ScriptedAgent

            try:
                return ScriptedAgent(parts.envs, cfg.agent, cfg.env, run=run, seed=int(cfg.seed))
            except ValueError as err:
                raise ConfigError("agent", str(err)) from None
        if str(cfg.agent.name) == "dqn":
            from llmguide.learners.dqn import DQN

            return DQN(parts.envs, cfg.agent, **kwargs)
        from llmguide.learners.ppo import PPO

        return PPO(parts.envs, cfg.agent, **kwargs)

    def prepare(self, agent: Any, run: RunDir) -> None:
        """Offline work on a fresh (not resumed) agent before learning (e.g. behavioural cloning)."""
        return None

    def learns(self) -> bool:
        """False when the method stops after ``prepare`` (e.g. GLAM's BC-Bot baseline)."""
        return True

    def finish(self, parts: Parts, run: RunDir) -> None:
        """After learning, before the final checkpoint (e.g. let in-flight LM labels land)."""
        return None

    def evaluate(self, agent: Any, episodes: int, greedy: bool) -> dict[str, Any]:
        """Evaluation episodes on held-out seeds (``seed + EVAL_SEED_OFFSET``)."""
        from llmguide.learners.evaluation import evaluate

        return evaluate(agent, self.cfg.env, episodes, int(self.cfg.seed) + EVAL_SEED_OFFSET, greedy=greedy)

    def load_for_eval(self, state: dict[str, Any]) -> Any:
        """An agent that acts from a checkpoint's ``agent`` state (``llmguide eval``)."""
        from llmguide.envs import make_env

        probe = make_env(self.cfg.env, int(self.cfg.seed))
        spaces = SimpleNamespace(single_observation_space=probe.observation_space,
                                 single_action_space=probe.action_space, num_envs=int(self.cfg.num_envs))
        probe.close()
        agent = self.make_agent(Parts(spaces), None)
        agent.load_state_dict({**state, "reward_modules": []})  # modules do not act
        return agent


@contextmanager
def open_run(cfg: DictConfig, write_config: bool = True, outputs: Sequence[str] = ()) -> Iterator[RunDir]:
    """The run directory named by ``cfg.run``, locked (config written unless ``write_config=False``); a folder
    that holds a run (metrics, checkpoints, or one of ``outputs``: what an offline step writes, e.g.
    ``dataset``) is refused unless ``run.resume`` or ``run.overwrite`` (:meth:`RunDir.open`); the session's code
    is appended to its ``provenance.jsonl``."""
    from llmguide.core import provenance
    from llmguide.core.wandb_logger import attach_wandb
    from llmguide.pipelines.recipes import recipe_class

    with RunDir.open(cfg, write_config=write_config, outputs=outputs) as run:
        provenance.record(run.path, resumed=bool(cfg.run.resume), cfg=cfg,
                          prompt_keys=recipe_class(cfg).prompt_keys)
        attach_wandb(cfg, run)
        yield run


def reopen_run(run_dir: str | Path, lock: bool = True) -> RunDir:
    """A finished run's directory, to add an evaluation (config kept, no TensorBoard writer); ``lock=False``
    to only read it (e.g. a checkpoint of a run still training)."""
    return RunDir(run_dir, tensorboard=False, lock=lock)


def make_run_envs(cfg: DictConfig) -> Any:
    """The run's vector env: local (:func:`llmguide.envs.make_vector_env`), or with ``runners=N`` the envs in
    N Ray env-runner actors behind one ``VectorEnv`` (:class:`llmguide.distributed.vector.RayVectorEnv`)."""
    runners = int(cfg.get("runners", 0) or 0)
    if runners > 0:
        from llmguide.distributed.vector import RayVectorEnv

        return RayVectorEnv(cfg.env, int(cfg.num_envs), int(cfg.seed), runners, cfg.get("ray"))
    from llmguide.envs import make_vector_env

    return make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))


def train(cfg: DictConfig, recipe: Recipe) -> int:
    """Run ``recipe`` into ``runs/<name>/``; returns 0 (:func:`run_training` returns what it wrote)."""
    run_training(cfg, recipe)
    return 0


def run_training(cfg: DictConfig, recipe: Recipe, callbacks: Sequence[Callback] = ()) -> TrainResult:
    """Run ``recipe`` into ``runs/<name>/`` and print a one-line summary (run directory, train return, eval
    return, report).  ``callbacks``: the caller's own :class:`~llmguide.learners.callbacks.Callback` objects,
    called after the Runner's (checkpoints, evaluation, metrics) and before the stop request's.  Ctrl-C / SIGTERM
    in setup or the final evaluation stops at once; :class:`Interrupted` says what was saved (:func:`_stops_in`)."""
    from llmguide.report.runs import train_return

    recipe.check()
    start = time.perf_counter()
    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    with stop_requests(at_boundary=False), open_run(cfg, write_config=not cfg.run.resume) as run:
        if not cfg.run.resume:   # a resumed run's tb/ has it already
            write_config_text(run.tb, cfg)
        wait = _family_wait(cfg)
        if wait:
            print(f"env={cfg.env.name}: {wait}", file=sys.stderr, flush=True)
        record = ConfigRecord(run, cfg, resumed=bool(cfg.run.resume))
        envs = parts = None
        try:
            with _stops_in("setup", run):
                envs = make_run_envs(cfg)
                parts = recipe.build(envs, run)
                agent = recipe.make_agent(parts, run)
                resumed_from = run.resume_agent(agent) if cfg.run.resume else None   # config.yaml: ConfigRecord
                if resumed_from is None:
                    recipe.prepare(agent, run)
            if recipe.learns():
                learn(cfg, agent, [FunctionCallback(lambda agent, metrics: record.write()),
                                   *_callbacks(cfg, recipe, parts, run, envs), *callbacks], parts, run, record)
            record.write()
            recipe.finish(parts, run)
            run.save_checkpoint({"agent": agent.state_dict()}, int(agent.global_step))
            final = _log_final_metrics(parts, agent, run)
        finally:
            if parts is not None:
                parts.close()
            if envs is not None:
                envs.close()
        with _stops_in("the final evaluation", run, lambda: _kept_without_eval(run, write_report(run.path))):
            results = evaluate_agent(recipe, agent, int(cfg.eval.episodes), bool(cfg.eval.greedy),
                                     progress=bool(cfg.progress))
        run.write_json("eval.json", {"step": int(agent.global_step), **results})
        trained = train_return(read_metrics(run.path)) or (None, 0)   # the report's: last 10 % of steps
        result = TrainResult(run.path, int(agent.global_step), results, write_report(run.path),
                             time.perf_counter() - start, {k: v for k, v in final.items() if k.startswith("lm/")},
                             *trained)
    print(summary_line(result), flush=True)
    if resumed_from is not None:
        print(f"resume: from step {resumed_from}; this session trained {result.step - resumed_from} steps "
              f"(to step {result.step})", flush=True)
    # llm.require_fraction: a run whose LM answered too few of its requests fails, with every file written
    check_answered_fraction(final, cfg.llm.get("require_fraction"))
    return result


@contextmanager
def _stops_in(phase: str, run: RunDir, kept: Callable[[], str] | None = None) -> Iterator[None]:
    """Within: a stop signal (:class:`Stopped`, raised at once) is :class:`Interrupted` saying in which ``phase``
    and what the run kept (``kept()``: saves what it can and says so; default: the checkpoint and how to resume)."""
    try:
        yield
    except Stopped as err:
        said = kept() if kept else f"{_kept(run)}; resume with: {resume_command(run)}"
        raise Interrupted(f"{err.signal} during {phase}: {said}") from None


def _kept_without_eval(run: RunDir, report: Path | None) -> str:
    shown = f" and the report {report}" if report else ""
    return (f"the checkpoint (step {run.checkpoint_step()}){shown} are saved, eval.json is not; evaluate with: "
            f"{shlex.join(['llmguide', 'eval', str(run.path)])}")


def learn(cfg: DictConfig, agent: Any, callbacks: list[Callback], parts: Parts, run: RunDir,
          record: ConfigRecord | None = None) -> None:
    """``agent.learn`` to ``total_steps``.  Ctrl-C / SIGTERM: stop at the next step boundary, save a checkpoint
    and the metrics, raise :class:`Interrupted` (how to resume); a second one stops at once.  A non-finite loss
    or parameter: :class:`NonFiniteError` naming the last good checkpoint (and ``record``'s config put back)."""
    with stop_requests() as stop:
        try:
            agent.learn(int(cfg.total_steps), callback=[*callbacks, StopCallback(stop)], progress=bool(cfg.progress))
        except TrainingStopped:
            pass
        except KeyboardInterrupt:
            raise Interrupted(f"stopped at once at step {agent.global_step}; {_kept(run)}; resume with: "
                              f"{resume_command(run)}") from None
        except NonFiniteError as err:
            raise NonFiniteError(f"{err}; {_kept(run, 'good ')}{record.restore() if record else ''}") from None
        if stop.requested:
            run.save_checkpoint({"agent": agent.state_dict()}, int(agent.global_step))
            _log_final_metrics(parts, agent, run)
            raise Interrupted(f"{stop.signal}: stopped at step {agent.global_step}, checkpoint and metrics saved; "
                              f"resume with: {resume_command(run)}")


def resume_command(run: RunDir) -> str:
    """The command that continues this run (the rest of its config comes from its ``config.yaml``)."""
    return shlex.join(["llmguide", "train", f"run.dir={run.path.parent}", f"run.name={run.path.name}",
                       "run.resume=true"])


def _kept(run: RunDir, good: str = "") -> str:
    """``the last checkpoint (step N) is kept in DIR``, or that there is none."""
    step = run.checkpoint_step()
    return f"the last {good}checkpoint (step {step}) is kept in {run.path}" if step is not None else \
        f"no checkpoint was saved in {run.path}"


def _log_final_metrics(parts: Parts, agent: Any, run: RunDir) -> dict[str, Any]:
    """The recipe's metrics at the end of training, logged at the agent's step; returned."""
    final = parts.metrics() if parts.metrics is not None else {}
    if final:
        run.log(int(agent.global_step), final)
    return final


def _family_wait(cfg: DictConfig) -> str | None:
    from llmguide.envs.registry import FAMILIES

    fam = FAMILIES.get(str(cfg.env.name))
    return fam.wait if fam is not None else None


@contextmanager
def _eval_episode_cap(cfg: DictConfig) -> Iterator[int | None]:
    """``eval.max_steps``: every env an evaluation builds ends its episodes by then, never later than its own
    limit: ``env.max_steps`` = min(its own, the cap) where the family's own limit is known (Crafter, Craftax),
    else the envs are truncated at the cap (``env.step_cap``: BabyAI's levels, NetHack's tasks keep their own
    shorter limits)."""
    cap = cfg.eval.get("max_steps") if "eval" in cfg else None
    if not cap:
        yield None
        return
    from llmguide.envs.registry import default_max_steps

    before = cfg.env.get("max_steps")
    own = before if before is not None else default_max_steps(cfg.env)   # null: the family's own cap
    key = "max_steps" if own is not None else "step_cap"
    with open_dict(cfg.env):
        cfg.env[key] = int(cap) if own is None else min(int(own), int(cap))
    try:
        yield int(cfg.env[key])
    finally:
        with open_dict(cfg.env):
            if key == "max_steps":
                cfg.env.max_steps = before
            else:
                cfg.env.pop("step_cap", None)


def evaluate_agent(recipe: Recipe, agent: Any, episodes: int, greedy: bool, progress: bool = False) -> dict[str, Any]:
    """``recipe.evaluate`` with ``eval.max_steps`` applied to the envs it builds and, with ``progress``, a
    progress line (episodes done, steps, return so far); the results record the cap and the seconds taken."""
    from llmguide.learners.evaluation import eval_progress

    start = time.perf_counter()
    with _eval_episode_cap(recipe.cfg) as cap, eval_progress(progress and episodes > 0,
                                                             "eval greedy" if greedy else "eval sampled"):
        results = recipe.evaluate(agent, episodes, greedy)
    if episodes > 0:
        results = {**results, "max_steps": cap, "seconds": round(time.perf_counter() - start, 2)}
    return results


def _callbacks(cfg: DictConfig, recipe: Recipe, parts: Parts, run: RunDir, envs: Any) -> list[Callback]:
    callbacks: list[Callback] = [CheckpointCallback(run, int(cfg.checkpoint_every))]
    if int(cfg.eval.every) > 0 and int(cfg.eval.episodes) > 0:
        callbacks.append(EvalCallback(run, int(cfg.eval.every),
                                      lambda agent: evaluate_agent(recipe, agent, int(cfg.eval.episodes),
                                                                   bool(cfg.eval.greedy))))
    # the recipe's metrics and the vector env's own (e.g. Ray env-runner restarts), logged together
    sources = [f for f in (parts.metrics, getattr(envs, "metrics", None)) if callable(f)]
    if sources:
        callbacks.append(MetricsCallback(run, int(cfg.log_every),
                                         lambda: {k: v for f in sources for k, v in f().items()}, parts.progress))
    return callbacks


def write_report(run_path: str | Path) -> Path | None:
    """``report.md`` with plots for one run (a failure here never loses the run's files); its path or None."""
    try:
        from llmguide.report import write_report as write

        return Path(write([str(run_path)]))   # the report.md file
    except Exception as err:
        log.warning("report not written for %s: %s", run_path, err)
        return None
