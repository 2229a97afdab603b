"""A PPO sweep for the shared sparse task (issue 47): is the PPO every sparse-task study compares against tuned?

Every arm is the shared sparse task's PPO (``harness.SPARSE_PPO``: flat encoder over the symbolic view, a GRU,
256 hidden, extrinsic x10, 64 envs) with one setting of the grid

* learning rate ``agent.lr`` in {2.5e-4, 5e-4, 1e-3},
* entropy coefficient ``agent.ent_coef`` in {0.003, 0.01, 0.03},
* rollout length ``agent.num_steps`` in {64, 128},

named ``lr<lr>-ent<ent>-n<steps>``; the control ``lr2.5e-4-ent0.01-n64`` is ``SPARSE_PPO`` before this sweep
(CleanRL's defaults but the rollout length). Two more arms test what else might matter, at the control's setting:
``...-coef1`` (extrinsic x1: the reward scale) and ``...-mlp`` (no GRU). The value per seed is success AUC, as in
every study of the shared task; the winner is the arm with the highest mean AUC. Runs go seed by seed over the
arms (``order="seed"``), so an interrupted sweep has every arm at the same seeds.

    python benchmarks/studies/ppo_sweep.py --dry-run
    python benchmarks/studies/ppo_sweep.py --task make_wood_pickaxe --steps 300000 --seeds 3 --resume
"""

from __future__ import annotations

import sys
from itertools import product

import _path  # noqa: F401  (benchmarks/ and its folders on sys.path: harness, the other scripts)

from harness import SPARSE_PPO, Study, main

LRS = ("2.5e-4", "5e-4", "1e-3")
ENTS = ("0.003", "0.01", "0.03")
ROLLOUTS = (64, 128)
SWEPT = ("agent.lr=", "agent.ent_coef=", "agent.num_steps=", "agent.recurrent=", "method.extrinsic_coef=")
BASE = [o for o in SPARSE_PPO if not o.startswith(SWEPT)]   # the shared PPO without the keys an arm sets
CONTROL = "lr2.5e-4-ent0.01-n64"


def setting(lr: str, ent: str, rollout: int, coef: str = "10.0", recurrent: str = "gru") -> list[str]:
    return [f"agent.lr={lr}", f"agent.ent_coef={ent}", f"agent.num_steps={rollout}",
            f"method.extrinsic_coef={coef}", f"agent.recurrent={recurrent}"]


ARMS = {CONTROL: setting("2.5e-4", "0.01", 64)}
ARMS.update({f"lr{lr}-ent{ent}-n{n}": setting(lr, ent, n) for lr, ent, n in product(LRS, ENTS, ROLLOUTS)})
ARMS[f"{CONTROL}-coef1"] = setting("2.5e-4", "0.01", 64, coef="1.0")
ARMS[f"{CONTROL}-mlp"] = setting("2.5e-4", "0.01", 64, recurrent="null")

STUDY = Study(
    name="ppo_sweep_{env}",
    title="PPO sweep on the shared sparse task",
    about="The shared sparse task's PPO (flat encoder, GRU, 256 hidden, extrinsic x10, 64 envs) over learning rate x "
          "entropy coefficient x rollout length, and two single changes at the old setting (extrinsic x1; no GRU). "
          "Picked by success AUC; the winner becomes harness.SPARSE_PPO.",
    arms=ARMS,
    control=CONTROL,
    metric="charts/success",
    metric_name="success AUC (mean training success rate over 20 equal env-step bins)",
    common=["method=none"],
    per_env={"craftax": ["num_envs=64", *BASE], "crafter": ["num_envs=8", *BASE]},
    value="auc",
    bins=20,
    env="craftax",
    task="make_wood_pickaxe",
    steps=300_000,
    seeds=3,
    jobs=1,
    order="seed",
    default_arms=tuple(a for a in ARMS if not a.endswith(("-coef1", "-mlp"))),
)

if __name__ == "__main__":
    sys.exit(main(STUDY))
