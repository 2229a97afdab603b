"""What each LM knows before any RL: ELLM's goal suggestions scored against the game's rules.

For ``--n`` distinct state signatures sampled (seeded, uniformly over the distinct signatures) from a
collection run's captions, each arm picks up to ``--top-k`` of the open vocabulary (every action string)
and the picks are compared with the oracle's feasible achievement actions for that caption (what the
recipes allow with the objects in view and the inventory, less tools already held):

* ``precision``: the share of picks that are feasible;
* ``any_feasible``: the share of states with at least one feasible pick;
* ``recall``: the share of a state's feasible set picked (states with a non-empty set);
* ``achievement_share``: the share of picks that unlock an achievement at all (any state);
* ``invalid``: the share of generated picks that are no action string (generate modes only);
* each also weighted by the signature's steps in the data (``*_weighted``).

Every arm's answers come from an answer table built the same way (:mod:`llmguide.llm.table`, in
``<out>/tables/``, resumable), so the tables double as the study's tables for these signatures.  Arms (what
each is told: the caption, and in the ``listed`` prompts the list of valid actions; the ``listed`` generate
prompt also shows three worked examples):

* ``oracle``: the rules (ties broken at random, seeded); ``random``: a uniform ranking;
* ``gemma-score`` / ``gemma-score-norm``: Gemma 3 270M base, summed / length-normalised log-probs of each
  action after the completion prompt ``ellm_goal_score`` (no list);
* ``qwen-gen0`` / ``qwen-gen3``: Qwen2.5-Coder-1.5B-Instruct generating bullets with the list, zero-shot /
  three worked examples (``ellm_actions_zeroshot`` / ``ellm_actions_listed``);
* ``qwen-gen-offdomain``: the same with three worked examples from another game (``ellm_actions_offdomain``): the
  format taught, no action named;
* ``qwen-score``: Qwen's summed log-prob of each action as its answer to ``ellm_actions_score_listed``;
* ``prompt-only``: no LM: the actions the few-shot prompt's worked examples name (``llm=prompt_only``).

``--from-tables DIR --states TABLE`` measures a study's tables (:data:`STUDY_TABLES`) over every state of ``TABLE``
instead of sampling and building (no LM runs)::

    python benchmarks/analyses/lm_knowledge.py --from-tables T --states T/qwen-gen3.sqlite --out benchmarks/results/lm_knowledge/attribution

``--method bk_code``: BK-Code programs (:data:`BK_ARMS`) written for ``--task`` on ``--data``, each compared on
``--n`` sampled states with the oracle's program (Spearman) and with the prompt's example program (the prompt-only
arm's: ``spearman_vs_example``, ``same_values_as_example``). ``--from-labels PREP`` measures the label runs a BK
study trained on (its ``<prep>`` folder, data from ``<prep>/data``) and starts none.

Writes ``<out>/knowledge.json`` (``{arm: {measure: value}}`` plus the setup) and ``knowledge.md``::

    python benchmarks/analyses/lm_knowledge.py --data runs/craftax-collect --n 200 --out benchmarks/results/lm_knowledge
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# arm -> (llm option, suggester mode, prompt, normalize, llm overrides)
ARMS = {
    "oracle": ("oracle", "score", "ellm_actions_score_listed", False),
    "random": ("random", "score", "ellm_actions_score_listed", False),
    "gemma-score": ("embedded", "score", "ellm_goal_score", False),
    "gemma-score-norm": ("embedded", "score", "ellm_goal_score", True),
    "qwen-gen0": ("qwen", "generate", "ellm_actions_zeroshot", False),
    "qwen-gen3": ("qwen", "generate", "ellm_actions_listed", False),
    "qwen-gen-offdomain": ("qwen", "generate", "ellm_actions_offdomain", False),
    "qwen-score": ("qwen", "score", "ellm_actions_score_listed", False),
    # no LM: the few-shot prompt's own worked examples (as many of their actions as the oracle gives on the state,
    # or, with --from-tables, as Qwen gave)
    "prompt-only": ("prompt_only", "generate", "ellm_actions_listed", False),
}
# --from-tables: arm -> the table of the ELLM attribution study (benchmarks/studies/ellm_lm.py) that answers it
STUDY_TABLES = {"oracle": "oracle", "random": "random-s0", "qwen-gen0": "qwen-zeroshot", "qwen-gen3": "qwen-gen3",
                "qwen-gen-offdomain": "qwen-offdomain", "prompt-only": "prompt-only-s0"}


# ONI: arm -> (llm option, label mode); every arm uses ONI's own Craftax label prompts (task-agnostic)
ONI_ARMS = {
    "oracle": ("oracle", "score"),
    "random": ("random", "score"),
    "gemma-score": ("embedded", "score"),
    "qwen-score": ("qwen", "score"),
    "qwen-gen": ("qwen", "generate"),
}


LM_THREADS: list[str] = []   # --lm-threads: llm.n_threads of the real LMs


def arm_config(arm: str, env: str, top_k: int):
    from llmguide.pipelines import load_config

    llm, mode, prompt, normalize = ARMS[arm]
    return load_config([f"env={env}", "env.actions=text", "method=ellm", "method.vocabulary=actions",
                        f"method.suggester={mode}", f"method.prompt={prompt}", f"method.normalize_scores={normalize}",
                        f"method.top_k={top_k}", f"llm={llm}", "llm.cache.enabled=false", "progress=false",
                        *(LM_THREADS if llm in ("embedded", "qwen") else [])])


def sample_signatures(captions: list[str], n: int, seed: int) -> tuple[list[str], Counter]:
    """``n`` distinct signature captions drawn uniformly (seeded) and the steps of every signature."""
    from llmguide.methods.ellm.signature import state_signature

    steps = Counter(state_signature(c).caption() for c in captions if c)
    distinct = sorted(steps)
    picked = random.Random(seed).sample(distinct, min(n, len(distinct)))
    return picked, steps


def build_arm(arm: str, args, captions: list[str], steps: Counter) -> tuple[Path, float]:
    """The arm's table over the sampled signatures (resumed); its path and build seconds."""
    from llmguide.llm.factory import make_llm
    from llmguide.llm.table import Query, build_table
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries
    from llmguide.pipelines.answers import lm_name

    cfg = arm_config(arm, args.env_id, args.top_k)
    # the probe samples uniformly and answers in the sample's (random) order, so --max-queries keeps a uniform
    # subset; the data's weights enter the *_weighted measures only
    queries = [Query(q.kind, q.payload, 1.0, q.label) for q in answer_queries(cfg, captions)]
    out = Path(args.out) / "tables" / f"{arm}.sqlite"
    lm = make_llm(cfg.llm, args.env_id, online=False, actions="text")
    started = time.monotonic()
    try:
        build_table(lm, queries, out, meta={"lm": lm_name(cfg), "method": "ellm", "arm": arm,
                                            "prompt_sha256": ARMS[arm][2] + f"/norm={ARMS[arm][3]}"},
                    batch=1 if ARMS[arm][1] == "generate" else 4, progress=True, max_queries=args.max_queries)
    finally:
        lm.close()
    return out, time.monotonic() - started


def picks_from(arm: str, answer, key: str, vocabulary: list[str], top_k: int, seed: int, canonical) -> tuple[list, int]:
    """(picked action strings, invalid picks) from a table answer."""
    import numpy as np

    from llmguide.llm.backends.oracle import MISS_SCORE
    from llmguide.llm.parsing import parse_bullets
    from llmguide.methods.ellm.suggester import top_order

    if ARMS[arm][1] == "score":
        scores = np.asarray(answer, dtype=np.float64)
        return [vocabulary[j] for j in top_order(scores, seed, key)[:top_k] if scores[j] > MISS_SCORE / 2], 0
    picks, invalid = [], 0
    for goal in parse_bullets(answer["text"])[:top_k]:
        name = " ".join(goal.lower().replace("_", " ").strip(" .,:;!\"'").split())
        action = name if name in vocabulary else canonical(name)
        if action is None:
            invalid += 1
        elif action not in picks:
            picks.append(action)
    return picks, invalid


def measure(arm: str, table_path: Path, sigs: list[str], feasible: dict[str, set], steps: Counter, args) -> dict:
    from llmguide.envs import get_oracle
    from llmguide.envs.crafter.actions import ACHIEVEMENT_ACTIONS, ACTION_STRINGS, canonical_action
    from llmguide.llm.table import AnswerTable
    from llmguide.methods.ellm.recipe import signature_queries as answer_queries

    oracle = get_oracle(args.env_id, "text")
    achievement = set(ACHIEVEMENT_ACTIONS.values())
    table = AnswerTable(table_path)
    cfg = arm_config(arm, args.env_id, args.top_k)
    rows = []
    for q in answer_queries(cfg, sigs):
        found = table.get(q.key)
        if found is None:
            continue
        picks, invalid = picks_from(arm, found[1], q.label, list(ACTION_STRINGS), args.top_k, args.seed, oracle.canonical)
        picks = list(dict.fromkeys(canonical_action(p) for p in picks))   # "eat cow" is "attack cow"
        f = feasible[q.label]
        good = sum(p in f for p in picks)
        rows.append({"w": steps[q.label], "n": len(picks), "good": good, "invalid": invalid, "f": len(f),
                     "ach": sum(p in achievement for p in picks)})
    table.close()

    def agg(weighted: bool) -> dict:
        w = [r["w"] if weighted else 1.0 for r in rows]
        tot = sum(w) or 1.0
        picks = sum(wi * r["n"] for wi, r in zip(w, rows, strict=True))
        asked = sum(wi * (r["n"] + r["invalid"]) for wi, r in zip(w, rows, strict=True))
        with_f = [(wi, r) for wi, r in zip(w, rows, strict=True) if r["f"]]
        return {"precision": sum(wi * r["good"] for wi, r in zip(w, rows, strict=True)) / picks if picks else 0.0,
                "any_feasible": sum(wi * (r["good"] > 0) for wi, r in zip(w, rows, strict=True)) / tot,
                "recall": (sum(wi * r["good"] / r["f"] for wi, r in with_f) / sum(wi for wi, _ in with_f))
                if with_f else 0.0,
                "achievement_share": sum(wi * r["ach"] for wi, r in zip(w, rows, strict=True)) / picks if picks else 0.0,
                "invalid": sum(wi * r["invalid"] for wi, r in zip(w, rows, strict=True)) / asked if asked else 0.0,
                "picks_per_state": picks / tot}

    out = {"states": len(rows), **agg(False)}
    out.update({f"{k}_weighted": v for k, v in agg(True).items()})
    return out


# --- ONI: message labels -------------------------------------------------------------------------------
def oni_config(arm: str, env: str):
    from llmguide.pipelines import load_config

    llm, mode = ONI_ARMS[arm]
    return load_config([f"env={env}", "method=oni_retrieval", f"method.label_mode={mode}", f"llm={llm}",
                        "llm.cache.enabled=false", "progress=false", *(LM_THREADS if llm in ("embedded", "qwen") else [])])


def roc_auc(scores, truth) -> float | None:
    """P(score of a helpful message > score of an unhelpful one), ties counted half; None without both kinds."""
    import numpy as np

    scores, truth = np.asarray(scores, float), np.asarray(truth, bool)
    pos, neg = scores[truth], scores[~truth]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def oni_probe(args, arms: list[str]) -> dict:
    """Every distinct message of the data (or ``--n`` of them, seeded): each arm's label and margin against the
    oracle's "this message is progress"."""
    from llmguide.data import EpisodeDataset
    from llmguide.envs import get_oracle
    from llmguide.llm.factory import make_llm
    from llmguide.llm.parsing import ParseStats, parse_label
    from llmguide.llm.table import AnswerTable, build_table
    from llmguide.methods.oni.oracle import helpful
    from llmguide.methods.oni.recipe import answer_queries, oracle_answers
    from llmguide.pipelines.answers import lm_name

    dataset = EpisodeDataset(args.data)
    oracle = get_oracle(args.env_id)
    results: dict = {}
    for arm in arms:
        cfg = oni_config(arm, args.env_id)
        queries = answer_queries(cfg, dataset)
        if args.n and len(queries) > args.n:
            queries = random.Random(args.seed).sample(queries, args.n)
        out = Path(args.out) / "tables" / f"oni-{arm}.sqlite"
        lm = make_llm(cfg.llm, args.env_id, online=False, answerers=[oracle_answers(cfg)])
        started = time.monotonic()
        print(f"lm_knowledge: oni {arm} ...", file=sys.stderr, flush=True)
        try:
            build_table(lm, queries, out, meta={"lm": lm_name(cfg), "method": "oni_retrieval", "arm": arm,
                                                "prompt_sha256": f"oni/{ONI_ARMS[arm][1]}"}, batch=4, progress=True)
        finally:
            lm.close()
        seconds = time.monotonic() - started
        table = AnswerTable(out)
        truth, margin, label, weight, unparsed = [], [], [], [], 0
        for q in queries:
            found = table.get(q.key)
            if found is None:
                continue
            answer = found[1]
            if ONI_ARMS[arm][1] == "score":
                m = float(answer[0]) - float(answer[1])
                lab = 1.0 if m > float(cfg.method.score_margin) else 0.0
            else:
                lab = parse_label(answer["text"], "answer", ("yes", "no"), ParseStats())
                m = -1.0 if lab is None else lab
                unparsed += lab is None
                lab = 0.0 if lab is None else lab
            truth.append(bool(helpful(oracle, q.label)))
            margin.append(m)
            label.append(lab)
            weight.append(q.weight)
        table.close()
        n = len(truth) or 1
        wsum = sum(weight) or 1.0
        results[arm] = {
            "messages": len(truth), "oracle_yes_rate": sum(truth) / n,
            "yes_rate": sum(label) / n, "agreement": sum((lab > 0.5) == t for lab, t in zip(label, truth, strict=True)) / n,
            "agreement_weighted": sum(w * ((lab > 0.5) == t) for w, lab, t in zip(weight, label, truth, strict=True)) / wsum,
            "roc_auc": roc_auc(margin, truth), "unparseable": unparsed / n,
            "build_seconds": seconds, "seconds_per_message": seconds / n}
    return results


# --- BK-Code: programs -----------------------------------------------------------------------------------
# arm -> label overrides; "told": the LM is told the mission of env.task, as the oracle is (method.tell_task)
# "prompt-only": no LM, the write prompt's example program itself; "qwen-offdomain": Qwen shown an example program for
# another game (the format, not the answer). Each arm's program is also compared with the example program
# (``spearman_vs_example``, ``same_values_as_example``): a program that copies the example is the prompt's knowledge.
BK_ARMS = {
    "oracle": ["llm=oracle"],
    "prompt-only": ["llm=prompt_only", "method.tell_task=false"],
    "qwen-told": ["llm=qwen", "method.tell_task=true"],
    "qwen-agnostic": ["llm=qwen", "method.tell_task=false"],
    "qwen-offdomain": ["llm=qwen", "method.tell_task=false", "method.code.example=offdomain"],
    "gemma-told": ["llm=embedded", "method.tell_task=true"],
}
# --from-labels PREP: a BK study's preparation folder; arm -> its label run there (benchmarks/studies/bk.py LABELS)
STUDY_LABELS = {"oracle": "labels-bk_code-oracle", "prompt-only": "labels-bk_code-prompt-only",
                "qwen-told": "labels-bk_code-qwen", "qwen-agnostic": "labels-bk_code-qwen-agnostic",
                "qwen-offdomain": "labels-bk_code-qwen-offdomain", "gemma-told": "labels-bk_code-embedded"}
BK_CODE = ["method.code.iterations=3", "method.code.fix_retries=2", "method.code.max_tokens=384"]


def bk_probe(args, arms: list[str], seeds: list[int]) -> dict:
    """Label runs of BK-Code per arm and seed (``llmguide label``, kept and reused), then each valid program's
    values on ``--n`` dataset states against the oracle program's (Spearman)."""
    import subprocess

    import numpy as np

    from llmguide.data import EpisodeDataset
    from llmguide.methods.bk.code import sample_states
    from llmguide.pipelines import load_config

    from_labels = getattr(args, "from_labels", None)
    if from_labels:   # a study's label runs (one per arm, trained on): measured, none started
        seeds = [0]
        args.data = args.data or str(Path(from_labels) / "data")
    base = [f"env={args.env_id}", f"env.task={args.task}", "method=bk_code", f"method.data={args.data}",
            "progress=false", *BK_CODE, *(["agent.image_encoder=flat"] if args.env_id == "babyai" else [])]
    runs = Path(from_labels) if from_labels else Path(args.out) / "bk_runs" / str(args.task)

    def label_run(arm: str, seed: int) -> str:
        return STUDY_LABELS[arm] if from_labels else f"labels-{arm}-s{seed}"

    cli = [sys.executable, "-c", "import runpy, sys; sys.path.pop(0); "
           "runpy.run_module('llmguide.cli', run_name='__main__', alter_sys=True)"]
    manifests: dict[str, dict] = {}
    for arm in ["oracle", *[a for a in arms if a != "oracle"]]:
        for seed in seeds if arm != "oracle" else [0]:
            name = label_run(arm, seed)
            manifest = runs / name / "bk" / "manifest.json"
            if not manifest.exists() and not args.measure_only and not from_labels:
                print(f"lm_knowledge: bk_code {arm} seed {seed} ...", file=sys.stderr, flush=True)
                started = time.monotonic()
                threads = LM_THREADS if arm != "oracle" else []
                subprocess.call([*cli, "label", *base, *BK_ARMS[arm], *threads, f"seed={seed}", f"run.dir={runs}",
                                 f"run.name={name}", "run.overwrite=true"])
                if manifest.exists():
                    data = json.loads(manifest.read_text())
                    data["seconds"] = time.monotonic() - started
                    manifest.write_text(json.dumps(data, indent=1))
            if manifest.exists():
                manifests[name] = json.loads(manifest.read_text())
    cfg = load_config(base)
    episodes = EpisodeDataset(args.data).episodes()
    states = sample_states(episodes, args.n, np.random.default_rng(args.seed))
    from llmguide.methods.bk.inputs import make_sandbox

    sandbox = make_sandbox(cfg, runs / "scratch")

    def values(name: str) -> np.ndarray | None:
        final = runs / name / "bk" / "final.py"
        if not final.exists():
            return None
        res = sandbox.evaluate(final.read_text(), "potential", list(states))
        return np.asarray(res.values, dtype=float) if res.ok and not res.item_errors else None

    def spearman(v: np.ndarray | None, ref: np.ndarray | None) -> float | None:
        """Spearman's rho of two programs' values on the states; None when either is missing or constant."""
        if v is None or ref is None or not np.std(v) > 0 or not np.std(ref) > 0:
            return None
        from scipy.stats import spearmanr

        return float(spearmanr(v, ref).statistic)

    oracle = values(label_run("oracle", 0))
    example = values(label_run("prompt-only", 0))   # the prompt's example program
    out: dict = {}
    for arm in arms:
        rows = []
        for seed in seeds if arm != "oracle" else [0]:
            name = label_run(arm, seed)
            m = manifests.get(name)
            if m is None:
                rows.append({"seed": seed, "ran": False})
                continue
            summary = m.get("summary", {})
            v = values(name)
            rho, rho_example = spearman(v, oracle), spearman(v, example)
            rows.append({"seed": seed, "ran": True, "valid": m.get("failed") is None,
                         "valid_steps": summary.get("valid_steps", 0), "steps": summary.get("steps", 0),
                         "first_attempt_valid": summary.get("first_attempt_valid", 0),
                         "told_mission": m.get("told_mission") or m.get("oracle_mission"),
                         "spearman_vs_oracle": rho, "distinct_values": None if v is None else int(len(set(v.round(6)))),
                         "spearman_vs_example": rho_example,
                         "same_values_as_example": None if v is None or example is None else bool(
                             np.allclose(v, example)),
                         "seconds": m.get("seconds")})
        ran = [r for r in rows if r.get("ran")]
        rhos = [r["spearman_vs_oracle"] for r in ran if r.get("spearman_vs_oracle") is not None]
        out[arm] = {"runs": rows, "validity_rate": sum(r["valid"] for r in ran) / len(ran) if ran else None,
                    "valid_step_rate": (sum(r["valid_steps"] for r in ran) / max(1, sum(r["steps"] for r in ran)))
                    if ran else None,
                    "mean_spearman_vs_oracle": float(np.mean(rhos)) if rhos else None,
                    "copies_example": sum(bool(r.get("same_values_as_example")) for r in ran)}
    data, prep = Path(args.data).resolve(), Path(from_labels or "/").resolve()
    # results name no machine path (issue 67): the study's preparation folder is <prep>
    data = f"<prep>/{data.relative_to(prep).as_posix()}" if from_labels and data.is_relative_to(prep) else str(data)
    out["setup"] = {"data": data, "env": args.env_id, "task": args.task, "states": len(states),
                    "seeds": seeds, "code": BK_CODE, "label_runs": "<prep>" if from_labels else None}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="a dataset folder or collection run dir with captions")
    p.add_argument("--states", default=None, help="instead of --data: every state of this answer table, its weights")
    p.add_argument("--from-tables", default=None,
                   help="ellm: measure the tables of this folder (STUDY_TABLES), build none (with --states)")
    p.add_argument("--env-id", dest="env_id", default="craftax", help="env family of the data (craftax|crafter|babyai)")
    p.add_argument("--task", default=None, help="bk_code: the env.task the programs are for")
    p.add_argument("--n", type=int, default=200, help="distinct state signatures sampled")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="sampling and tie-break seed")
    p.add_argument("--seeds", type=int, default=3, help="bk_code: label runs per LM arm (seeds 0..N-1)")
    p.add_argument("--method", choices=["ellm", "oni", "bk_code"], default="ellm",
                   help="ellm: goal picks over state signatures; oni: helpful labels of messages; bk_code: programs")
    p.add_argument("--arms", default=None, help=f"comma-separated; ellm: {list(ARMS)}; oni: {list(ONI_ARMS)}")
    p.add_argument("--steps", type=int, default=None, help="use only the first STEPS captions of the data")
    p.add_argument("--measure-only", action="store_true",
                   help="bk_code: measure the label runs that exist, start none")
    p.add_argument("--from-labels", default=None,
                   help="bk_code: measure a BK study's label runs (its <prep> folder: STUDY_LABELS, data from "
                        "<prep>/data), start none")
    p.add_argument("--max-queries", type=int, default=None,
                   help="ellm: answer at most this many of the sampled states per arm (the rest are not measured)")
    p.add_argument("--out", default="benchmarks/results/lm_knowledge")
    p.add_argument("--lm-threads", type=int, default=None,
                   help="llama.cpp threads (default: every core; 1 on a box shared with other jobs: spinning threads "
                        "of an oversubscribed llama.cpp slow it down several times)")
    args = p.parse_args(argv)
    if args.lm_threads:
        LM_THREADS[:] = [f"llm.n_threads={args.lm_threads}"]
    if args.method == "bk_code":
        if not args.task:
            p.error("--method bk_code needs --task (the env.task the programs are for)")
        arms = [a for a in (args.arms or ",".join(BK_ARMS)).split(",") if a]
        path = Path(args.out) / f"bk_code-{args.task}.json"
        Path(args.out).mkdir(parents=True, exist_ok=True)
        result = bk_probe(args, arms, list(range(args.seeds)))
        path.write_text(json.dumps(result, indent=1, sort_keys=True))
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in result.items()}, indent=1))
        return 0
    if args.method == "oni":
        arms = [a for a in (args.arms or ",".join(ONI_ARMS)).split(",") if a]
        if [a for a in arms if a not in ONI_ARMS]:
            p.error(f"unknown ONI arm(s); choose from {list(ONI_ARMS)}")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        path = Path(args.out) / "oni_labels.json"
        results = json.loads(path.read_text()) if path.exists() else {}
        results.update(oni_probe(args, arms))
        results["setup"] = {"data": str(args.data), "env": args.env_id, "n": args.n, "seed": args.seed,
                            "truth": "helpful(oracle, message): the message reports an achievement"}
        path.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(json.dumps(results, indent=1, sort_keys=True))
        return 0
    from llmguide.pipelines.answers import TableStates, data_captions

    if args.states:
        captions, episodes = TableStates(args.states).episode.captions[:-1], 0
        steps = Counter(captions)
        sigs = sorted(steps)
    elif args.data:
        captions, episodes = data_captions(args.data)
        captions = captions[: args.steps] if args.steps else captions
        sigs, steps = sample_signatures(captions, args.n, args.seed)
    else:
        p.error("give --data (a collection) or --states (a built table)")
    arms = [a for a in (args.arms or ",".join(ARMS)).split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # the oracle's feasible set of every sampled state: its table's non-miss candidates
    from llmguide.envs import get_oracle

    oracle = get_oracle(args.env_id, "text")
    feasible = {s: set(oracle.suggest_from_caption(s)) for s in sigs}
    results_path = Path(args.out) / "knowledge.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    for arm in arms:
        print(f"lm_knowledge: {arm} ...", file=sys.stderr, flush=True)
        if args.from_tables:
            path, seconds = Path(args.from_tables) / f"{STUDY_TABLES[arm]}.sqlite", 0.0
            if not path.is_file():
                print(f"lm_knowledge: {arm}: no {path}; skipped", file=sys.stderr)
                continue
        else:
            path, seconds = build_arm(arm, args, sigs, steps)
        res = measure(arm, path, sigs, feasible, steps, args)
        old = results.get(arm, {})
        res["build_seconds"] = seconds + (old.get("build_seconds", 0.0) if seconds < 1.0 else 0.0)
        res["seconds_per_state"] = res["build_seconds"] / max(res["states"], 1)
        results[arm] = res
        results["setup"] = {"data": str(args.data or args.states), "episodes": episodes, "data_steps": len(captions),
                            "distinct_signatures": len(steps), "sampled": len(sigs), "seed": args.seed,
                            "top_k": args.top_k, "env": args.env_id,
                            "states_with_feasible": sum(bool(f) for f in feasible.values()),
                            "mean_feasible": sum(len(f) for f in feasible.values()) / max(len(sigs), 1),
                            "vocabulary": 139}
        results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
        write_markdown(results, Path(args.out) / "knowledge.md")
    # every arm again on the states all of them answered (arms capped by --max-queries answered fewer)
    from llmguide.llm.table import AnswerTable

    tables = {a: Path(args.out) / "tables" / f"{a}.sqlite" for a in ARMS if a in results}
    answered = {}
    for arm, path in tables.items():
        if path.exists():
            table = AnswerTable(path)
            answered[arm] = {row[1] for row in table.rows()} & set(sigs)
            table.close()
    common = sorted(set.intersection(*answered.values())) if answered else []
    results["common"] = {"states": len(common), "arms": sorted(answered),
                         **{arm: measure(arm, tables[arm], common, feasible, steps, args) for arm in answered}}
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    write_markdown(results, Path(args.out) / "knowledge.md")
    print((Path(args.out) / "knowledge.md").read_text())
    return 0


def write_markdown(results: dict, path: Path) -> None:
    setup = results.get("setup", {})
    lines = ["# What each LM knows: ELLM goal picks vs the rules", "",
             f"{setup.get('sampled')} distinct state signatures sampled uniformly (seed {setup.get('seed')}) of "
             f"{setup.get('distinct_signatures')} in {setup.get('data_steps')} steps of `{setup.get('data')}` "
             f"({setup.get('env')}); each arm picks up to {setup.get('top_k')} of the 139 action strings. "
             f"{setup.get('states_with_feasible')} states have a feasible achievement action "
             f"(mean {setup.get('mean_feasible', 0):.2f} per state). Weighted: by the signature's steps in the data.",
             "", "| arm | states | precision | any feasible | recall | achievement share | invalid | picks/state | "
             "precision (weighted) | any feasible (weighted) | s/state |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    def row(arm: str, r: dict) -> str:
        return (f"| {arm} | {r['states']} | {r['precision']:.3f} | {r['any_feasible']:.3f} | {r['recall']:.3f} | "
                f"{r['achievement_share']:.3f} | {r['invalid']:.3f} | {r['picks_per_state']:.2f} | "
                f"{r['precision_weighted']:.3f} | {r['any_feasible_weighted']:.3f} | "
                f"{r.get('seconds_per_state', float('nan')):.2f} |")

    header = lines[-2:]
    lines += [row(arm, results[arm]) for arm in ARMS if results.get(arm)]
    common = results.get("common")
    if common and common.get("states"):
        lines += ["", f"The same measures on the {common['states']} states every arm answered (paired):", "", *header]
        lines += [row(arm, {**common[arm], "seconds_per_state": results[arm].get("seconds_per_state", float("nan"))})
                  for arm in ARMS if arm in common]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
