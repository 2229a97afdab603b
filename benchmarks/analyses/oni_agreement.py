"""Embedded-LM (Gemma 3 270M) labels vs the oracle on the distinct messages the oracle arms of a
``benchmarks/studies/oni.py`` run folder labelled.

The labeller is built exactly as the ``oni_retrieval-embedded`` arm builds it (the overrides of ``benchmarks/studies/oni.py``'s
study for ``--env-id``, ``llmguide.methods.oni.recipe.build_oni_module`` with ``method_goal(cfg)``); agreement is
``benchmarks/studies/oni.py``'s ``agreement``.  Usage (from the repo root):
  .venv/bin/python benchmarks/analyses/oni_agreement.py --env-id ENV_ID --run-dir RUN_DIR [--out OUT_JSON] \
      [--key-message "You start to float in the air!"]
RUN_DIR: the study's runs folder (``runs/bench/oni/<env id>-<budget>``: ``<arm>/seed-<s>/``; the old flat
``<arm>-s<seed>/`` layout is read too). OUT_JSON: default ``benchmarks/results/oni/<RUN_DIR's name>/embedded_agreement.json``.
(``benchmarks/results/oni_lavacross_potion/legacy-300k/embedded_agreement.json`` was written by this script, then
named ``embedded_agreement.py``, with the key message as its ``float_message`` field.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import _path  # noqa: F401,E402  (benchmarks/ and its folders on sys.path: harness, the other scripts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", "--task", dest="env_id", required=True)
    p.add_argument("--run-dir", type=Path, required=True, help="the --runs folder of a benchmarks/studies/oni.py study")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON file to write (default benchmarks/results/oni/<run dir name>/embedded_agreement.json)")
    p.add_argument("--key-message", action="append", default=[], help="a message whose labels to report")
    args_in = p.parse_args()
    run_dir, env_id = args_in.run_dir, args_in.env_id
    out = args_in.out or Path(__file__).resolve().parents[1] / "results" / "oni" / run_dir.resolve().name / "embedded_agreement.json"
    os.environ["LLMGUIDE_CACHE_DIR"] = str(run_dir / "cache-embedded-agreement")  # fresh: every label is an LM call
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import oni  # benchmarks/studies/oni.py

    import harness  # benchmarks/harness/
    from llmguide.envs.nethack.oracle import NetHackOracle, task_goal
    from llmguide.methods.oni.oracle import helpful
    from llmguide.methods.oni.recipe import build_oni_module, method_goal
    from llmguide.pipelines import load_config
    from llmguide.pipelines.services import close_service, open_service

    sources = sorted({*run_dir.glob("oni_retrieval-oracle/seed-*"), *run_dir.glob("oni_classification-oracle/seed-*"),
                      *run_dir.glob("oni_retrieval-oracle-s*"), *run_dir.glob("oni_classification-oracle-s*")})
    sources = [p for p in sources if p.is_dir()]
    oracle_labels: dict[str, float | None] = {}
    for run in sources:
        oracle_labels.update(oni.labelled_messages(run))
    messages = sorted(oracle_labels)
    plan = harness.make_plan(oni.STUDY, harness.build_parser(oni.STUDY).parse_args(
        ["--env-id", env_id, "--runs", str(run_dir)]))
    cfg = load_config([*plan.arm_overrides("oni_retrieval-embedded"), "seed=0", f"run.dir={run_dir}",
                       "run.name=embedded-agreement"])
    goal = method_goal(cfg)
    service = open_service(cfg)
    module = build_oni_module(cfg.method, 1, service, 0, goal=goal)
    annot = module.annotator
    t0 = time.perf_counter()
    annot.submit(messages)
    done = annot.wait(timeout=1200.0)
    secs = time.perf_counter() - t0
    lm = {m: annot.get(m) for m in messages}
    result = oni.agreement(lm, task_goal(env_id))  # as report() does for the embedded arm
    oracle = NetHackOracle()
    result.update({
        "source_runs": [str(p.relative_to(run_dir)) for p in sources], "distinct_messages": len(messages),
        "lm": f"{cfg.llm.backend}:{cfg.llm.model}", "label_mode": str(cfg.method.label_mode),
        "score_margin": float(cfg.method.score_margin), "template": annot.template.version, "goal": goal,
        "unparseable": int(annot.counts["unparseable"]), "fallbacks": int(annot.counts["fallbacks"]),
        "unlabelled": sum(1 for m in messages if m not in annot.labels), "all_done": bool(done),
        "lm_requests": int(annot.counts["requests"]), "seconds": round(secs, 1),
        "oracle_labels_consistent": all((y is None) or ((y > 0.5) == helpful(oracle, m, None))
                                        for m, y in oracle_labels.items()),
        "key_messages": {m: {"seen": m in lm, "lm_label": lm.get(m), "oracle_helpful": helpful(oracle, m, None)}
                         for m in args_in.key_message},
        "lm_yes_oracle_no_messages": sorted(m for m, y in lm.items() if y is not None and y > 0.5
                                            and not helpful(oracle, m, None)),
        "lm_no_oracle_yes_messages": sorted(m for m, y in lm.items() if y is not None and y <= 0.5
                                            and helpful(oracle, m, None)),
        "labels": lm})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("labels", "oracle_helpful")}, indent=1))
    close_service(service)
    module.close()


if __name__ == "__main__":
    main()
