"""One harness for reproductions: an arm table x seeds -> ``llmguide train -m`` -> ``report`` -> results.

A study script (``benchmarks/studies/<name>.py``) is an arm table and a call::

    import _path  # noqa: F401  (benchmarks/ and its folders on sys.path)
    from harness import Study, main

    STUDY = Study(
        name="bk",                                      # results/<name>/<variant>/ ("{env}", "{task}" allowed)
        env="babyai", task="GoToLocal-RedBall-S20",     # defaults of --env / --task
        arms={"ppo": ["method=none"],                   # arm name -> overrides; named <method>-<llm>,
              "bk_code-oracle": ["method=bk_code", "method.labels={prep}/labels-bk_code-oracle"]},
        common=["agent=ppo", "num_envs=8"],             # every arm gets these (same budget, network, env)
        metric="charts/success", metric_name="training success rate",
        control="ppo", steps=300_000, seeds=3,
        prepare=prepare,                                # offline steps before the arms (see below)
    )

    if __name__ == "__main__":
        sys.exit(main(STUDY))

Every arm is one sweep, ``llmguide train -m seed=0,1,2 <arm overrides> <common> env=... total_steps=...``
(``sweep.jobs`` runs at a time, ``sweep.retries`` retries from the last checkpoint, failures listed), into
``<runs>/<study>/<variant>/<arm>/seed-<s>/`` (``order="seed"`` / ``"alternate"``: seed by seed, every arm,
one run at a time; ``alternate`` reverses the arm order on odd seeds). Seeds are common random numbers:
seed s of every arm has the same initialisation, env layouts and minibatch order. Then the report code
(:func:`llmguide.report.study_report`, runs grouped by their arm folder) writes, into
``benchmarks/results/<study>/<variant>/``:

- ``report.md``: per-arm values with honest intervals (a range with <= 5 seeds), paired
  differences against the control arm (t-interval, p-value, Wilcoxon and sign tests from 6 seeds,
  bootstrap from 10, the smallest detectable difference; Holm-adjusted p-values beside the raw ones with more
  than 3 comparisons), learning curves, achievements, LM statistics, and the code every arm ran (each run's
  ``provenance.jsonl``: its commit, dirty or not), with a warning when the arms come from different commits;
  its first lines say when a comparison's arms come from different commits (reported only with
  ``--allow-mixed``) or the runs were trained from uncommitted changes (``--allow-dirty``);
- ``curves.png``: the study metric over training, every arm;
- ``result.json``: docs/design.md's format (``task``, ``budget_steps``, ``metric``, ``higher_is_better``,
  ``arms: {name: {seeds, values, curve}}``, ``paired: {"<arm> - <control>": {mean, t_low, t_high, p, n, ...}}``)
  plus the study's settings, the preparation steps, the failed runs, the commit at report time (``commit``) and
  the code of every arm's runs (``commits: {arm: {commit: [seeds]}}``), the comparisons across commits
  (``mixed_code``), every harness session that trained in the runs folder (``sessions``: commit, dirty, diff
  sha256, command), and each arm's answer-table coverage (``coverage``: the last ``lm/table_coverage`` of its
  runs, mean, min, max and per seed; null for an arm that reads no table) with ``coverage_warnings`` (an arm
  under 90 %, arms more than 5 points apart: also the report's first lines and stderr; issue 66);

and regenerates the index ``benchmarks/results/README.md``: every study variant's headline row, grouped
by env and task, so studies of different methods on the same task sit in one table.

**The value of a run** (``Study.value``, ``--value``): ``final`` (default), the mean of ``metric`` over its
last 10% of logged steps (``llmguide.report``); ``auc``, the area under its learning curve: the mean over
``bins`` equal env-step bins of the budget of the mean ``metric`` in each bin (an empty bin counts as the
mean of the others; a longer run is cut at the budget), e.g. success AUC.

**Preparation** (``Study.prepare(plan)``): offline steps a method needs before its arms train (collect a
dataset, label it, fit a codebook, pretrain), run before the arms, into ``<prep>`` (``--prep``, default
``<runs>/prep``). ``plan.step(verb, name, overrides, done)`` runs ``llmguide <verb>`` into ``<prep>/<name>``
unless ``<prep>/<name>/<done>`` exists (resumable: a finished step is never run again), and returns None
or why it failed; ``plan.fail(arm, reason)`` marks an arm failed: it is not trained, and is listed in the
report and ``result.json`` as failed with the reason (the study goes on). With ``--dry-run`` steps are
printed and their configs validated; with ``--report-only`` only finished steps count.

**Placeholders**: ``{prep}``, ``{runs}``, ``{env}``, ``{task}``, ``{steps}`` and every command-line value
(``{num_envs}``, a script flag ``--code-iters`` as ``{code_iters}``) are substituted in arm overrides,
``common`` and ``per_env`` (``${...}`` is left to the config: ``seed-${seed}`` is the run's seed).

**Script flags**: ``Study.flags(parser)`` adds a script's own flags; ``Study.configure(args)`` resolves them
(defaults that depend on the env, computed values, more ``args.extra``) before the plan is made.
``Study.details(plan)`` returns Markdown lines appended to report.md and a dict stored as ``details`` in
result.json (label summaries, pretraining statistics, shaping scale).

The harness drives only the ``llmguide`` CLI and the report module, never a method's modules.

Flags of every study script: ``--env`` (env group; also ``--env-id`` unless the study names the task so),
``--task`` (``env.task``, or ``env.id`` for NetHack/MiniHack), ``--seeds`` (a count, ``3`` = 0,1,2, or a list
``100,101,102`` / range ``100-104``), ``--steps``, ``--variant`` (default ``<task>-<budget>``), ``--study``
(results folder name), ``--arms`` (a subset), ``--jobs``, ``--retries``, ``--num-envs``, ``--extra`` (more
overrides for every arm), ``--metric`` (another metrics key; the report then names it by its key), ``--control``
(pair against another arm, e.g. a knowledge control), ``--value``, ``--bins``, ``--resume`` (keep finished runs,
continue interrupted ones from their checkpoint), ``--dry-run`` (print the preparation and the sweeps,
validate every config, run nothing), ``--prepare-only``, ``--report-only`` (no training: report what is
in ``--runs``), ``--runs``, ``--prep`` and ``--results`` (folders), ``--notes`` (Markdown appended to
report.md), ``--allow-dirty``, ``--allow-mixed`` (below). ``python benchmarks/harness --index`` only
regenerates the index.

**One commit per study** (issue 67): a call that trains (or prepares) refuses, exit 2, when the code that makes
runs (``src/``, ``benchmarks/`` but its results, ``pyproject.toml``; tracked or new files) differs from HEAD;
``--allow-dirty`` trains anyway and keeps the diff (``<runs>/code/<sha256>.patch``) and its sha256 in
``<runs>/code.jsonl``. The report refuses, exit 2 and nothing written, when one comparison's arms (the arm's and
the control's runs) come from more than one recorded code, unless ``--allow-mixed``. The index says per study
whether its per-arm commits are on record. Machine paths never go into results: every text file written into
``<variant>/`` names runs, preparation, path flags and the repository relative (:func:`relativize`).

**Artifacts** (issue 67): the files the arms train on besides the code (answer tables: ``llm.table``,
``llm.match_table``; label runs: ``method.labels``' BK program, preference model or goal library and manifest) are
hashed once the preparation is done into ``<runs>/artifacts.json`` and checked before every sweep: one that changed
since is refused (one line naming it and both sha256, exit 2) unless this call's preparation rebuilt it. result.json
lists them (``artifacts``: path, override, sha256, bytes, arms) and the report's *Artifacts* section. **Run
records**: each run's ``provenance.jsonl`` holds its sessions' system, versions and LM (llmguide.core.provenance);
the report's *Run records* section and result.json ``run_records`` say which fields differ between arms.
**Reproduce**: ``python benchmarks/harness --reproduce benchmarks/results/<study>/<variant> [--seeds 0]
[--tolerance X]`` reruns the stored command (result.json ``argv``) for a seed of every arm and compares each value
with the stored one, exit 1 past the tolerance (:mod:`harness.reproduce`).

A call never silently replaces a report holding arms it cannot report again: when ``<variant>/result.json`` has an
arm this call does not run and whose runs are not in ``--runs`` (a subset of arms run into a study's default
variant, or a fresh clone reporting over the committed results), it stops with exit 2 before training and names
them; pass ``--variant`` for the subset, or ``--replace-report``.
"""

from __future__ import annotations

from . import reproduce  # noqa: E402,F401  (python benchmarks/harness --reproduce; it imports the names above)
from .artifacts import (  # noqa: F401
    ARTIFACT_FILES,
    ARTIFACTS,
    LABEL_RUNS,
    ArtifactChanged,
    arm_artifacts,
    artifacts_section,
    check_artifacts,
    plan_artifacts,
    recorded_artifacts,
    result_artifacts,
    sha256_file,
)
from .cli import (  # noqa: F401
    command,
    lost_arms,
    main,
)
from .coverage import (  # noqa: F401
    COVERAGE_GAP,
    COVERAGE_KEY,
    MIN_COVERAGE,
    arm_coverage,
    coverage_section,
    coverage_warnings,
    summarize_coverage,
)
from .index import (  # noqa: F401
    HARNESS_NAMES,
    PRODUCED_BY,
    code_note,
    headline,
    write_index,
)
from .paths import (  # noqa: F401
    FALLBACK_NAMES,
    MACHINE_PATH,
    MACHINE_ROOTS,
    SYSTEM_ROOTS,
    TEXT_SUFFIXES,
    Folder,
    machine_paths,
    named,
    plan_folders,
    relative_paths,
    relativize,
    worktrees,
)
from .plan import (  # noqa: F401
    PLACEHOLDER,
    STATIC_KEYS,
    TASK_KEYS,
    Plan,
    make_plan,
)
from .provenance import (  # noqa: F401
    CODE_PATHS,
    RECORD_PARTS,
    SESSIONS,
    code_of_arms,
    mixed_comparisons,
    record_session,
    run_records,
    sessions,
    tree_state,
)
from .report import (  # noqa: F401
    auc,
    auc_section,
    code_warnings,
    collect,
    plot_summary,
    value_text,
    write_results,
)
from .run import (  # noqa: F401
    finished_runs,
    run_arms,
    run_state,
    seed_runs,
    sweep_command,
    validate,
)
from .study import (  # noqa: F401
    ORDERS,
    SPARSE_PER_ENV,
    SPARSE_PPO,
    SPARSE_PPO_UNTUNED,
    SPARSE_TASK,
    VALUES,
    Study,
    budget_name,
    build_parser,
    parse_seeds,
    seeds_arg,
)
from .where import (  # noqa: F401
    HERE,
    REPO,
    RESULTS,
    ROOT,
    repo,
    root,
)
