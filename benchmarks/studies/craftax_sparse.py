"""ONI and Motif on sparse deep Craftax-Classic tasks (issue 29): a test of ONI's mechanism, not a NetHack reproduction.

The task is one achievement (``env.task``, default ``make_stone_pickaxe``; one definition for both Crafter envs,
``llmguide.envs.crafter.rules.Task``): reward 1 on success and 0 otherwise (no health reward), the episode ends on
success, capped at ``TASK_MAX_STEPS`` (1500) steps. The messages ONI and Motif label are the env's message line
(``info["message"]``, ``llmguide.envs.crafter.messages``: every change of the agent's situation, not only
achievements). Labellers get ONI's task-agnostic goal ("make progress in the game"), never the task.

Arms (every one the same PPO: the shared sparse task's ``harness.SPARSE_PPO``, a GRU policy, extrinsic coefficient
10 as ONI/Motif on sparse tasks; ``ppo`` is the same command as BK's and PTGM's control on this task):

* ``ppo`` — extrinsic reward only (``method=none``): the control;
* ``oni_retrieval-oracle`` — ONI-Retrieval, labels from the requirement tree (a message is helpful when it
  reports an achievement); ``-embedded``: the embedded LM (Gemma 3 270M) labels;
* knowledge controls: ``oni_retrieval-constant`` (every message helpful: a pure episodic message-count bonus),
  ``oni_retrieval-shuffled`` (the oracle's labels permuted across recent messages: no relation, a rate that follows
  the oracle's but is not matched to the oracle arm's;
  ``-window0``: across all earlier messages, a rate below the oracle's),
  ``oni_retrieval-random`` (yes at ``llm.positive_rate``); ``oni_retrieval-random-matched`` (yes at the oracle
  arm's measured rate, ``--positive-rate`` or its finished runs' mean: the shuffled control matches the oracle's
  rate on its *own* agent's messages, which are less often progress);
* ``oni_retrieval-embedded-ranked`` — the embedded LM's labels at that same rate (``method.label_rate``: "yes" to
  the messages it scores highest; at its default margin Gemma 270M says "no" to every Craftax message);
* ``oni_retrieval-qwen`` — Qwen2.5-Coder-1.5B-Instruct's labels (``crafter_label`` through its chat template,
  generate mode), read from an answer table over ``--data``'s messages (``--tables``); ``oni_retrieval-qwen-shuffled``
  — the same table's labels permuted among its messages, a table per seed: Qwen's yes-rate, no relation to the message;
* ``oni_classification-oracle``, ``oni_ranking-oracle`` (ranking reward clipped at 0);
* ``motif-oracle`` — Motif: messages of a score-maximising agent (PPO on Craftax's achievement reward,
  ``--collect-steps`` steps, ``env.task`` null), ``--num-pairs`` pairs labelled by the oracle, Bradley-Terry
  reward model (prepared once, before the arms); ``motif-shuffled``: the same pairs, the oracle's preferences
  permuted across them (``llm=shuffled``, ``method.pairs_from``), its own reward model; ``motif-embedded``: the
  same pairs labelled by the embedded LM; ``motif-embedded-both``: asked both ways round (``method.both_orders``);
  ``motif-qwen``: the same pairs labelled by Qwen2.5-Coder-1.5B-Instruct, both ways round (score mode, its chat
  template; ``--lm-threads``), reported against ``motif-shuffled``;
* ``ellm_bow`` — the ONI paper's LM-free baseline: bag-of-words similarity of the message to the task's name (it is
  told the task; the labellers are not);
* ``expert`` — the scripted expert playing the task (``agent=scripted``, no learning): the upper reference row, as
  BabyAI's bot.

Value per seed: success AUC (the mean training success rate over 20 equal env-step bins), as every study of the
shared task; ``--value final``: the success rate over the last 10% of the budget.
Run a pilot first (``--arms ppo``) to confirm the control stays near 0 at the budget.

**Noisy TV** (issue 53): ``--extra env.distractors.rate=1.0`` makes the do-nothing action show a new harmless sight
on the message line (``envs/crafter/distractors.py``; the oracle labels every sight unhelpful). Every arm gets it,
Motif's collection included; the report adds each arm's share of steps on that action (``charts/distractor_share``).
Name the variant so it says ``distractors``, and report it against the random labeller and against
every-message-helpful with ``--control``.

    python benchmarks/studies/craftax_sparse.py --dry-run                       # validate every arm, run nothing
    python benchmarks/studies/craftax_sparse.py --seeds 5 --steps 1000000        # the study (about 6 min per run)
    python benchmarks/studies/craftax_sparse.py --task collect_iron --arms ppo --seeds 3   # a pilot on another task
    python benchmarks/studies/craftax_sparse.py --task make_wood_pickaxe --steps 300000 --extra env.distractors.rate=1.0 \
        --variant make_wood_pickaxe-300k-distractors     # the noisy-TV variant
"""

from __future__ import annotations

import json
import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import SPARSE_PER_ENV, SPARSE_TASK, Study, main

PAIRS = "method.pairs_from={prep}/motif-data"   # the oracle's collected pairs, relabelled by the other labellers
# Motif's label runs (``prepare``): arm -> (labeller, its data folder under <prep>, label overrides); each Motif arm
# trains on its own folder
MOTIF_LABELS = {
    "motif-oracle": ("oracle", "motif-data", []),
    "motif-shuffled": ("shuffled", "motif-data-shuffled", [PAIRS]),
    "motif-embedded": ("embedded", "motif-data-embedded", [PAIRS]),
    "motif-embedded-both": ("embedded", "motif-data-embedded-both", [PAIRS, "method.both_orders=true"]),
    "motif-qwen": ("qwen", "motif-data-qwen", [PAIRS, "method.both_orders=true", "llm.n_threads={lm_threads}"]),
}


def motif_data(arm: str) -> str:
    """The ``method.data_dir`` override of a Motif arm: its label run's folder."""
    return f"method.data_dir={{prep}}/{MOTIF_LABELS[arm][1]}"


ARMS = {
    "ppo": ["method=none"],
    "oni_retrieval-oracle": ["method=oni_retrieval", "llm=oracle"],
    "oni_retrieval-embedded": ["method=oni_retrieval", "llm=embedded"],
    "oni_retrieval-constant": ["method=oni_retrieval", "llm=constant"],
    "oni_retrieval-shuffled": ["method=oni_retrieval", "llm=shuffled"],
    # the shuffled control before llm.window: any earlier message's label, so early (mostly unhelpful) labels
    # weigh more and its rate falls below the oracle's (kept to show what the rate mismatch did)
    "oni_retrieval-shuffled-window0": ["method=oni_retrieval", "llm=shuffled", "llm.window=0"],
    "oni_retrieval-random": ["method=oni_retrieval", "llm=random"],
    # yes at the oracle arm's own rate (its runs' mean, or --positive-rate): the shuffled control matches the
    # oracle's rate on its own agent's messages, which are less often progress than the guided agent's
    "oni_retrieval-random-matched": ["method=oni_retrieval", "llm=random", "llm.positive_rate={positive_rate}"],
    # its first runs, when llm.seed was 0 for every seed: one labeller's draws on all five (yes at 0.26-0.27)
    "oni_retrieval-random-matched-llmseed0": ["method=oni_retrieval", "llm=random", "llm.positive_rate={positive_rate}",
                                              "llm.seed=0"],
    # the embedded LM at that rate: "yes" to the messages it scores highest (at its default margin it says "no"
    # to every Craftax message), so its ranking is what is tested against random-matched
    "oni_retrieval-embedded-ranked": ["method=oni_retrieval", "llm=embedded", "method.label_rate={positive_rate}"],
    # Qwen2.5-Coder-1.5B-Instruct's labels (generate mode, through its chat template) read from an answer table
    # (--tables, built over --data), and its own labels permuted among the messages (a table per seed): Qwen's
    # yes-rate without the relation to the message
    "oni_retrieval-qwen": ["method=oni_retrieval", "llm=qwen", "method.label_mode=generate",
                           "llm.table={tables}/oni-qwen-gen.sqlite"],
    "oni_retrieval-qwen-shuffled": ["method=oni_retrieval", "llm=qwen", "method.label_mode=generate",
                                    "llm.table={tables}/oni-qwen-gen-shuffled-s${seed}.sqlite"],
    "oni_classification-oracle": ["method=oni_classification", "llm=oracle"],
    "oni_ranking-oracle": ["method=oni_ranking", "llm=oracle"],
    "motif-oracle": ["method=motif", "llm=oracle", motif_data("motif-oracle")],
    "motif-shuffled": ["method=motif", "llm=shuffled", motif_data("motif-shuffled")],
    "motif-embedded": ["method=motif", "llm=embedded", motif_data("motif-embedded")],
    # the embedded LM asked each pair both ways round (method.both_orders): asked once it answered "A > B" to all
    "motif-embedded-both": ["method=motif", "llm=embedded", motif_data("motif-embedded-both")],
    # Qwen2.5-Coder-1.5B-Instruct on the same pairs, both orders (score mode through its chat template); Motif labels
    # offline, so its labelled pairs are its answer table and every Motif arm is equally fresh
    "motif-qwen": ["method=motif", "llm=qwen", motif_data("motif-qwen")],
    "ellm_bow": ["method=ellm_bow", "method.goal={task}"],
    "expert": ["method=none", "agent=scripted", "agent.policy=expert"],
}


def flags(parser) -> None:
    parser.add_argument("--collect-steps", type=int, default=200_000,
                        help="Motif: env steps of the score-maximising collection agent (default 200000)")
    parser.add_argument("--num-pairs", type=int, default=2000, help="Motif: message pairs labelled (default 2000)")
    parser.add_argument("--data", default=None,
                        help="oni_retrieval-qwen: a collection run with the message line (its dataset's messages are "
                             "the ones the answer table labels)")
    parser.add_argument("--tables", default=None, help="folder of the answer tables (default <prep>/tables)")
    parser.add_argument("--lm-threads", type=int, default=1, help="llm.n_threads of the Qwen table build and labels")
    parser.add_argument("--positive-rate", type=float, default=None,
                        help="oni_retrieval-random-matched and -embedded-ranked: their yes rate (default: the mean "
                             "share of messages labelled helpful in this study's finished oni_retrieval-oracle runs)")


def oracle_rate(plan) -> float | None:
    """The mean share of messages labelled helpful (``lm/annot_positive_fraction``) over the finished
    ``oni_retrieval-oracle`` runs of the plan's seeds; None when there is none."""
    rates = []
    for seed in plan.seeds:
        path = plan.runs / "oni_retrieval-oracle" / f"seed-{seed}" / "lm_stats.json"
        if path.is_file():
            rates += [r["lm/annot_positive_fraction"] for method in json.loads(path.read_text()).values()
                      for r in method.get("runs", {}).values() if "lm/annot_positive_fraction" in r]
    return sum(rates) / len(rates) if rates else None


def qwen_tables(plan) -> None:
    """The Qwen arms' answer tables: Qwen's labels of every message of ``--data`` (``llmguide answers``), and that
    table permuted among the messages once per seed (``answers.shuffle_of``)."""
    from pathlib import Path

    a = plan.args
    tables = Path(a.tables).resolve() if a.tables else plan.prep / "tables"
    plan.values["tables"] = str(tables)
    arms = [arm for arm in ("oni_retrieval-qwen", "oni_retrieval-qwen-shuffled") if arm in plan.arms]
    if not arms:
        return
    source = tables / "oni-qwen-gen.sqlite"
    label = ["method=oni_retrieval", "llm=qwen", "method.label_mode=generate"]
    if not source.is_file() and not a.data:
        for arm in arms:
            plan.fail(arm, f"no {source}: pass --data, a collection run with the message line, to build it")
        return
    why = plan.step("answers", "table-oni-qwen-gen",
                    [*label, f"answers.data={Path(a.data).resolve() if a.data else ''}", f"answers.out={source}",
                     f"llm.n_threads={a.lm_threads}"], done=str(source))
    if why:
        for arm in arms:
            plan.fail(arm, why)
        return
    if "oni_retrieval-qwen-shuffled" in arms:
        for seed in plan.seeds:
            out = tables / f"oni-qwen-gen-shuffled-s{seed}.sqlite"
            why = plan.step("answers", f"table-oni-qwen-gen-shuffled-s{seed}",
                            [*label, f"answers.shuffle_of={source}", f"answers.out={out}", f"seed={seed}"],
                            done=str(out))
            if why:
                plan.fail("oni_retrieval-qwen-shuffled", why)
                return


def prepare(plan) -> None:
    """The yes rate of the rate-matched arms (the oracle arm's); Motif's data, once for every seed: collect (PPO
    on the game's achievement reward, env.task null) -> label by the oracle; the shuffled control and the
    embedded LM each label a copy of the same pairs."""
    matched = [a for a in ("oni_retrieval-random-matched", "oni_retrieval-random-matched-llmseed0",
                           "oni_retrieval-embedded-ranked") if a in plan.arms]
    if matched and plan.args.positive_rate is None:
        rate = oracle_rate(plan)
        if rate is None:
            for arm in matched:
                plan.fail(arm, "no finished oni_retrieval-oracle run to match its rate: run that arm first, or "
                               "pass --positive-rate")
        else:
            plan.values["positive_rate"] = f"{rate:.4f}"
            print(f"  {', '.join(matched)}: yes at {rate:.4f}, the oracle arm's rate", flush=True)
    qwen_tables(plan)
    a = plan.args
    motif = [arm for arm in MOTIF_LABELS if arm in plan.arms]
    if not motif:
        return
    collect = ["method=motif", "llm=oracle", motif_data("motif-oracle"), "method.collect_policy=none", "env.task=null",
               f"method.collect_steps={a.collect_steps}", f"method.num_pairs={a.num_pairs}"]
    reason = plan.step("collect", "motif-data", collect, done="collect_stats.json")
    for arm in motif:
        llm, folder, extra = MOTIF_LABELS[arm]
        step = "motif-label-" + (folder.removeprefix("motif-data-") if folder != "motif-data" else llm)
        why = reason or plan.step("label", step,
                                  ["method=motif", f"llm={llm}", f"method.data_dir={{prep}}/{folder}", *extra],
                                  done=str(plan.prep / folder / "label_stats.json"))
        if why:
            plan.fail(arm, why)


def distractor_share(plan) -> dict[str, dict[int, dict[str, float]]]:
    """``{arm: {seed: {"auc": .., "final": ..}}}``: each finished run's share of steps on the distractor action
    (``charts/distractor_share``, per episode), averaged like the study value over the budget (``auc``) and over its
    last 10 % (``final``); empty when no run logged it (``env.distractors`` off)."""
    from harness import auc, finished_runs
    from llmguide.report.runs import final_value, load_run, metric_series

    out: dict[str, dict[int, dict[str, float]]] = {}
    for arm in plan.arms:
        for seed, path in finished_runs(plan, arm).items():
            steps, values = metric_series(load_run(path), "charts/distractor_share")
            if len(steps):
                out.setdefault(arm, {})[seed] = {"auc": auc(steps, values, plan.steps, plan.bins),
                                                 "final": final_value(steps, values)}
    return out


def motif_pairs(plan) -> dict:
    """What Motif's pairs hold when the collection met the noisy TV: distinct messages and pairs with a sight
    (a sentence of ``envs/crafter/distractors.py``), and the oracle's labels of those pairs; empty without
    Motif's data or without a sight in it."""
    from llmguide.envs.crafter.distractors import all_sentences
    from llmguide.methods.oni.motif import PairsDB

    path = plan.prep / "motif-data" / "pairs.sqlite"
    if not path.is_file():
        return {}
    sights = all_sentences()

    def has_sight(message: str) -> bool:
        return any(s in message for s in sights)

    db = PairsDB(path)
    try:
        messages, labelled = db.messages(), db.labelled()
    finally:
        db.close()
    with_sight = [label for a, b, label in labelled if has_sight(a) or has_sight(b)]
    distinct = sum(1 for m in messages if has_sight(m))
    if not distinct:
        return {}
    return {"distinct_messages": len(messages), "distinct_with_sight": distinct,
            "observations_with_sight": round(sum(c for m, c in messages.items() if has_sight(m))
                                             / max(1, sum(messages.values())), 4),
            "pairs": len(labelled), "pairs_with_sight": len(with_sight),
            "ties_with_sight": sum(1 for label in with_sight if label == 0.5),
            "ties": sum(1 for *_, label in labelled if label == 0.5)}


def details(plan) -> tuple[list[str], dict]:
    """With ``env.distractors`` on (a noisy TV, issue 53): each arm's share of steps on the distractor action, and
    what Motif's pairs hold."""
    shares = distractor_share(plan)
    if not shares:
        return [], {}
    lines = ["## Distractor share", "",
             "The share of an episode's steps spent on the distractor action (`noop`, which shows a new harmless "
             "sight: `env.distractors`), per arm: the mean over seeds of each run's share averaged over the budget "
             f"(as the study value, {plan.bins} bins) and over its last 10 %, and the seeds' range of the latter.", "",
             "| arm | seeds | share over training | share, last 10 % | range, last 10 % |", "|---|---|---|---|---|"]
    data: dict = {}
    for arm, by_seed in shares.items():
        whole = [v["auc"] for v in by_seed.values()]
        last = [v["final"] for v in by_seed.values()]
        data[arm] = {"seeds": sorted(by_seed), "auc": sum(whole) / len(whole), "final": sum(last) / len(last),
                     "per_seed": {str(s): v for s, v in sorted(by_seed.items())}}
        lines.append(f"| {arm} | {len(by_seed)} | {data[arm]['auc']:.3f} | {data[arm]['final']:.3f} | "
                     f"[{min(last):.3f}, {max(last):.3f}] |")
    lines.append("")
    pairs = motif_pairs(plan) if any(a.startswith("motif") for a in plan.arms) else {}
    if pairs:
        lines += ["**Motif's pairs** (`<prep>/motif-data`, labelled by the oracle): "
                  f"{pairs['distinct_with_sight']:,} of the collection's {pairs['distinct_messages']:,} distinct "
                  f"messages hold a sight (a share {pairs['observations_with_sight']} of its observations); "
                  f"{pairs['pairs_with_sight']:,} of the {pairs['pairs']:,} labelled pairs hold one, and "
                  f"{pairs['ties_with_sight']:,} of those are ties ({pairs['ties']:,} ties in all).", ""]
    return lines, {"distractor_share": data, **({"motif_pairs": pairs} if pairs else {})}


STUDY = Study(
    name="oni_{env}_sparse",
    title="ONI and Motif on a sparse deep Craftax-Classic task (a test of the mechanism)",
    about="Every arm trains the same PPO (flat encoder, GRU, 64 envs x 64 steps, extrinsic x10) on one achievement "
          "as a sparse task (reward 1 on success, the episode ends there, 1500-step cap, no health reward); ONI and "
          "Motif label the env's message line with ONI's task-agnostic goal. Not a NetHack reproduction.",
    arms=ARMS,
    control="ppo",
    upper_reference=("expert",),
    metric="charts/success",
    metric_name="success AUC (mean training success rate over 20 equal env-step bins)",
    per_env=SPARSE_PER_ENV,
    value="auc",
    bins=20,
    env="craftax",
    task=SPARSE_TASK,
    steps=1_000_000,
    seeds=5,
    jobs=1,
    flags=flags,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
