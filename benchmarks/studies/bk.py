"""BK reproduction: PPO vs BK-{Code,Pref,Goal} x {oracle, embedded LM}, with the knowledge controls (issue 34).

Preparation as the reference (``benchmarks/harness/`` runs it into ``<runs>/prep/``, resumable): RND-driven
collection on ``--collect-task`` (``data``: episodes saved along training) -> one label run per arm
(``labels-<arm>``: the variant's labelling with the arm's LM) -> PPO with each potential, and plain PPO,
over the seeds. ``<arm>-coef<c>`` (BK-Code-oracle, random-Φ, wrong-target, BK-Pref oracle / shuffled / embedded): the
shaping-coefficient sweep
(``method.intrinsic_coef`` = c, :data:`COEFS`; the reference's coefficient 1 is the default), on the same labels. An arm whose labelling failed (e.g. no valid program) is listed as failed with the reason.
Every arm has the same PPO config (reference: lr 3e-4 constant, clip 0.1, 8 envs x 128 steps), network, env,
budget and ``extrinsic_coef`` (10); the PPO control gets everything except the shaping.

Arms: ``ppo``; ``bk_{code,pref,goal}-{oracle,embedded}``; controls through the same BK machinery (same
normalisation, coefficient, labelling budget): ``bk_random_phi`` (a seeded random network over the
observation as Φ, no labels; its weights' seed is the run's seed), ``bk_pref-shuffled`` (the oracle's
preferences permuted across pairs, ``llm=shuffled``), ``bk_code-wrong-target`` (the oracle answering for
``--wrong-target``, a distractor task: it should hurt). The oracle is told the mission of ``env.task`` (or
``llm.target``); the embedded-LM arms are not. ``bk_code-qwen``: Qwen2.5-Coder-1.5B-Instruct writes the program told
the mission, as the oracle is (``method.tell_task=true``); ``bk_code-qwen-agnostic``: with the paper's task-agnostic
prompt; ``bk_pref-qwen``: Qwen ranks ``--pairs`` segment pairs with BK-Pref's task-agnostic prompt (told nothing
of the task); ``bk_code-prompt-only``: no LM, the write prompt's example program itself as Φ (``llm=prompt_only``);
``bk_code-qwen-offdomain``: Qwen shown an example program for another game (``method.code.example=offdomain``).
Value per seed: success AUC, the mean training success rate over
``--bins`` equal env-step bins of the budget.

    nice python benchmarks/studies/bk.py --task GoToLocal-RedBall-S20 --seeds 3 --steps 300000 --jobs 2

Crafter single tasks (``--env crafter`` or ``--env craftax``): the data is RND-driven PPO on the env with
all achievements (``env.task=null``), the arms train on ``--task`` (default: the shared sparse task
``harness.SPARSE_TASK``, make_stone_pickaxe; reward 1 and episode end on success, 1500-step cap) with the shared
sparse task's PPO (``harness.SPARSE_PPO``: the same ``ppo`` command as the ONI and PTGM studies, so
``--runs`` shared with them and ``--resume`` reuse their finished control runs); results in
``benchmarks/results/bk_<env>/``::

    nice python benchmarks/studies/bk.py --env craftax --seeds 5 --steps 500000 --jobs 2 \\
        --arms ppo,bk_code-oracle,bk_random_phi,bk_code-wrong-target

Label quality against ground truth: ``benchmarks/analyses/bk_quality.py`` over the same ``--runs``.
"""

from __future__ import annotations

import json
import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import SPARSE_PER_ENV, SPARSE_TASK, Study, main

PPO = ["agent.lr=3e-4", "agent.anneal_lr=false", "agent.clip_coef=0.1", "agent.num_steps=128", "method.extrinsic_coef=10.0"]
DEFAULTS = {"babyai": ("GoToLocal-RedBall-S20", "Pretraining-S20", "GoToLocal-BlueBox-S20"),   # task, collection,
            "crafter": (SPARSE_TASK, "null", "eat_cow"),                                      # wrong target
            "craftax": (SPARSE_TASK, "null", "eat_cow")}
CODE = ["method.code.iterations={code_iters}", "method.code.fix_retries={fix_retries}",
        "method.code.max_tokens={code_tokens}"]
LABELS = {  # arm -> label overrides (method=<variant> and llm=...); trained with method.labels={prep}/labels-<arm>
    "bk_code-oracle": ["method=bk_code", "llm=oracle", *CODE],
    "bk_pref-oracle": ["method=bk_pref", "llm=oracle", "method.pref.num_pairs={oracle_pairs}"],
    "bk_goal-oracle": ["method=bk_goal", "llm=oracle", "method.goal.iterations={goal_iters}"],
    "bk_code-embedded": ["method=bk_code", "llm=embedded", *CODE],
    "bk_pref-embedded": ["method=bk_pref", "llm=embedded", "method.pref.num_pairs={pairs}"],
    "bk_goal-embedded": ["method=bk_goal", "llm=embedded", "method.goal.iterations={goal_iters}"],
    "bk_pref-shuffled": ["method=bk_pref", "llm=shuffled", "method.pref.num_pairs={oracle_pairs}"],
    "bk_code-wrong-target": ["method=bk_code", "llm=oracle", "llm.target={wrong_target}", *CODE],
    # Qwen2.5-Coder-1.5B-Instruct (through its chat template) told the mission of env.task, as the oracle is; and
    # with the paper's task-agnostic prompt
    "bk_code-qwen": ["method=bk_code", "llm=qwen", "method.tell_task=true", "llm.n_threads={lm_threads}", *CODE],
    "bk_code-qwen-agnostic": ["method=bk_code", "llm=qwen", "method.tell_task=false", "llm.n_threads={lm_threads}",
                              *CODE],
    "bk_pref-qwen": ["method=bk_pref", "llm=qwen", "method.pref.num_pairs={pairs}", "llm.n_threads={lm_threads}"],
    # what the prompt tells (issue 66): its example program itself as Φ, no LM (llm=prompt_only answers the write
    # prompt with the example it shows); and Qwen shown an example program from another game (the format only)
    "bk_code-prompt-only": ["method=bk_code", "llm=prompt_only", "method.tell_task=false", *CODE],
    "bk_code-qwen-offdomain": ["method=bk_code", "llm=qwen", "method.tell_task=false", "method.code.example=offdomain",
                               "llm.n_threads={lm_threads}", *CODE],
}
# the shaping-coefficient sweep (the reference's normalisation stays the default, coefficient 1): the SWEPT arms at
# `method.intrinsic_coef` x COEFS on the same labels; BK-Code's and BK-Pref's knowledge controls are among them, so
# each control is paid at its treatment's scale
COEFS = (10,)
ARMS = {
    "ppo": ["method=none"],
    **{arm: [label[0], f"method.labels={{prep}}/labels-{arm}"] for arm, label in LABELS.items()},
    "bk_random_phi": ["method=bk_random_phi", "method.random_phi.seed=${seed}"],
}
LABELLED_BY = {arm: arm for arm in LABELS}   # arm -> the label run it trains on
SWEPT = ("bk_code-oracle", "bk_random_phi", "bk_code-wrong-target", "bk_pref-oracle", "bk_pref-shuffled",
         "bk_pref-embedded", "bk_code-qwen", "bk_code-qwen-agnostic", "bk_pref-qwen", "bk_code-prompt-only",
         "bk_code-qwen-offdomain")
for _c in COEFS:
    for _arm in SWEPT:
        ARMS[f"{_arm}-coef{_c}"] = [*ARMS[_arm], f"method.intrinsic_coef={_c}"]
        if _arm in LABELLED_BY:
            LABELLED_BY[f"{_arm}-coef{_c}"] = _arm


def flags(p) -> None:
    p.add_argument("--collect-task", default=None,
                   help="collection task (default: Pretraining-S20 on babyai, null = all achievements on Crafter)")
    p.add_argument("--collect-steps", type=int, default=65_536, help="env steps of the RND collection agent")
    p.add_argument("--wrong-target", default=None, help="bk_code-wrong-target's llm.target (default: GoToLocal-"
                   "BlueBox-S20 on babyai, eat_cow on Crafter; the other one when it is --task)")
    p.add_argument("--pairs", type=int, default=200, help="BK-Pref pairs labelled by an LM (reference: 5000)")
    p.add_argument("--oracle-pairs", type=int, default=2000, help="BK-Pref pairs labelled by the oracle or its controls")
    p.add_argument("--goal-iters", type=int, default=20)
    p.add_argument("--code-iters", type=int, default=5)
    p.add_argument("--fix-retries", type=int, default=2, help="BK-Code fix attempts (with the error) per iteration")
    p.add_argument("--code-tokens", type=int, default=384)
    p.add_argument("--lm-threads", type=int, default=1, help="llm.n_threads of the Qwen arms' labelling")


def configure(args) -> None:
    task, collect_task, wrong = DEFAULTS.get(args.env, DEFAULTS["babyai"])
    args.task = args.task or task
    args.collect_task = args.collect_task or collect_task
    if not args.wrong_target:   # a distractor task, never the task itself
        args.wrong_target = wrong if wrong != args.task else ("GoToLocal-RedBall-S20" if args.env == "babyai"
                                                               else "collect_drink")
    if args.env != "babyai" and args.study is None:
        args.study = f"bk_{args.env}"


def prepare(plan) -> None:
    """collect -> one label run per labelled arm (each skipped when finished)."""
    a = plan.args
    labelled = sorted({LABELLED_BY[arm] for arm in plan.arms if arm in LABELLED_BY})
    if not labelled:
        return
    failed = plan.step("collect", "data", [f"env.task={a.collect_task}", "method=bk_code",
                                           f"total_steps={a.collect_steps}"], done="collect_summary.json")
    for arm in labelled:
        users = [u for u in plan.arms if LABELLED_BY.get(u) == arm]
        if failed:
            for user in users:
                plan.fail(user, failed)
            continue
        name = f"labels-{arm}"
        reason = plan.step("label", name, [f"env.task={plan.task}", *LABELS[arm], f"method.data={plan.prep / 'data'}"],
                           done="bk/manifest.json")
        manifest = plan.prep / name / "bk" / "manifest.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("failed"):
            reason = f"labelling failed: {json.loads(manifest.read_text())['failed']}"
        for user in users if reason else ():
            plan.fail(user, reason)


def details(plan) -> tuple[list[str], dict]:
    """Each labelled arm's labelling summary, and every arm's shaping scale as paid (mean |c_int·F| per rollout
    record, against the mean |c_ext·extrinsic reward| and the success reward 10) from its runs."""
    import numpy as np
    import yaml

    from harness import seed_runs
    from llmguide.core.rundir import read_metrics

    out: dict = {"labels": {}, "shaping": {}}
    for arm in plan.arms:
        manifest = plan.prep / f"labels-{arm}" / "bk" / "manifest.json"
        if manifest.exists():
            m = json.loads(manifest.read_text())
            out["labels"][arm] = {"llm": m.get("llm"), "oracle_mission": m.get("oracle_mission"), "failed": m.get("failed"),
                                  **{k: v for k, v in (m.get("summary") or {}).items()
                                     if not isinstance(v, dict | list) and not str(k).startswith("parse/")}}
        shaping, extrinsic, factor = [], [], []
        for run in seed_runs(plan, arm).values():
            # as paid: the logged rewards are before their coefficients (method.intrinsic_coef sweeps the shaping)
            method = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("method", {})
            c_int, c_ext = float(method.get("intrinsic_coef", 1.0)), float(method.get("extrinsic_coef", 1.0))
            for r in read_metrics(run):
                shaping += [c_int * abs(v) for k, v in r.items() if k.startswith("charts/intrinsic_reward/")]
                extrinsic += [c_ext * abs(r["charts/extrinsic_reward"])] if "charts/extrinsic_reward" in r else []
                factor += [v for k, v in r.items() if k.endswith("/phi_factor")]
        if shaping:
            f, e = float(np.mean(shaping)), float(np.mean(extrinsic)) if extrinsic else float("nan")
            out["shaping"][arm] = {"mean_abs_F": f, "mean_abs_extrinsic": e, "F_over_extrinsic": f / e if e else None,
                                   "F_over_success_reward": f / 10.0,
                                   "phi_factor": float(np.mean(factor)) if factor else None}
    lines = ["## Labelling and shaping scale", ""]
    lines += [f"- `{arm}` labels: " + json.dumps(v, default=str) for arm, v in out["labels"].items()]
    if out["shaping"]:
        lines += ["", "| arm | mean \\|c_int·F\\| per rollout record | mean \\|c_ext·extrinsic\\| | F / extrinsic | F / success "
                  "reward (10) | Φ factor |", "|---|---|---|---|---|---|"]
        lines += [f"| {arm} | {s['mean_abs_F']:.3g} | {s['mean_abs_extrinsic']:.3g} | "
                  f"{s['F_over_extrinsic'] if s['F_over_extrinsic'] is None else format(s['F_over_extrinsic'], '.3g')} | "
                  f"{s['F_over_success_reward']:.3g} | {'–' if s['phi_factor'] is None else format(s['phi_factor'], '.3g')} |"
                  for arm, s in out["shaping"].items()]
    return [*lines, ""], out


STUDY = Study(
    name="bk",
    title="BK vs PPO: potential-based shaping from background knowledge",
    about="PPO (BabyAI: lr 3e-4 constant, clip 0.1, 128-step rollouts as the reference, extrinsic x10; Craftax: the "
          "shared sparse task's PPO) with the same network, env, budget and "
          "extrinsic coefficient (10) in every arm; BK arms add the shaping F = γΦ(s') − Φ(s) of their label run's "
          "potential. Value per seed: success AUC.",
    arms=ARMS,
    control="ppo",
    metric="charts/success",
    metric_name="success AUC (mean training success rate over equal env-step bins)",
    value="auc",
    bins=20,
    per_env={"babyai": ["num_envs=8", *PPO], **SPARSE_PER_ENV},
    env="babyai",
    task=None,
    env_id="task",
    steps=300_000,
    seeds=3,
    jobs=2,
    flags=flags,
    configure=configure,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
