"""``python benchmarks/harness --reproduce benchmarks/results/<study>/<variant>``: rerun a stored study and compare.

Reruns one seed of every arm of the stored result (its first seed; ``--seeds 0,2`` or ``0-4`` names stored seeds, a
list, not a count) on the current checkout, from the command the result recorded (``argv``, else ``command``): the
study script it names (where it is now, :func:`study_script`: a script of the old flat ``benchmarks/`` by its
place in the folders by kind) is imported and run by :func:`harness.main` with that command's flags, its arms, the
seeds asked for and a temporary ``--runs`` and ``--results`` (``--runs DIR`` keeps them). Then it prints, per arm
and seed, the stored value, the new one and their difference, and exits 1 when any difference exceeds ``--tolerance``
(default :data:`TOLERANCE`: a study whose runs are deterministic on one machine reproduces bit for bit; pass a
larger one across machines or library versions) or an arm's rerun failed; 2 when the rerun was refused (a dirty
tree: ``--allow-dirty``; a changed artifact) or cannot be made.

A recorded flag whose value names a folder of the machine that made the result (``--tables <tables>``: issue 67's
relative paths) must be given again after the study folder (``--tables PATH``); any other study flag given there
replaces the recorded one. The recorded switches that stop training (``--report-only``, ``--dry-run``,
``--prepare-only``, ``--resume``) and the folder flags are dropped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .cli import main as run_study
from .study import Study
from .where import HERE, root

# Where each script of the flat benchmarks/ folder went when it was sorted by kind (issue 68): a result.json made
# before names the old path in its ``argv`` / ``command``, and reruns the script at its new one.
MOVED = {f"benchmarks/{old}": f"benchmarks/{new}" for old, new in {
    **{f"{name}.py": f"studies/{name}.py" for name in (
        "bk", "craftax_score", "craftax_sparse", "ellm_crafter", "ellm_finetune", "ellm_lm", "glam", "lm_guidance",
        "oni", "ppo_sweep", "ptgm", "ptgm_bc")},
    **{f"{name}.py": f"costs/{name}.py" for name in (
        "envs", "envs_craftax", "glam_costs", "glam_device", "llm", "ppo", "sandbox")},
    "craftax.py": "costs/craftax_speed.py", "ray.py": "costs/ray_scale.py",
    **{f"{name}.py": f"analyses/{name}.py" for name in (
        "bk_quality", "check_claims", "demo", "expert", "glam_curve", "glam_prior", "lm_knowledge", "oni_agreement",
        "oni_label_agreement", "oni_rollouts", "oni_tasks", "ptgm_analysis")},
    "glam_gpu.sh": "tools/glam_gpu.sh", "harness_reproduce.py": "harness/reproduce.py",
}.items()}
KINDS = ("studies", "costs", "analyses", "tools")   # benchmarks/<kind>/: the folders a script is searched in
TOLERANCE = 1e-6
SWITCHES = ("--resume", "--report-only", "--dry-run", "--prepare-only", "--replace-report", "--allow-dirty",
            "--allow-mixed")                                  # recorded switches a rerun drops
FOLDERS = ("--runs", "--out", "--prep", "--results", "--notes", "--seeds", "--arms", "--study", "--variant")
PLACEHOLDER = re.compile(r"<[\w-]+>")                         # a machine's folder, named by relpaths/relativize


class ReproduceError(Exception):
    """The rerun cannot be made (one line naming the flag or file)."""


def _load(name: str, path: Path) -> Any:
    """The module at ``path`` as ``name``, its folder on sys.path while it loads (a study script imports its
    siblings: ``from ellm_crafter import COMMON``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    added = str(path.parent) not in sys.path
    if added:
        sys.path.append(str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        if added:
            sys.path.remove(str(path.parent))
    return module


def recorded_argv(result: dict[str, Any]) -> list[str]:
    """The command line that made the result: ``argv``, else ``command`` split at single spaces (the inverse of the
    join that wrote it, an empty argument included, as long as no argument held a space)."""
    argv = result.get("argv") or str(result.get("command") or "").split(" ")
    if not argv or not argv[0].endswith(".py"):
        raise ReproduceError(f"result.json records no study command (produced_by {result.get('produced_by')!r}, "
                             f"command {result.get('command')!r}): it was not made by a harness study script")
    return [str(a) for a in argv]


def study_script(token: str) -> Path:
    """The study script a recorded command names, where it is now: a repository path (``benchmarks/studies/bk.py``),
    one that moved (:data:`MOVED`: ``benchmarks/bk.py``), or a file name run from ``benchmarks/`` or a folder of it
    (``glam.py``), found in the folders by kind (:data:`KINDS`)."""
    checkout = root()
    token = token.removeprefix("./")
    name = Path(MOVED.get(token) or MOVED.get(f"benchmarks/{token}") or token).name
    for path in (checkout / token, checkout / MOVED.get(token, token), *(HERE / kind / name for kind in KINDS)):
        if path.is_file():
            return path
    raise ReproduceError(f"the recorded command's script {token} is not in this checkout")


def _flag(token: str) -> str:
    return token.split("=", 1)[0] if token.startswith("--") else ""


def rerun_argv(recorded: list[str], extra: list[str], fixed: list[str]) -> list[str]:
    """The recorded flags without :data:`SWITCHES` and :data:`FOLDERS` (and their values), a flag that ``extra``
    gives again without its recorded value, then ``extra``, then ``fixed`` (this rerun's folders, seeds, arms)."""
    dropped = {*FOLDERS, *(_flag(t) for t in extra)} - {""}
    out: list[str] = []
    skipping = False   # the values of a dropped flag: up to the next flag
    for i, token in enumerate(recorded):
        flag = _flag(token)
        if flag:
            skipping = flag in dropped and "=" not in token
            if flag in SWITCHES or flag in dropped:
                continue
        elif skipping:
            skipping = _flag(recorded[i - 1]) not in FOLDERS   # a folder flag has one value, a study's may have more
            continue
        if PLACEHOLDER.search(token):
            owner = next((recorded[j] for j in range(i, -1, -1) if recorded[j].startswith("--")), "an argument")
            raise ReproduceError(f"the recorded command's {_flag(owner) or owner} is {token}, a folder of the machine "
                                 f"that made the result: give it again after the study folder "
                                 f"({_flag(owner) or owner} PATH)")
        out.append(token)
    return [*out, *extra, *fixed]


def parse_seed_list(text: str) -> list[int]:
    """``0`` -> [0]; ``0,2`` -> [0, 2]; ``1-3`` -> [1, 2, 3] (stored seeds, never a count)."""
    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, dash, high = part.partition("-")
        seeds += list(range(int(low), int(high) + 1)) if dash and low else [int(part)]
    if not seeds:
        raise ValueError(text)
    return seeds


def seed_list_arg(text: str) -> list[int]:
    try:
        return parse_seed_list(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} names no seed: a list (0,2) or a range (0-4)") from None


def stored_values(result: dict[str, Any]) -> dict[str, dict[int, float]]:
    """``{arm: {seed: value}}`` of the arms that have values (a failed arm has none)."""
    return {arm: dict(zip(data.get("seeds", []), data.get("values", []), strict=False))
            for arm, data in (result.get("arms") or {}).items() if data.get("values")}


def compare(stored: dict[str, dict[int, float]], new: dict[str, dict[int, float]], seeds: list[int],
            tolerance: float) -> tuple[list[str], list[str]]:
    """The printed table (arm, seed, stored, new, difference) and the (arm, seed) beyond ``tolerance`` or missing."""
    rows = [f"{'arm':<28} {'seed':>4} {'stored':>14} {'new':>14} {'difference':>12}"]
    bad = []
    for arm, values in stored.items():
        for seed in seeds:
            old, now = values.get(seed), new.get(arm, {}).get(seed)
            if old is None:
                continue
            if now is None:
                rows.append(f"{arm:<28} {seed:>4} {old:>14.6g} {'(no value)':>14} {'':>12}")
                bad.append(f"{arm} seed {seed} (no value: the rerun failed)")
                continue
            same_nan = math.isnan(old) and math.isnan(now)
            diff = 0.0 if same_nan else now - old
            rows.append(f"{arm:<28} {seed:>4} {old:>14.6g} {now:>14.6g} {diff:>+12.3e}")
            if not abs(diff) <= tolerance:
                bad.append(f"{arm} seed {seed} ({diff:+.3g})")
    return rows, bad


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/harness --reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reproduce", type=Path, required=True, metavar="RESULTS/<study>/<variant>",
                   help="the stored study variant (its result.json)")
    p.add_argument("--seeds", type=seed_list_arg, default=None,
                   help="stored seeds to rerun: a list 0,2 or a range 0-4 (default: the first stored seed)")
    p.add_argument("--arms", default=None, help="a comma-separated subset of the stored arms (default: every arm)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE,
                   help=f"largest |new - stored| accepted (default {TOLERANCE:g}: bit for bit up to float printing)")
    p.add_argument("--runs", type=Path, default=None,
                   help="keep the rerun's runs and results here (default: a temporary folder, removed after)")
    p.add_argument("--allow-dirty", action="store_true", help="rerun from uncommitted changes (the harness's flag)")
    return p


def rerun(result: dict[str, Any], argv: list[str], runs: Path) -> tuple[int, Path]:
    """Run the recorded study with ``argv`` into ``runs``; its exit code and the new result.json."""
    script = study_script(recorded_argv(result)[0])
    study = getattr(_load(f"reproduce_{script.stem}", script), "STUDY", None)
    if not isinstance(study, Study):
        raise ReproduceError(f"{script} defines no STUDY (a harness.Study): not a harness study script")
    code = run_study(study, argv)
    return code, runs / "results" / str(result["study"]) / str(result["variant"]) / "result.json"


def main(argv: list[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    path = args.reproduce / "result.json" if args.reproduce.is_dir() else args.reproduce
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        print(f"harness --reproduce: {path}: {err}", file=sys.stderr)
        return 2
    stored = stored_values(result)
    arms = [a for a in (args.arms.split(",") if args.arms else stored) if a]
    control = result.get("control")
    seeds = args.seeds or sorted({s for v in stored.values() for s in v})[:1]
    unknown = [a for a in arms if a not in stored] + [f"seed {s}" for s in seeds if not any(s in v for v in stored.values())]
    if unknown:
        print(f"harness --reproduce: --arms/--seeds: {', '.join(map(str, unknown))} not stored in {path} "
              f"(arms {list(stored)}, seeds {sorted({s for v in stored.values() for s in v})})", file=sys.stderr)
        return 2
    runs = args.runs.resolve() if args.runs else Path(tempfile.mkdtemp(prefix="reproduce-"))
    run_arms = [control, *[a for a in arms if a != control]] if control in stored else arms
    fixed = ["--runs", str(runs / "runs"), "--results", str(runs / "results"), "--seeds",
             ",".join(map(str, seeds)) + ",", "--arms", ",".join(run_arms), "--study", str(result["study"]),
             "--variant", str(result["variant"]), "--allow-mixed",   # a temporary report: HEAD may move meanwhile
             *(["--allow-dirty"] if args.allow_dirty else [])]
    try:
        study_argv = rerun_argv(recorded_argv(result)[1:], extra, fixed)
        print(f"reproduce {result['study']}/{result['variant']}: seeds {seeds}, arms {run_arms}, tolerance "
              f"{args.tolerance:g}; rerun: {recorded_argv(result)[0]} {' '.join(study_argv)}", flush=True)
        code, new_path = rerun(result, study_argv, runs)
        if code == 2:
            return 2   # refused (dirty tree, changed artifact, ...): the harness said why
        new = stored_values(json.loads(new_path.read_text())) if new_path.is_file() else {}
    except ReproduceError as err:
        print(f"harness --reproduce: {err}", file=sys.stderr)
        return 2
    finally:
        if args.runs is None:
            shutil.rmtree(runs, ignore_errors=True)
    rows, bad = compare({a: stored[a] for a in run_arms}, new, seeds, args.tolerance)
    print("\n".join(rows))
    if bad:
        print(f"reproduce: {len(bad)} value(s) differ from the stored ones by more than {args.tolerance:g} or are "
              f"missing: " + ", ".join(bad), file=sys.stderr)
        return 1
    print(f"reproduce: every value within {args.tolerance:g} of the stored one")
    return 0
