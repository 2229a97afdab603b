"""PTGM reproduction: PTGM vs flat PPO, BC-finetune, PTGM without KL, PTGM with a random codebook and PTGM with
the KL as a loss, on a target task whose mission the task-agnostic data never contains.

Preparation (``benchmarks/harness/`` runs it into ``<runs>/prep/``, each step kept once finished): ``collect``
(``data``; BabyAI: the bot, ``method.collect.tasks`` round robin; Craftax: the scripted expert or an exploring
PPO+RND agent, no task reward either way; ``--data`` reuses a collect run) -> ``codebook`` (``codes``: hindsight goals, PCA +
KMeans) -> ``pretrain`` (``pre``: goal-conditioned BC low level, goal priors). Every arm has the same PPO
settings, network (``agent.image_encoder``), env, seeds and budget **in env steps**: the options arms count
the low-level steps, and their rollout is ``--rollout / option_steps`` high-level steps per env so every arm
updates after the same number of env steps. ``bc-finetune`` and the PTGM arms use the same pretrained low
level; ``ppo`` learns from scratch; ``bc-frozen`` (a reference row: BC-expert on Craftax, BC-bot on BabyAI) acts
with that goal-free BC start and never updates it (``agent.update_epochs=0``). PTGM's high level has no entropy
term (``--options-ent-coef`` 0).

Value per seed: success AUC (the mean training success rate over ``--bins`` equal env-step bins); on Craftax
with all achievements, the achievements-per-episode AUC.

    nice -n 5 python benchmarks/studies/ptgm.py --task BabyAI-UnlockPickup-v0 --seeds 3 --steps 100000

Craftax (``--env craftax``, or ``--env-id craftax`` as before; 64 envs, rollout 32, asynchronous options per env):
the arms train on the shared sparse task (``harness.SPARSE_TASK``, make_stone_pickaxe; ``--task`` or its alias
``--craftax-task`` picks another achievement, ``all`` Craftax-Classic's own reward over all 22). The data come
from ``--collect-policy`` (default ``expert``: the scripted expert in data mode, competent varied play that never
pursues the task's own achievement, ``method.collect.exclude=[<task>]``; ``ppo``: the PPO+RND explorer of the
first studies, whose near-random play gave a low level that ignores its goal) for ``--collect-steps`` env steps
(all envs together, for either policy). ``--collect-mode plain`` (variant ``-plain``) collects the expert's plain
mode instead: every achievement, cheapest first, nothing excluded, in 1,000-step episodes (the BC gate's data,
``benchmarks/studies/ptgm_bc.py``, on which a frozen clone passes ``make_wood_pickaxe``): general play whose chains
include the task, never told it. Options of ``--option-steps`` 16 over ``--k`` 64 codes; the options arms
act with classifier-free guidance ``--cfg-scale`` 7 (Steve-1), ``ptgm-cfg0`` is ``ptgm`` without it. Goals are
``--goal-space`` (``view_inventory``: the future semantic view + inventory; ``inventory_delta``: the inventory
change to the future state + the events in between, "what happens next"). Pretraining ends with PTGM's BC
gate (``method.lowlevel.gate``: does the low level follow its goal?); a pretrain run that fails it fails every
arm but ``ppo`` (``--no-gate``: record it only). Results in
``benchmarks/results/ptgm_craftax/<task>-<budget>[-<goal space>][-explorer]/`` with the gate's numbers and a
table of what each code means.

    nice -n 10 python benchmarks/studies/ptgm.py --env craftax --seeds 3 --steps 500000 --arms ppo,ptgm,ptgm-cfg0,ptgm-no-kl

Post-hoc analyses of the pretrained low level: ``benchmarks/analyses/ptgm_analysis.py`` over ``<runs>/prep``.
"""

from __future__ import annotations

import json
import sys

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import SPARSE_PPO, SPARSE_TASK, Study, budget_name, main

PTGM = ["method.pretrained={prep}/pre", "method.codebook.k={k}", "method.option_steps={option_steps}",
        "method.lowlevel.epochs={ll_epochs}", "method.prior.epochs={ll_epochs}", "method.goals.space={goal_space}",
        "method.lowlevel.gate.enforce={gate}"]
OPTIONS = ["agent.num_steps={option_rollout}", "agent.ent_coef={options_ent_coef}"]   # rollout / L options per env
CFG = "method.lowlevel.cfg_scale={cfg_scale}"   # classifier-free guidance of the low level (every options arm)
ARMS = {
    "ppo": ["method=none", "agent.num_steps={rollout}"],
    "bc-finetune": ["method=ptgm_bc_finetune", *PTGM, "agent.num_steps={rollout}"],
    # a reference row: the same goal-free BC start, never updated (no PPO epochs): BC-expert on Craftax, BC-bot on
    # BabyAI; what imitation alone reaches on the task
    "bc-frozen": ["method=ptgm_bc_finetune", *PTGM, "agent.num_steps={rollout}", "agent.update_epochs=0"],
    "ptgm": ["method=ptgm", *PTGM, *OPTIONS, CFG, "method.kl.coef={kl_coef}"],
    "ptgm-cfg0": ["method=ptgm", *PTGM, *OPTIONS, "method.lowlevel.cfg_scale=0", "method.kl.coef={kl_coef}"],
    # Steve-1's guidance whatever --cfg-scale gives the other options arms (a study run at --cfg-scale 0 compares both)
    "ptgm-cfg7": ["method=ptgm", *PTGM, *OPTIONS, "method.lowlevel.cfg_scale=7", "method.kl.coef={kl_coef}"],
    "ptgm-no-kl": ["method=ptgm_no_kl", *PTGM, *OPTIONS, CFG],
    "ptgm-random-codes": ["method=ptgm_random_codes", *PTGM, *OPTIONS, CFG],
    # our variant: alpha * KL(pi || prior) in the PPO loss instead of PTGM's per-step reward
    "ptgm-kl-loss": ["method=ptgm", *PTGM, *OPTIONS, CFG, "method.kl.coef={kl_coef}", "method.kl.mode=loss"],
    # Craftax only: the shared sparse task's PPO (GRU, 64-step rollouts, extrinsic x10), the `ppo` row of the BK and
    # ONI studies on the same task; a reference row, since its network is not the one the PTGM arms share
    "ppo-shared": ["method=none", *SPARSE_PPO],
    # Craftax only: the scripted expert playing the task, no learning (the upper reference, as BabyAI's bot)
    "expert": ["method=none", "agent=scripted", "agent.policy=expert"],
}
CRAFTAX_ONLY = ("ppo-shared", "expert")
COLLECTORS = {"expert": "the scripted expert in data mode (feasible subgoals at random, epsilon-random actions; it "
                        "never pursues {exclude})",
              "expert-plain": "the scripted expert in plain mode (every achievement, cheapest first; it is never told "
                              "the task, whose chain is part of its play)",
              "ppo": "the finished episodes of a PPO+RND explorer trained on RND only"}
GOAL_TEXT = {"view_inventory": "future one-hot view + inventory counts",
             "inventory_delta": "the inventory change from the current to the goal state + counts of the events in "
                                "between, sign·log(1+|x|) compressed",
             "inventory_delta_view": "inventory_delta + the goal view's 19 class fractions"}


def flags(p) -> None:
    from llmguide.methods.ptgm.goals import GOAL_SPACES

    p.add_argument("--collect-episodes", type=int, default=2400, help="BabyAI: bot episodes")
    p.add_argument("--collect-steps", type=int, default=200_000,
                   help="craftax: env steps of the collector (all envs together; the expert's too)")
    p.add_argument("--collect-policy", default=None, choices=("ppo", "expert"),
                   help="craftax: the data's policy, method.collect.policy (default expert; ppo: the RND explorer)")
    p.add_argument("--collect-mode", default="data", choices=("data", "plain"),
                   help="craftax, expert collector: data (PTGM's data, the task excluded) | plain (every achievement, "
                        "cheapest first, nothing excluded: general play that includes the task's chain; variant -plain)")
    p.add_argument("--collect-max-steps", type=int, default=None,
                   help="craftax: env.max_steps of the collection only (default: the env's; plain mode 1000, the BC "
                        "gate's, since the plain expert rarely dies and only finished episodes are kept)")
    p.add_argument("--craftax-task", default=None,
                   help=f"craftax: alias of --task (default {SPARSE_TASK}; all: the 22 achievements)")
    p.add_argument("--max-steps", type=int, default=None, help="env.max_steps override (default: the env's)")
    p.add_argument("--rollout", type=int, default=None,
                   help="env steps per env per PPO update (default 128 BabyAI, 32 craftax); options arms: / L")
    p.add_argument("--goal-space", default="view_inventory", choices=GOAL_SPACES, help="craftax: method.goals.space")
    p.add_argument("--data", default=None, help="an existing collect run to reuse (linked as <prep>/data)")
    p.add_argument("--k", type=int, default=None, help="codebook size (default 32 BabyAI, 64 craftax)")
    p.add_argument("--option-steps", type=int, default=None, help="L, env steps per option (default 8 BabyAI, 16 craftax)")
    p.add_argument("--cfg-scale", type=float, default=None,
                   help="classifier-free guidance of the options arms but ptgm-cfg0 (default 0 BabyAI, 7 craftax)")
    p.add_argument("--no-gate", action="store_true",
                   help="PTGM's BC gate recorded only (method.lowlevel.gate.enforce=false): a failed gate fails no arm")
    p.add_argument("--kl-coef", type=float, default=0.05)
    p.add_argument("--options-ent-coef", type=float, default=0.0,
                   help="entropy coefficient of the high-level PPO (options arms); PTGM's has none (0)")
    p.add_argument("--ll-epochs", type=int, default=8, help="BC epochs of the low level and the priors")
    p.add_argument("--image-encoder", default="flat", choices=("flat", "cnn"))
    p.add_argument("--eval-episodes", type=int, default=20)


def configure(args) -> None:
    if (args.task or "").lower().startswith("craftax"):   # the old `--task craftax`: the env group
        args.env, args.task = "craftax", None
    craftax = args.env == "craftax"
    args.task = (args.task or args.craftax_task or SPARSE_TASK) if craftax else (args.task or "BabyAI-UnlockPickup-v0")
    if not craftax:   # the shared-task PPO and the expert are Craftax rows: dropped from the default arms, refused by name
        arms = args.arms.split(",")
        if any(a in CRAFTAX_ONLY for a in arms) and args.arms != ",".join(STUDY.arms):
            raise SystemExit(f"--arms {','.join(a for a in arms if a in CRAFTAX_ONLY)}: a Craftax arm (--env craftax)")
        args.arms = ",".join(a for a in arms if a not in CRAFTAX_ONLY)
    if craftax and args.task == "all":
        args.task = None   # Craftax-Classic's own reward, all 22 achievements
    args.collect_policy = args.collect_policy or "expert"
    # data mode never pursues the task itself; plain mode is general play whose chains include it (the BC gate's data)
    if args.collect_max_steps is None and args.collect_mode == "plain":
        args.collect_max_steps = 1000
    args.exclude = f"[{args.task}]" if craftax and args.task and args.collect_mode == "data" else "[]"
    args.k = args.k or (64 if craftax else 32)
    args.option_steps = args.option_steps or (16 if craftax else 8)
    args.cfg_scale = (7.0 if craftax else 0.0) if args.cfg_scale is None else args.cfg_scale
    args.gate = "false" if args.no_gate else "true"
    args.num_envs = args.num_envs or (64 if craftax else 8)
    args.rollout = args.rollout or (32 if craftax else 128)
    args.option_rollout = max(1, args.rollout // args.option_steps)
    if args.max_steps:
        args.extra = [f"env.max_steps={args.max_steps}", *args.extra]
    if craftax and not args.task and args.metric == "charts/success":
        args.metric = "charts/achievements_per_episode"
        args.metric_name = "achievements-per-episode AUC (training episodes, mean over equal env-step bins)"
    if craftax and args.study is None:
        args.study = "ptgm_craftax"
    if craftax and args.variant is None:
        space = "" if args.goal_space == "view_inventory" else f"-{args.goal_space}"
        data = "-explorer" if args.collect_policy == "ppo" else "-plain" if args.collect_mode == "plain" else ""
        args.variant = "-".join(p for p in (args.task, budget_name(args.steps)) if p) + space + data


def prepare(plan) -> None:
    """collect -> codebook -> pretrain (each kept once finished); every arm but ``ppo`` needs them."""
    a = plan.args
    if not any(arm != "ppo" for arm in plan.arms):
        return
    if a.data and not (plan.prep / "data").exists():
        from pathlib import Path

        plan.prep.mkdir(parents=True, exist_ok=True)
        (plan.prep / "data").symlink_to(Path(a.data).resolve(), target_is_directory=True)
    collect = ([f"method.collect.episodes={a.collect_episodes}"] if plan.env == "babyai" else
               [f"method.collect.agent_steps={a.collect_steps}", f"method.collect.policy={a.collect_policy}",
                f"method.collect.exclude={a.exclude}", f"method.collect.expert_mode={a.collect_mode}",
                "method.collect.extrinsic_coef=0.0",
                *([f"env.max_steps={a.collect_max_steps}"] if a.collect_max_steps else []),
                "method.collect.intrinsic_coef=1.0", f"agent.num_steps={a.rollout}"])
    keys = ["method=ptgm", *[o for o in PTGM if not o.startswith("method.pretrained=")]]
    steps = [("collect", "data", "collect_summary.json", collect),
             ("codebook", "codes", "ptgm/codebook.json", ["method.data={prep}/data"]),
             ("pretrain", "pre", "ptgm/manifest.json", ["method.data={prep}/data", "method.codebook.run={prep}/codes"])]
    manifest = plan.prep / "pre" / "ptgm" / "manifest.json"
    for verb, name, done, extra in steps:
        reason = plan.step(verb, name, [*keys, *extra], done=done)
        if verb == "pretrain" and manifest.exists() and json.loads(manifest.read_text()).get("failed"):
            reason = f"pretraining failed: {json.loads(manifest.read_text())['failed']}"   # a kept run, too
        if reason:
            for arm in plan.arms:
                if arm != "ppo":
                    plan.fail(arm, reason)
            return


def details(plan) -> tuple[list[str], dict]:
    """The pretraining (data, low-level BC, prior accuracy) and, with a Craftax codebook, what each code means."""
    pre, codes = plan.prep / "pre" / "ptgm" / "manifest.json", plan.prep / "codes" / "ptgm" / "codebook.json"
    manifest = json.loads(pre.read_text()) if pre.exists() else {}
    if not manifest:
        return [], {}
    ll = (manifest.get("lowlevel", {}).get("history") or [{}])[-1]
    prior = {k: (manifest.get(f"prior_{k}", {}).get("history") or [{}])[-1].get("val_acc") for k in ("kmeans", "random")}
    a = plan.args
    key = "expert-plain" if a.collect_policy == "expert" and a.collect_mode == "plain" else a.collect_policy
    collector = COLLECTORS[key].format(exclude=a.exclude.strip("[]") or "nothing excluded")
    data = (f"{a.collect_episodes} BabyAI-bot episodes over `method.collect.tasks`" if plan.env == "babyai" else
            f"{collector}, {a.collect_steps:,} env steps; goals: "
            f"{GOAL_TEXT.get(a.goal_space, a.goal_space)}, hindsight 5-30 steps ahead")
    gate = manifest.get("bc_gate")
    out = {"samples": manifest.get("samples"), "lowlevel_last_epoch": ll, "prior_val_acc": prior, "k": a.k,
           "option_steps": a.option_steps, "kl_coef": a.kl_coef, "cfg_scale": a.cfg_scale, "goal_space": a.goal_space,
           "collect_policy": a.collect_policy if plan.env != "babyai" else "bot", "bc_gate": gate,
           "pretrain_failed": manifest.get("failed")}
    lines = ["## Pretraining", "", f"Data: {data} ({manifest.get('samples')} steps). Codebook k={a.k} (PCA 32 + "
             f"KMeans); options of L={a.option_steps} steps; KL coef {a.kl_coef} (KL(π_high ‖ π_prior)); high-level "
             f"entropy coefficient {a.options_ent_coef}; classifier-free guidance {a.cfg_scale} (ptgm-cfg0: 0). "
             f"Low-level BC last epoch: {json.dumps(ll)}; prior validation accuracy {json.dumps(prior)}.", ""]
    if gate:
        def num(key: str) -> str:
            return "n/a" if gate.get(key) is None else f"{gate[key]:.3f}"

        verdict = "passed" if gate.get("passed") else f"**failed** ({gate.get('failed')})"
        lines += [f"BC gate (`method.lowlevel.gate`, thresholds {json.dumps(gate.get('thresholds'))}): {verdict}. "
                  f"Held-out accuracy {num('acc_cond')} with the goal vs {num('acc_uncond')} without (gain "
                  f"{num('acc_gain')}); NLL {num('nll_cond')} vs {num('nll_uncond')} nats (gain {num('nll_gain')}); "
                  f"mutual information nearest code of the hindsight goal <-> action {num('mi_bits')} bits "
                  f"(Miller-Madow; plug-in {num('mi_bits_plugin')}) over {gate.get('samples')} steps.", ""]
    clusters = (json.loads(codes.read_text()) if codes.exists() else {}).get("clusters_kmeans")
    if clusters:
        total = sum(c["size"] for c in clusters) or 1
        lines += ["### What the codes mean (KMeans; mean over the goals of each cluster)", "",
                  "| code | share of goals | mean change to the goal state / events in between (top 4) |", "|---|---|---|"]
        lines += [f"| {c['code']} | {c['size'] / total:.3f} | "
                  f"{', '.join(f'{n} {v:+.2f}' for n, v in c['top']) or '(nothing changes)'} |"
                  for c in sorted(clusters, key=lambda c: -c["size"])[:32]]
        lines.append("")
    return lines, out


STUDY = Study(
    name="ptgm",
    title="PTGM vs baselines",
    about="Same PPO settings, network, env, seeds and budget in env steps for every arm (the options arms count "
          "low-level steps); bc-finetune and the PTGM arms start from the same pretrained low level.",
    arms=ARMS,
    control="ppo",
    upper_reference=("expert",),
    metric="charts/success",
    metric_name="success AUC (mean training success rate over equal env-step bins)",
    value="auc",
    bins=20,
    common=["agent.image_encoder={image_encoder}", "agent.torch_threads=1", "eval.episodes={eval_episodes}"],
    env="babyai",
    task=None,                # BabyAI-UnlockPickup-v0 on babyai; on craftax SPARSE_TASK (all: the 22 achievements)
    env_id="task",
    steps=100_000,
    seeds=3,
    flags=flags,
    configure=configure,
    prepare=prepare,
    details=details,
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
