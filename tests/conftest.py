"""Shared fixtures: a real OpenAI-compatible llama.cpp server on loopback, temp run dirs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    """Under pytest-xdist (``make test`` runs two workers on two cores) each worker and every process it starts
    computes on one thread: two workers with two threads each would fight over the two cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")


@pytest.hookimpl(tryfirst=True)   # before ``-m "not slow"`` deselects
def pytest_collection_modifyitems(config, items) -> None:
    """The tests :data:`costly.COSTLY` names are ``slow`` (left to ``make test-slow``), each for the cost it says."""
    from costly import costly_reason

    for item in items:
        if costly_reason(item.nodeid):
            item.add_marker(pytest.mark.slow)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """A ``python -m llama_cpp.server`` process serving the embedded Gemma model on 127.0.0.1."""

    port: int
    model_alias: str = "gemma-3-270m"
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> None:
        from llmguide.llm.assets import embedded_gguf_path

        log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"llama_server_{self.port}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf_path()),
             "--model_alias", self.model_alias, "--host", "127.0.0.1", "--port", str(self.port),
             "--n_ctx", "2048", "--n_threads", "2", "--logits_all", "true"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.process.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("llama_cpp.server did not come up in time")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One real server for the whole test session (restart it with .stop()/.start() in a test)."""
    server = LlamaServer(port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fresh_llama_server() -> Iterator[LlamaServer]:
    """A server owned by one test, free to be killed and restarted."""
    server = LlamaServer(port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _isolated_home_cache(tmp_path_factory, monkeypatch):
    """Keep LM caches of tests out of the user's ~/.cache/llmguide (model files stay shared)."""
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path_factory.mktemp("llmguide_cache")))


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread for a test module: several times faster on a shared 2-core machine
    (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load_benchmark(name: str):
    """A script of benchmarks/ by its name, in whichever folder by kind holds it (``load_benchmark("bk")``:
    benchmarks/studies/bk.py), or the harness package (``"harness"``: benchmarks/harness/), imported as a module.
    The script's folder is on sys.path while it loads (its ``import _path``, which puts benchmarks/ and the folders
    at the end of sys.path, and its siblings)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    package = BENCHMARKS / name / "__init__.py"
    found = [package] if package.is_file() else [
        p for p in sorted(BENCHMARKS.glob(f"*/{name}.py")) if p.parent.name != "results"]
    if len(found) != 1:
        raise ModuleNotFoundError(f"{len(found)} scripts named {name}.py in the folders of {BENCHMARKS}")
    path = found[0]
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[str(path.parent)] if path == package else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    added = path != package and folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]   # as an import does: a failed load leaves no half-made module behind
        raise
    finally:
        if added:
            sys.path.remove(folder)
    return module


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("harness")``: a benchmark script imported as a module."""
    return _load_benchmark


@pytest.fixture(scope="module")
def cx():
    """One Craftax-Classic env (a batched JAX env of 1), reset with seed 0, shared by a test module."""
    pytest.importorskip("craftax")
    from llmguide.envs.craftax.env import CraftaxVectorEnv

    env = CraftaxVectorEnv(1, seed=0, reset_ratio=1)
    env.reset(seed=0)
    return env


@pytest.fixture(scope="module")
def cr():
    """One Crafter env reset with seed 0, shared by a test module."""
    from llmguide.envs.crafter.env import CrafterText

    env = CrafterText(seed=0)
    env.reset(seed=0)
    return env


def embedded_hf_ready() -> bool:
    """The embedded Gemma as safetensors for the hf backend: converted here on first use, as ``HFLM`` converts it
    (setup no longer does); False when it cannot be (the hf extras missing)."""
    try:
        from llmguide.llm.assets import embedded_gguf_path
        from llmguide.llm.backends.hf import convert_gguf, embedded_safetensors_dir, is_converted

        target = embedded_safetensors_dir()
        if not is_converted(target):
            convert_gguf(embedded_gguf_path(), target)
        return is_converted(target)
    except (ImportError, OSError):
        return False


@pytest.fixture
def program_oracle():
    """An oracle LM whose only answerer writes a (trivial) potential program: the kind of answer the kernel's
    counterfactual LMs cannot imitate."""
    from llmguide.llm.backends.oracle import OracleLM

    class Program:
        name = "prog"

        def generate(self, prompt):
            return "```python\ndef potential(obs, caption):\n    return 0.0\n```"

        def score(self, prompt, candidates):
            return None

    return OracleLM("babyai", answerers=[Program()])
