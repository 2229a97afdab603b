"""Every method of ``conf/method/`` end to end at a tiny budget on its default env: the offline steps it needs
first (collect, label, codebook, pretrain; ``llm=oracle`` wherever an LM answers, a tiny random T5 as GLAM's
policy LM), then ``train``; the run directory holds the Runner's artefacts.  A method YAML without a row in
:data:`SMOKE` fails :func:`test_every_method_has_a_smoke_run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmguide.core.config import group_options
from llmguide.core.errors import ConfigError
from llmguide.data import EpisodeDataset
from llmguide.pipelines import load_config
from llmguide.pipelines import run as run_verb
from llmguide.pipelines.collect import Collection, explore

ARTEFACTS = {"config.yaml", "metrics.jsonl", "tb", "checkpoints", "eval.json", "report.md"}
COMMON = ["progress=false", "eval.episodes=1", "log_every=64"]
CRAFTER = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.hidden=32",
           "total_steps=128"]
MINIHACK = ["env=minihack", "env.id=MiniHack-KeyRoom-S5-v0", "env.max_steps=40", "num_envs=2", "agent.num_steps=32",
            "agent.hidden=32", "total_steps=128", "llm=oracle"]
BABYAI = ["env=babyai", "env.max_steps=32", "num_envs=2"]
BK = [*BABYAI, "agent.num_steps=32", "agent.hidden=32", "env.task=GoToLocal-RedBall-S20", "total_steps=128"]
PTGM = [*BABYAI, "agent.image_encoder=flat", "method.codebook.k=4", "method.lowlevel.epochs=1", "method.prior.epochs=1",
        "method.lowlevel.hidden=32", "method.prior.hidden=32", "method.lowlevel.gate.enforce=false"]   # tiny data
PTGM_TRAIN = [*PTGM, "env.task=BabyAI-UnlockPickup-v0", "agent.hidden=32", "total_steps=64"]
GLAM = [*BABYAI, "num_envs=1", "env.task=GoToRedBall", "env.max_steps=4", "llm=hf", "total_steps=4",
        "agent.num_steps=4", "agent.num_minibatches=2", "method.value_hidden=8"]

# method -> (its offline steps: a key of SETUPS or None; the train overrides)
SMOKE: dict[str, tuple[str | None, list[str]]] = {
    **{m: (None, CRAFTER) for m in ("none", "rnd", "noveld", "icm", "apt", "ellm_oracle", "ellm_all_goals")},
    "ellm": (None, [*CRAFTER, "llm=oracle"]),
    # bow: MiniLM would embed the 139 action-string goals again on every step (~0.3 s each; ellm covers MiniLM)
    "ellm_novelty": (None, [*CRAFTER, "env.actions=text", "method.embedder=bow"]),
    **{m: (None, MINIHACK) for m in ("oni_retrieval", "oni_classification", "oni_ranking", "ellm_bow")},
    "motif": ("motif", MINIHACK),
    **{m: ("bk", BK) for m in ("bk_code", "bk_pref", "bk_goal")},
    "bk_random_phi": (None, BK),   # the knowledge control needs no collect / label
    "drrn": (None, [*BABYAI, "env.task=GoToRedBall", "total_steps=64"]),
    **{m: ("glam", GLAM) for m in ("glam", "npae")},
    "ptgm": ("ptgm", [*PTGM_TRAIN, "agent.num_steps=4"]),
    "ptgm_no_kl": ("ptgm", [*PTGM_TRAIN, "agent.num_steps=4"]),
    "ptgm_random_codes": ("ptgm", [*PTGM_TRAIN, "agent.num_steps=4"]),
    "ptgm_bc_finetune": ("ptgm", [*PTGM_TRAIN, "agent.num_steps=32"]),
}
SLOW = {"bk_code", "bk_pref", "bk_goal", "glam", "npae"}   # LM-written code in the sandbox, MiniLM; transformers


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("smoke")


def run(verb: str, *overrides: str) -> None:
    assert run_verb(verb, load_config([*COMMON, *overrides])) in (0, None)


def assert_collect_run(path: Path, collector: str) -> dict:
    """A collect step's run directory: config, the agent's metrics, episodes in the documented format, summary."""
    assert {"config.yaml", "metrics.jsonl", "dataset", "collect_summary.json"} <= {p.name for p in path.iterdir()}
    summary = json.loads((path / "collect_summary.json").read_text())
    assert summary["collector"] == collector and summary["episodes"] == len(EpisodeDataset(path)) > 0
    return summary


# --- the offline steps, once per family of methods -------------------------------------------------------------
def _bk(root: Path, method: str) -> list[str]:
    """BK: one collected dataset (Pretraining-S20), labels of ``method`` by the oracle."""
    data = root / "bk-data"
    if not (data / "collect_summary.json").exists():
        run("collect", *BABYAI, "env.max_steps=64", "env.task=Pretraining-S20", "method=bk_code", "agent.num_steps=64",
            "agent.hidden=32", "total_steps=768", f"run.dir={root}", "run.name=bk-data")
        assert_collect_run(data, "ppo+rnd")
    extra = {"bk_code": ["method.code.iterations=1"], "bk_goal": ["method.goal.iterations=2"],
             "bk_pref": ["method.pref.num_pairs=60", "method.pref.min_usable=10", "method.pref.epochs=2"]}[method]
    run("label", *BK, f"method={method}", "llm=oracle", f"method.data={data}", f"run.dir={root}",
        f"run.name=labels-{method}", *extra)
    return [f"method.labels={root / f'labels-{method}'}"]


def _ptgm(root: Path, method: str) -> list[str]:
    """PTGM: bot episodes → codebook → pretrained low level and priors, once for every PTGM arm."""
    if not (root / "ptgm-pre" / "ptgm" / "manifest.json").exists():
        base = [*PTGM, "method=ptgm", f"run.dir={root}", f"method.data={root / 'ptgm-data'}"]
        run("collect", *base, "method.collect.episodes=8", "run.name=ptgm-data")
        assert (root / "ptgm-data" / "config.yaml").exists() and EpisodeDataset(root / "ptgm-data").stats()["episodes"]
        run("codebook", *base, "run.name=ptgm-codes")
        run("pretrain", *base, f"method.codebook.run={root / 'ptgm-codes'}", "run.name=ptgm-pre")
    return [f"method.pretrained={root / 'ptgm-pre'}"]


def _motif(root: Path, method: str) -> list[str]:
    """Motif: the collector's messages → oracle preferences (the reward model is fitted by ``train``)."""
    data = [f"method.data_dir={root / 'motif-data'}", "method.collect_steps=128", "method.num_pairs=8",
            "method.label_batch=4"]
    run("collect", *MINIHACK, "method=motif", *data, f"run.dir={root}")
    assert_collect_run(root / "motif-data", "ppo+rnd")
    run("label", *MINIHACK, "method=motif", *data, f"run.dir={root}")
    return data


def _glam(root: Path, method: str) -> list[str]:
    """GLAM / NPAE: a tiny random T5 (the embedded Gemma's tokenizer) as the policy LM."""
    import shutil

    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from conftest import embedded_hf_ready
    from llmguide.llm.backends.hf import embedded_safetensors_dir

    if not embedded_hf_ready():
        pytest.skip("embedded Gemma not converted to safetensors yet (its tokenizer is the T5's)")
    model = root / "t5"
    if not (model / "config.json").exists():
        torch.manual_seed(0)
        T5ForConditionalGeneration(T5Config(vocab_size=262144, d_model=16, d_ff=32, d_kv=8, num_layers=1,
                                            num_heads=2, decoder_start_token_id=0, pad_token_id=0,
                                            eos_token_id=1)).save_pretrained(model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(embedded_safetensors_dir() / name, model / name)
    return [f"llm.model_path={model}"]


SETUPS = {"bk": _bk, "ptgm": _ptgm, "motif": _motif, "glam": _glam}


def test_every_method_has_a_smoke_run():
    assert set(group_options("method")) <= set(SMOKE), "add the new method to SMOKE in tests/test_methods_smoke.py"


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m
                                    for m in group_options("method") if m in SMOKE])
def test_method_trains_end_to_end_and_writes_every_artefact(root, method):
    setup, overrides = SMOKE[method]
    extra = SETUPS[setup](root, method) if setup else []
    run("train", *overrides, f"method={method}", *extra, f"run.dir={root}", f"run.name={method}")
    out = root / method
    assert ARTEFACTS <= {p.name for p in out.iterdir()}, sorted(p.name for p in out.iterdir())
    assert (out / "checkpoints" / "latest.pt").exists() and any((out / "tb").iterdir())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records, "no metrics"
    result = json.loads((out / "eval.json").read_text())
    assert result["step"] > 0 and result["episodes"] == 1
    assert "# " in (out / "report.md").read_text()


def test_ellm_finetunes_from_its_pretrained_run(root):
    """ELLM's two-stage mode: a Crafter task fine-tuned from the pretrained ``ellm`` smoke run."""
    if not (root / "ellm" / "checkpoints" / "latest.pt").exists():
        run("train", *CRAFTER, "llm=oracle", "method=ellm", f"run.dir={root}", "run.name=ellm")
    run("train", *CRAFTER, "llm=oracle", "method=ellm", "method.mode=finetune", f"method.pretrained={root / 'ellm'}",
        "env.task=place_table", f"run.dir={root}", "run.name=ellm-finetune")
    assert ARTEFACTS <= {p.name for p in (root / "ellm-finetune").iterdir()}


def _arrays(path: Path) -> list[dict]:
    return [{"obs": {k: v.tolist() for k, v in e.obs.items()}, "actions": e.actions.tolist(),
             "rewards": e.rewards.tolist(), "captions": e.captions, "events": e.events} for e in EpisodeDataset(path)]


def test_the_collector_takes_any_intrinsic_reward_and_the_same_seed_gives_the_same_data(tmp_path):
    """``method.collect.intrinsic`` names a reward module (here NovelD); the same seed collects the same episodes."""
    base = [*BABYAI, "env.task=GoToRedBall", "method=bk_code", "agent.num_steps=32", "agent.hidden=32",
            "total_steps=128", f"run.dir={tmp_path}"]
    for name in ("a", "b"):
        run("collect", *base, "method.collect.intrinsic=noveld", f"run.name={name}")
    assert assert_collect_run(tmp_path / "a", "ppo+noveld")["steps"] == 128
    assert any("reward/noveld/" in key for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
               for key in json.loads(line))
    assert _arrays(tmp_path / "a") == _arrays(tmp_path / "b")
    run("collect", *base, "method.collect.intrinsic=none", "run.name=c")
    assert assert_collect_run(tmp_path / "c", "ppo")["steps"] == 128
    with pytest.raises(ConfigError, match="method.collect.intrinsic"):
        run("collect", *base, "method.collect.intrinsic=bogus", "run.name=d")
    seen: list = []   # policy=random (Motif's other collection policy): uniform actions, every step's infos seen
    summary = explore(load_config([*COMMON, *base, "run.name=r"]), Collection(steps=64, policy="random"), seen.append)
    assert summary["collector"] == "random" and summary["steps"] == 64 and len(seen) == 32 and len(seen[0]) == 2
    assert summary["episodes"] == 2   # env.max_steps=32: each env's episode ends at the time limit
