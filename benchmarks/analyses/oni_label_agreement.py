"""How an LM's ONI labels relate to the oracle's: every message an LM scored in score mode (its yes/no
log-prob margin, read back from the LM cache), against the env oracle's "this message is progress".

Reports the ROC AUC of the margin for the oracle's label (0.5: no relation), and at ``--rate`` (the share of
messages labelled "yes", as ``method.label_rate``) the precision and recall of the top-ranked messages,
with the highest-ranked messages and the oracle-helpful messages ranked lowest.

    python benchmarks/analyses/oni_label_agreement.py --env craftax --rate 0.3043 \\
        --out benchmarks/results/oni_craftax_sparse/make_wood_pickaxe-300k/embedded_agreement.json

Motif's preferences: ``--pairs DB --reference DB`` compares two labellings of the same pairs (``pairs.sqlite``
of two Motif data folders, e.g. the embedded LM's and the oracle's): the label shares, the agreement on every
pair and on the pairs the reference does not call a tie, against what independent labels at these shares give.

``--cache``: the SQLite LM cache the runs wrote (default: ``$LLMGUIDE_CACHE_DIR/llm_cache.sqlite`` or
``~/.cache/llmguide/llm_cache.sqlite``); ``--template``: the labelling template's version prefix.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from pathlib import Path

import numpy as np

MESSAGE = re.compile(r"Message: (.*)\nGood:")


def scored_messages(cache: Path, template: str) -> dict[str, float]:
    """message -> log p(" yes") − log p(" no") for every cached score request of the labelling template."""
    con = sqlite3.connect(f"file:{cache}?mode=ro", uri=True)
    rows = con.execute("select meta, value from entries where kind = 'score'").fetchall()
    con.close()
    out: dict[str, float] = {}
    for meta, value in rows:
        context = json.loads(meta).get("request", {}).get("context", "")
        found = MESSAGE.findall(context)
        if not found or template not in context[:400] and template:
            continue
        scores = json.loads(value).get("scores")
        if scores and len(scores) == 2:
            out[found[-1]] = float(scores[0]) - float(scores[1])
    return out


def roc_auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """P(a random positive outranks a random negative), ties counted half."""
    pos, neg = scores[truth], scores[~truth]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def pair_agreement(pairs: Path, reference: Path) -> dict:
    """Two labellings of the same Motif pairs: shares of each label, agreement overall and where the reference
    prefers a side, the agreement independent labels at these shares would give there, and the two-sided binomial
    p-value of that agreement against this chance level (each strict pair an independent trial)."""
    from scipy.stats import binomtest

    def labels(db: Path) -> dict[tuple[str, str], float]:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = con.execute("select a, b, label from pairs where label is not null").fetchall()
        con.close()
        return {(a, b): label for a, b, label in rows}

    mine, ref = labels(pairs), labels(reference)
    keys = [k for k in mine if k in ref]
    strict = [k for k in keys if ref[k] != 0.5]
    share = {v: sum(mine[k] == v for k in strict) / max(len(strict), 1) for v in (0.0, 1.0)}
    chance = sum(share[v] * sum(ref[k] == v for k in strict) / max(len(strict), 1) for v in (0.0, 1.0))
    agreed = sum(mine[k] == ref[k] for k in strict)
    p_value = binomtest(agreed, len(strict), chance).pvalue if strict and 0 < chance < 1 else None
    return {"pairs": len(keys), "labels": {str(v): sum(mine[k] == v for k in keys) for v in (0.0, 0.5, 1.0)},
            "reference_labels": {str(v): sum(ref[k] == v for k in keys) for v in (0.0, 0.5, 1.0)},
            "agreement": sum(mine[k] == ref[k] for k in keys) / max(len(keys), 1),
            "reference_strict": len(strict),
            "agreement_where_reference_prefers": agreed / max(len(strict), 1),
            "independent_agreement_there": chance, "p_against_independent": p_value}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", "--env-id", dest="env", default="craftax")
    p.add_argument("--cache", type=Path, default=None)
    p.add_argument("--template", default="Classify messages", help="text that starts the labelling prompt")
    p.add_argument("--rate", type=float, default=0.3)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--pairs", type=Path, default=None, help="Motif: a pairs.sqlite to compare with --reference")
    p.add_argument("--reference", type=Path, default=None, help="Motif: the reference labelling's pairs.sqlite")
    args = p.parse_args(argv)
    if args.pairs is not None:
        if args.reference is None:
            raise SystemExit("--pairs needs --reference")
        result = pair_agreement(args.pairs, args.reference)
        print(json.dumps(result))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
        return 0
    from llmguide.envs import get_oracle
    from llmguide.llm.cache.store import default_cache_path
    from llmguide.methods.oni.oracle import helpful

    cache = args.cache or default_cache_path()
    margins = scored_messages(cache, args.template)
    if not margins:
        raise SystemExit(f"no scored labelling prompts in {cache}")
    msgs = list(margins)
    m = np.array([margins[k] for k in msgs])
    oracle = get_oracle(args.env)
    truth = np.array([bool(helpful(oracle, k)) for k in msgs])
    yes = m >= np.quantile(m, 1 - args.rate)
    order = np.argsort(-m)
    result = {"messages": len(msgs), "oracle_helpful": float(truth.mean()), "roc_auc": roc_auc(m, truth),
              "rate": float(yes.mean()), "precision": float(truth[yes].mean()), "recall": float(yes[truth].mean()),
              "top": [[msgs[i], round(float(m[i]), 3), bool(truth[i])] for i in order[:15]],
              "helpful_ranked_lowest": [[msgs[i], round(float(m[i]), 3)] for i in order[::-1] if truth[i]][:8]}
    print(f"{result['messages']} messages, oracle helpful {result['oracle_helpful']:.3f}; ROC AUC of the margin "
          f"for the oracle's label {result['roc_auc']:.3f}; top {result['rate']:.3f}: precision "
          f"{result['precision']:.3f}, recall {result['recall']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
