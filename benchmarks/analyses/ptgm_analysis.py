"""Post-hoc analyses behind ptgm_craftax_inventory_delta.md (run from the repo root, after benchmarks/studies/ptgm.py):

    python benchmarks/analyses/ptgm_analysis.py bc RUN_DIR
        low-level BC on its own val split: accuracy and NLL with vs without the goal
    python benchmarks/analyses/ptgm_analysis.py control RUN_DIR 600 [CFG_SCALE]
        controllability: a random code per option (the run's method.option_steps L) with the frozen low level on
        64 Craftax envs for 600 env steps, acting with classifier-free guidance CFG_SCALE (default the run's
        method.lowlevel.cfg_scale); per event, its rate when a code whose cluster means it is commanded vs
        otherwise, and the mutual information code <-> event

RUN_DIR: the runs folder of a benchmarks/studies/ptgm.py study (its preparation in RUN_DIR/prep: data, codes, pre), e.g.
runs/bench/ptgm_craftax/400k-inventory_delta (view_inventory: no cluster meanings), or a folder holding pre/ and codes/
directly (the old layout: runs/bench-ptgm-craftax-inventory-delta).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from llmguide.envs import make_env, make_vector_env, split_infos
from llmguide.methods.ptgm.goals import GoalCodebook
from llmguide.methods.ptgm.models import LowLevelActor, make_lowlevel
from llmguide.methods.ptgm.options import AsyncOptionsVectorEnv, lowlevel_space
from llmguide.methods.ptgm.steps import _embed, goal_data

torch.set_num_threads(1)


def binary_entropy_bits(p: float) -> float:
    """Entropy (bits) of a Bernoulli(p) outcome."""
    return 0.0 if p in (0, 1) else float(-(p * np.log2(p) + (1 - p) * np.log2(1 - p)))


def mutual_information_bits(x: np.ndarray, codes: np.ndarray) -> float:
    """Mutual information (bits) between a binary outcome ``x`` and the commanded code."""
    conditional = sum(
        (codes == k).mean() * binary_entropy_bits(x[codes == k].mean()) for k in np.unique(codes)
    )
    return binary_entropy_bits(x.mean()) - conditional


def prep_dir(root: str) -> str:
    """The folder holding the preparation runs (pre/, codes/): RUN_DIR/prep, or RUN_DIR itself (old layout)."""
    return str(Path(root) / "prep") if (Path(root) / "prep" / "pre").is_dir() else root


def bc(root: str) -> None:
    """Low-level BC on its own validation split: accuracy and NLL with vs without the goal."""
    root = prep_dir(root)
    cfg = OmegaConf.load(f"{root}/pre/config.yaml")
    data = goal_data(cfg)
    book = GoalCodebook.load(f"{root}/pre/ptgm/codebook.npz")
    emb = _embed(book, data["goal"])
    ll = torch.load(f"{root}/pre/ptgm/lowlevel.pt", weights_only=True)
    probe = make_env(cfg.env, 0)
    space = probe.observation_space
    probe.close()
    net = make_lowlevel(
        lowlevel_space(space, ll["goal_dim"], ll["state_dim"]),
        ll["n_actions"],
        ll["hidden"],
        ll["image_encoder"],
    )
    net.load_state_dict(ll["net"])
    net.eval()
    rng = np.random.default_rng(int(cfg.seed))
    n = len(data["action"])
    val = np.flatnonzero(rng.random(n) < 0.05)
    out = {}
    with torch.no_grad():
        for name, drop in (("cond", False), ("uncond", True)):
            nll, acc = [], []
            for i in range(0, len(val), 4096):
                ids = val[i : i + 4096]
                g = np.zeros_like(emb[ids]) if drop else emb[ids]
                vec = np.concatenate(
                    [data["state"][ids], g, np.full((len(ids), 1), 0.0 if drop else 1.0, np.float32)], 1
                )
                lg = net.action_logits(
                    {
                        "image": torch.as_tensor(data["image"][ids], dtype=torch.float32),
                        "vector": torch.as_tensor(vec, dtype=torch.float32),
                    },
                )
                y = torch.as_tensor(data["action"][ids])
                nll.append(F.cross_entropy(lg, y, reduction="sum").item())
                acc.append((lg.argmax(-1) == y).sum().item())
            out[f"val_nll_{name}"] = sum(nll) / len(val)
            out[f"val_acc_{name}"] = sum(acc) / len(val)
    a = data["action"]
    p = np.bincount(a, minlength=17) / len(a)
    out["action_entropy_marginal"] = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    out["val_n"] = int(len(val))
    out["info_gain_nats"] = out["val_nll_uncond"] - out["val_nll_cond"]
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


def control(root: str, steps: int, cfg_scale: float | None = None) -> None:
    """A random code per L-step option, frozen low level: event rates per commanded code, and code-event MI."""
    root = prep_dir(root)
    cfg = OmegaConf.load(f"{root}/pre/config.yaml")
    option_steps = int(cfg.method.option_steps)
    cfg_scale = float(cfg.method.lowlevel.get("cfg_scale", 0.0)) if cfg_scale is None else cfg_scale
    book = GoalCodebook.load(f"{root}/pre/ptgm/codebook.npz")
    ll = torch.load(f"{root}/pre/ptgm/lowlevel.pt", weights_only=True)
    N = 64
    envs = make_vector_env(cfg.env, N, 123, str(cfg.vector))
    net = make_lowlevel(
        lowlevel_space(envs.single_observation_space, ll["goal_dim"], ll["state_dim"]),
        ll["n_actions"],
        ll["hidden"],
        ll["image_encoder"],
    )
    net.load_state_dict(ll["net"])
    net.eval()
    actor = LowLevelActor(net, ll["goal_dim"], cfg_scale, False, 0, ll["state_dim"])
    venv = AsyncOptionsVectorEnv(envs, actor.batch, book.codes("medoid"), option_steps)
    obs, _ = venv.reset(seed=123)
    rng = np.random.default_rng(0)
    start = np.asarray(obs["vector"])[:, :16] * 9
    code = rng.integers(0, book.k, N)
    ev = [set() for _ in range(N)]
    rows = []
    for _ in range(steps):
        out = venv.step(code)
        infos = split_infos(out.infos, N)
        dones = out.terminated | out.truncated
        for i in range(N):
            inf = infos[i] if infos else {}
            fin = inf.get("final_info") if dones[i] else None
            e = (fin or inf).get("events") if isinstance(fin or inf, dict) else None
            for x in e or []:
                ev[i].add(str(x))
        vec = np.asarray(out.obs["vector"])[:, :16] * 9
        for i in np.flatnonzero(out.ended):
            if not dones[i]:
                rows.append(
                    {
                        "code": int(code[i]),
                        "delta": np.rint(vec[i] - start[i]),
                        "events": sorted(ev[i]),
                        "ret": float(out.option_return[i]),
                    }
                )
            start[i] = vec[i]
            ev[i] = set()
            code[i] = rng.integers(0, book.k)
    venv.close()
    print(len(rows), "options (non-terminal)")
    codes = np.array([r["code"] for r in rows])
    evs = sorted({e for r in rows for e in r["events"]})
    E = np.array([[e in r["events"] for e in evs] for r in rows], float)
    summ = json.load(open(f"{root}/codes/ptgm/codebook.json")).get("clusters_kmeans")
    out = {"options": len(rows), "option_steps": option_steps, "cfg_scale": cfg_scale, "events": {}}
    shuffled = rng.permutation(codes)

    for j, e in enumerate(evs):
        x = E[:, j]
        per = np.array([x[codes == k].mean() if (codes == k).any() else np.nan for k in range(book.k)])
        best = int(np.nanargmax(per))
        meaning = None
        if summ:
            key = "ev:" + e
            vals = {c["code"]: dict(map(tuple, c["top"])).get(key, 0.0) for c in summ}
            meant = [k for k, v in vals.items() if v >= 0.5]
            if meant:
                m = np.isin(codes, meant)
                meaning = {
                    "codes_meaning_it": meant,
                    "rate_when_commanded": round(float(x[m].mean()), 4) if m.any() else None,
                    "rate_otherwise": round(float(x[~m].mean()), 4),
                }
        out["events"][e] = {
            "rate": round(float(x.mean()), 4),
            "best_code": best,
            "best_code_rate": round(float(per[best]), 4),
            "mi_bits": round(float(mutual_information_bits(x, codes)), 5),
            # the plug-in estimate's bias: the same MI with the codes permuted across options (no relation)
            "mi_bits_shuffled": round(float(mutual_information_bits(x, shuffled)), 5),
            "by_meaning": meaning,
        }
    out["mi_bits_sum"] = round(sum(e["mi_bits"] for e in out["events"].values()), 4)
    out["mi_bits_shuffled_sum"] = round(sum(e["mi_bits_shuffled"] for e in out["events"].values()), 4)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "bc":
        bc(sys.argv[2])
    else:
        control(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else None)
