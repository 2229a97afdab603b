"""ELLM with a real LM at full freshness (issue 48): what does Qwen's knowledge add over a random suggester?

ELLM over the open vocabulary (all 139 action strings of Craftax-Classic's text actions: the knowledge has to pick
the achievement actions), intrinsic-only, the same PPO and budget as ``ellm_crafter.py``'s Craftax study. Every
LM-like arm, the oracle and random included, reads its suggestions from an **answer table** built the same way
(``llmguide answers``) over the same data (``--data``: a collection run's dataset) and the same state signatures
(the ``--table-queries`` most frequent ones, or with ``--states`` every state of a built table). A state whose
signature is not in its table gets the table's answer to the most similar state it holds (``llm.table_fallback=
nearest``, the same declared fallback in every arm, so coverage is equal; reported per arm).

Arms, and what each is told (every LM-like arm sees the state caption and, in its prompt, the list of valid
actions; none is told a task: ELLM's pretraining has none):

* ``ellm-oracle-open``: the requirement tree's achievable achievements (scores; ties broken at random per seed);
* ``ellm-qwen-open``: Qwen2.5-Coder-1.5B-Instruct, generating bullets through its chat template with three worked
  examples (``ellm_actions_listed``: the knowledge probe's best Qwen mode, precision 0.33 against 0.14 scoring);
* ``ellm-gemma-open``: Gemma 3 270M (base) scoring every action, length-normalised (the probe's best Gemma mode);
  ``ellm-gemma-listed-open``: the same after the prompt that lists the valid actions (``ellm_actions_score_listed``),
  and ``ellm-gemma-listed-shuffled-open`` its answers permuted among the states;
* ``ellm-qwen-offdomain-open`` / ``ellm-qwen-zeroshot-open``: Qwen told the format by worked examples from another
  game (``ellm_actions_offdomain``) / by no example (``ellm_actions_zeroshot``), each with its shuffle;
* ``ellm-prompt-only-open``: no LM: the few-shot prompt's own worked examples answer (``llm=prompt_only``: as many of
  the 7 actions they name as Qwen gave on the state, ``llm.match_table``), a table per seed: what the prompt tells;
* ``ellm-random-open``: the knowledge control: a random 5 of the 139 per signature, a table drawn per seed;
* ``ellm-qwen-shuffled-open``: Qwen's answers permuted among the table's states (``answers.shuffle_of``, a table per
  seed): the goals Qwen favours, as often, but not for the state they were asked about;
* ``ellm-oracle-shuffled-open``: the oracle's answers permuted the same way: the rules' favourite actions, not the
  state's;
* ``no-reward`` (the control of ``ellm_crafter.py``) and ``rnd``: references without an LM.

Value per seed: ground-truth achievements unlocked per episode over the last 10% of the budget; the report's other
sections give per-achievement values. Headline: ``ellm-qwen-open - ellm-random-open``, paired (``--control``).

    python benchmarks/studies/ellm_lm.py --data RUN --tables DIR --table-queries 500 --seeds 10 --steps 120000
"""

from __future__ import annotations

import sys
from pathlib import Path

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)
from ellm_crafter import COMMON, ELLM, OPEN

from harness import Study, budget_name, main

TABLE = "llm.table={tables}/{name}.sqlite"
# every arm's same declared fallback for a state its table lacks: the table's answer to the most similar state it
# holds (llm/table.py), so every LM-like arm answers every step from its own answers (equal coverage, issue 66)
NEAREST = "llm.table_fallback=nearest"
QWEN_GEN = ["llm=qwen", "method.suggester=generate"]
# arm -> (table name, overrides that shape its requests and name its LM)
LM_ARMS = {
    "ellm-oracle-open": ("oracle", ["llm=oracle", "method.prompt=ellm_actions_score_listed"]),
    "ellm-qwen-open": ("qwen-gen3", [*QWEN_GEN, "method.prompt=ellm_actions_listed"]),
    # told the format by three worked examples from another game (a space-trading game: no action of Crafter's)
    "ellm-qwen-offdomain-open": ("qwen-offdomain", [*QWEN_GEN, "method.prompt=ellm_actions_offdomain"]),
    # told no example at all
    "ellm-qwen-zeroshot-open": ("qwen-zeroshot", [*QWEN_GEN, "method.prompt=ellm_actions_zeroshot"]),
    # no LM: what the few-shot prompt tells, k of the 7 actions its examples name, k matched to Qwen's answer on
    # the state (a table per seed)
    "ellm-prompt-only-open": ("prompt-only-s${seed}", ["llm=prompt_only", "method.suggester=generate",
                                                        "method.prompt=ellm_actions_listed"]),
    "ellm-gemma-open": ("gemma-score-norm", ["llm=embedded", "method.normalize_scores=true"]),
    # Gemma scoring with the prompt that lists the valid actions, as every other LM arm is told them
    "ellm-gemma-listed-open": ("gemma-score-listed", ["llm=embedded", "method.normalize_scores=true",
                                                      "method.prompt=ellm_actions_score_listed"]),
    "ellm-gemma-listed-shuffled-open": ("gemma-score-listed-shuffled-s${seed}",
                                        ["llm=embedded", "method.normalize_scores=true",
                                         "method.prompt=ellm_actions_score_listed"]),
    "ellm-random-open": ("random-s${seed}", ["llm=random", "method.prompt=ellm_actions_score_listed"]),
    # Qwen's own answers permuted among the states (a table per seed): its favourite goals, at its rate, without
    # their relation to the state
    "ellm-qwen-shuffled-open": ("qwen-gen3-shuffled-s${seed}", [*QWEN_GEN, "method.prompt=ellm_actions_listed"]),
    "ellm-qwen-offdomain-shuffled-open": ("qwen-offdomain-shuffled-s${seed}",
                                          [*QWEN_GEN, "method.prompt=ellm_actions_offdomain"]),
    "ellm-qwen-zeroshot-shuffled-open": ("qwen-zeroshot-shuffled-s${seed}",
                                         [*QWEN_GEN, "method.prompt=ellm_actions_zeroshot"]),
    # the oracle's scores permuted among the states: which actions the rules favour anywhere, not here
    "ellm-oracle-shuffled-open": ("oracle-shuffled-s${seed}", ["llm=oracle", "method.prompt=ellm_actions_score_listed"]),
}
SHUFFLED = {"ellm-qwen-shuffled-open": "qwen-gen3", "ellm-oracle-shuffled-open": "oracle",   # arm -> the table
            "ellm-qwen-offdomain-shuffled-open": "qwen-offdomain",                           # it permutes
            "ellm-gemma-listed-shuffled-open": "gemma-score-listed",
            "ellm-qwen-zeroshot-shuffled-open": "qwen-zeroshot"}
MATCHED = {"ellm-prompt-only-open": "qwen-gen3"}   # arm -> the LM table whose answer counts it matches
ARMS = {
    "no-reward": ["method=none", "method.extrinsic_coef=0.0"],
    **{arm: [*ELLM, *OPEN, *over, TABLE.replace("{name}", name), NEAREST] for arm, (name, over) in LM_ARMS.items()},
    "rnd": ["method=rnd", "method.extrinsic_coef=0.0"],
}


def flags(parser) -> None:
    parser.add_argument("--data", required=False, default=None,
                        help="a collection run (or its dataset/) whose state captions the tables answer")
    parser.add_argument("--states", default=None,
                        help="instead of --data: a built answer table whose states every table answers "
                             "(answers.requests_of; e.g. a committed Qwen table)")
    parser.add_argument("--tables", default=None, help="folder of the answer tables (default <prep>/tables)")
    parser.add_argument("--table-queries", type=int, default=500,
                        help="answer the N most frequent state signatures of the data in every table (default 500)")
    parser.add_argument("--lm-threads", type=int, default=1, help="llm.n_threads of the real LMs' table builds")


def configure(args) -> None:
    if args.variant is None:
        args.variant = f"open-lm-{budget_name(args.steps)}"


def prepare(plan) -> None:
    """One table per LM-like arm (the random arm: one per seed) over the same data and signatures."""
    a = plan.args
    tables = Path(a.tables).resolve() if a.tables else plan.prep / "tables"
    plan.values["tables"] = str(tables)
    if not a.data and not a.states:
        for arm in LM_ARMS:
            if arm in plan.arms:
                plan.fail(arm, "no --data or --states: the states the answer tables cover")
        return
    tables.mkdir(parents=True, exist_ok=True)
    source = ([f"answers.requests_of={Path(a.states).resolve()}"] if a.states else
              [f"answers.data={Path(a.data).resolve()}", f"answers.max_queries={a.table_queries}"])
    for arm, (name, over) in LM_ARMS.items():
        if arm not in plan.arms:
            continue
        base = [*ELLM, *OPEN, *over, *source, "answers.coverage=1.0",
                *([f"llm.n_threads={a.lm_threads}"] if "llm=qwen" in over or "llm=embedded" in over else [])]
        if arm in MATCHED:
            base.append(f"llm.match_table={tables}/{MATCHED[arm]}.sqlite")
        names = [(name.replace("${seed}", str(s)), [f"seed={s}"]) for s in plan.seeds] if "${seed}" in name \
            else [(name, [])]
        if arm in SHUFFLED:   # no LM: the source table's answers, permuted with the seed
            base = [*ELLM, *OPEN, *over, f"answers.shuffle_of={tables}/{SHUFFLED[arm]}.sqlite"]
        for table, extra in names:
            why = plan.step("answers", f"table-{table}", [*base, f"answers.out={tables}/{table}.sqlite", *extra],
                            done=str(tables / f"{table}.sqlite"))
            if why:
                plan.fail(arm, why)
                break


def table_summary(path: Path) -> dict:
    """Rows and build seconds of an answer table."""
    from llmguide.llm.table import AnswerTable

    table = AnswerTable(path)
    try:
        return {"rows": len(table), "lm_seconds": round(table.seconds(), 1)}
    finally:
        table.close()


def achievement_values(plan) -> dict[str, dict[str, dict[int, float]]]:
    """``{measure: {arm: {seed: value}}}`` over each finished run's last 10 %: every ``achievements/<name>`` (the
    share of episodes unlocking it) and ``without wake_up`` (achievements per episode less wake_up, which every
    agent that sleeps unlocks)."""
    from harness import finished_runs
    from llmguide.report.runs import final_value, load_run, metric_series

    out: dict[str, dict[str, dict[int, float]]] = {}
    for arm in plan.arms:
        for seed, path in finished_runs(plan, arm).items():
            run = load_run(path)
            keys = sorted({k for rec in run.records for k in rec if k.startswith("achievements/")})
            for key in [*keys, "charts/achievements_per_episode"]:
                steps, values = metric_series(run, key)
                if len(steps):
                    out.setdefault(key.removeprefix("achievements/"), {}).setdefault(arm, {})[seed] = \
                        final_value(steps, values)
            total, wake = out.get("charts/achievements_per_episode", {}), out.get("wake_up", {})
            if seed in total.get(arm, {}):
                out.setdefault("without wake_up", {}).setdefault(arm, {})[seed] = \
                    total[arm][seed] - wake.get(arm, {}).get(seed, 0.0)
    out.pop("charts/achievements_per_episode", None)
    return out


def achievement_section(plan) -> tuple[list[str], dict]:
    """Paired differences of every arm against the control, per achievement and without wake_up."""
    from llmguide import stats

    control, found = plan.args.control, achievement_values(plan)
    lines = [f"## Per achievement: paired differences against `{control}`", "",
             "Each cell: the arm's mean over seeds of the share of training episodes (last 10 % of the budget) "
             "unlocking the achievement, and its paired difference Δ against the control with p (t-test). "
             "`without wake_up`: achievements per episode less wake_up.", ""]
    arms = [a for a in plan.arms if a != control]
    lines += ["| measure | " + control + " | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    data: dict = {}
    measures = ["without wake_up", *sorted(m for m in found if m != "without wake_up")]
    for measure in measures:
        by_arm = found.get(measure, {})
        base = by_arm.get(control, {})
        if not base or not any(v for arm_values in by_arm.values() for v in arm_values.values()):
            continue   # no control values, or no arm ever unlocked it
        cells = [f"{sum(base.values()) / len(base):.3f}"]
        data.setdefault(measure, {})["arm_means"] = {a: sum(v.values()) / len(v) for a, v in by_arm.items() if v}
        for arm in arms:
            mine = by_arm.get(arm, {})
            if not set(mine) & set(base):
                cells.append("–")
                continue
            d = stats.paired(mine, base, names=(arm, control)).to_json()
            data.setdefault(measure, {})[f"{arm} - {control}"] = d
            p = d["p"]
            cells.append(f"{sum(mine.values()) / len(mine):.3f} (Δ {d['mean']:+.3f}, p "
                         + ("n/a" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}") + ")")
        lines.append(f"| {measure} | " + " | ".join(cells) + " |")
    return [*lines, ""], data


def qwen_examples(tables: Path, top_k: int = 5, show: int = 8) -> tuple[list[str], dict]:
    """What Qwen knew: its table's answers beside the oracle's feasible actions, and over the whole table (weighted
    by the data's steps) the share of its first ``top_k`` valid suggestions the oracle calls feasible."""
    from llmguide.envs import get_oracle
    from llmguide.envs.crafter.actions import ACTION_STRINGS, canonical_action
    from llmguide.llm.parsing import parse_bullets
    from llmguide.llm.table import AnswerTable

    path = tables / "qwen-gen3.sqlite"
    if not path.is_file():
        return [], {}
    oracle, valid = get_oracle("craftax", "text"), set(ACTION_STRINGS)
    table = AnswerTable(path)
    rows = [(caption, answer, weight) for _, caption, answer, weight in table.rows()]
    table.close()
    feasible_w = picked_w = invalid = empty = 0.0
    lines = ["## What Qwen knew", "", f"Qwen's answers for the {show} most frequent states of its table, beside the "
             "oracle's feasible actions (the requirement tree). ELLM keeps the first "
             f"{top_k} valid action strings of an answer; *italics*: not one of the 139 action strings.", "",
             "| state | Qwen's bullets | oracle: feasible actions |", "|---|---|---|"]
    for i, (caption, answer, weight) in enumerate(rows):
        bullets = parse_bullets(answer.get("text", ""))
        picks = [b for b in bullets if b in valid][:top_k]
        feasible = {canonical_action(a) for a in oracle.feasible_from_caption(caption)}
        invalid += weight * sum(b not in valid for b in bullets) / max(len(bullets), 1)
        empty += weight * (not picks)
        feasible_w += weight * sum(canonical_action(b) in feasible for b in picks)
        picked_w += weight * len(picks)
        if i < show:
            shown = ", ".join(b if b in valid else f"*{b}*" for b in bullets) or "(none)"
            lines.append(f"| {caption} | {shown} | {', '.join(sorted(feasible)) or '(none)'} |")
    total = sum(w for _, _, w in rows)
    data = {"precision_weighted": feasible_w / picked_w if picked_w else None, "invalid_share": invalid / total,
            "no_valid_pick_share": empty / total, "states": len(rows)}
    lines += ["", f"Over all {len(rows)} states of the table, weighted by their steps in the data: "
              f"{100 * data['precision_weighted']:.0f} % of Qwen's kept suggestions are feasible there, "
              f"{100 * data['invalid_share']:.0f} % of its bullets are not action strings, and "
              f"{100 * data['no_valid_pick_share']:.0f} % of states get no valid suggestion.", ""]
    shuffled = [kept_precision(p, oracle, valid, top_k) for p in sorted(tables.glob("qwen-gen3-shuffled-s*.sqlite"))]
    if shuffled:
        data["shuffled_precision_weighted"] = sum(shuffled) / len(shuffled)
        lines += [f"The same measure for Qwen's answers permuted among the states (`ellm-qwen-shuffled-open`'s "
                  f"{len(shuffled)} tables, mean): {100 * data['shuffled_precision_weighted']:.0f} % feasible: "
                  "what Qwen's favourite goals are worth without the state they were asked about.", ""]
    return lines, data


def kept_precision(path: Path, oracle, valid: set[str], top_k: int) -> float:
    """The share of a generate table's kept suggestions (first ``top_k`` valid bullets) that the oracle calls
    feasible in the state they are stored for, weighted by the state's steps in the data."""
    from functools import cache

    from llmguide.envs.crafter.actions import canonical_action

    @cache
    def feasible_in(caption: str) -> frozenset[str]:
        return frozenset(canonical_action(a) for a in oracle.feasible_from_caption(caption))

    def feasible(caption: str, pick: str) -> bool:
        return canonical_action(pick) in feasible_in(caption)

    return kept_share(path, valid, top_k, feasible) or 0.0


def kept_share(path: Path, valid: set[str], top_k: int, hit) -> float | None:
    """The share of a generate table's kept suggestions (first ``top_k`` valid bullets) for which
    ``hit(caption, pick)`` holds, weighted by the state's steps in the data; None when nothing was kept."""
    from llmguide.llm.parsing import parse_bullets
    from llmguide.llm.table import AnswerTable

    table = AnswerTable(path)
    rows = table.rows()
    table.close()
    hit_w = picked_w = 0.0
    for _, caption, answer, weight in rows:
        picks = [b for b in parse_bullets(answer.get("text", "")) if b in valid][:top_k]
        hit_w += weight * sum(hit(caption, b) for b in picks)
        picked_w += weight * len(picks)
    return hit_w / picked_w if picked_w else None


def example_share(path: Path, prompt: str, top_k: int = 5) -> float | None:
    """The share of a generate table's kept suggestions (first ``top_k`` valid bullets) that are action strings the
    worked examples of ``prompt`` name (read from the template by :func:`llmguide.llm.examples.worked_examples`),
    weighted by the state's steps in the data; None when the table holds no kept suggestion."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.llm.examples import worked_examples
    from llmguide.methods.ellm.prompts import template

    named = set(worked_examples(template(prompt).render(vocabulary=", ".join(ACTION_STRINGS), caption="x")).items)
    return kept_share(path, set(ACTION_STRINGS), top_k, lambda _, pick: pick in named)


def coverage_section(plan) -> tuple[list[str], dict]:
    """Per arm, over its finished seeds: the share of training steps answered by its table (exactly or by the
    nearest state's answer, ``lm/table_coverage``) and exactly (``ellm/table_exact_fraction``), and what each
    generate table's kept picks owe the few-shot prompt's examples."""
    from harness import finished_runs
    from llmguide.report.runs import load_run

    data: dict = {}
    for arm in plan.arms:
        cov = {}
        for seed, path in finished_runs(plan, arm).items():
            last = [r for r in load_run(path).records if "lm/table_coverage" in r]
            if last:
                cov[seed] = (float(last[-1]["lm/table_coverage"]), float(last[-1].get("ellm/table_exact_fraction", 0)))
        if cov:
            data[arm] = {"answered": sum(c[0] for c in cov.values()) / len(cov),
                         "exact": sum(c[1] for c in cov.values()) / len(cov), "seeds": len(cov)}
    lines = ["## Coverage per arm", "", "Every LM-like arm reads its own table; a state its table lacks gets the "
             "table's answer to the most similar state it holds (`llm.table_fallback=nearest`, the same declared "
             "fallback in every arm), so every arm answers every step from its own answers. *Answered*: the share of "
             "training steps with an answer (`lm/table_coverage`; short of 1 only by answers in flight); *exact*: "
             "the share whose own state the table holds (`ellm/table_exact_fraction`), mean over seeds.", "",
             "| arm | answered | exact | seeds |", "|---|---|---|---|",
             *[f"| {arm} | {d['answered']:.3f} | {d['exact']:.3f} | {d['seeds']} |" for arm, d in data.items()], ""]
    answered = [d["answered"] for d in data.values()]
    if answered and (min(answered) < 0.9 or max(answered) - min(answered) > 0.05):
        lines += [f"**Warning: coverage is under 90 % or differs by more than 5 points between arms "
                  f"({min(answered):.3f}-{max(answered):.3f}).**", ""]
    return lines, data


def details(plan):
    """Each table's size and LM time (the arms must hold the same signatures); per-achievement differences."""
    ach_lines, ach = achievement_section(plan)
    cov_lines, cov = coverage_section(plan)
    tables = Path(plan.values.get("tables", plan.prep / "tables"))
    found = {p.stem: table_summary(p) for p in sorted(tables.glob("*.sqlite"))}
    source = (f"the states of a built table (`--states`: `{Path(str(plan.args.states)).name}`)" if plan.args.states
              else f"the {plan.args.table_queries} most frequent state signatures of the data (`--data`, a "
                   f"collection run: `{Path(str(plan.args.data)).name}`)")
    lines = ["## Answer tables", "", f"Every arm's table answers {source}; `tables/` beside this report holds them.",
             "",
             "| table | answers | LM seconds |", "|---|---|---|",
             *[f"| {name} | {t['rows']} | {t['lm_seconds']} |" for name, t in found.items()], ""]
    sizes = {t["rows"] for t in found.values()}
    if len(sizes) > 1:
        lines += [f"**Warning: the tables hold different numbers of answers ({sorted(sizes)}).**", ""]
    known_lines, known = qwen_examples(tables)
    shares = {p.stem: example_share(p, "ellm_actions_listed") for p in sorted(tables.glob("*.sqlite"))
              if p.stem.startswith(("qwen", "prompt-only")) and "shuffled" not in p.stem}
    if shares:
        lines += ["What each generate table's kept suggestions owe the few-shot prompt: the share (weighted by the "
                  "states' steps) that are action strings its worked examples name.", "",
                  "| table | share of kept picks named by the few-shot examples |", "|---|---|",
                  *[f"| {n} | {'–' if v is None else f'{v:.3f}'} |" for n, v in shares.items()], ""]
    return [*lines, *cov_lines, *ach_lines, *known_lines], {"tables": found, "per_achievement": ach,
                                                             "qwen_knew": known, "coverage": cov,
                                                             "example_share": shares}


STUDY = Study(
    name="ellm_{env}",
    title="ELLM with a real LM: open vocabulary, every arm from an answer table",
    about="ELLM's 139 text actions on Craftax-Classic, intrinsic-only, the same PPO in every arm; every LM-like arm "
          "reads its suggestions from an answer table over the same state signatures (see Answer tables).",
    arms=ARMS,
    control="ellm-random-open",
    metric="charts/achievements_per_episode",
    metric_name="ground-truth achievements unlocked per episode (training episodes)",
    common=COMMON,
    env="craftax",
    steps=120_000,
    seeds=10,
    jobs=1,
    order="seed",      # seed by seed over the arms: a study stopped early still has every arm at the same seeds
    flags=flags,
    configure=configure,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
