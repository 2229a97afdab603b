#!/usr/bin/env bash
# Fourth H200 lease, call 1 of 9: the wheels (.gd1/whl) and the GGUF's first part (.gd1/g.00). Installs the wheels,
# imports what a GLAM run imports, and runs a 64-step symbolic PPO on BabyAI-Text on the GPU machine's CPU, so a
# missing package shows up now and not after the GGUF has travelled. Calls 2-8 copy .gdN/g.* to /tmp/parts.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/parts && cp .gd1/g.* /tmp/parts/ || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gd1/whl/*.whl || exit 4
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import yaml, omegaconf, hydra, minigrid, gymnasium, peft, transformers, torch, llmguide.cli, llmguide.methods.glam.recipe; print('transformers', transformers.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" || exit 6
python3 -c "import sys; from llmguide.cli import main; sys.exit(main(sys.argv[1:]))" train env=babyai env.task=GoToRedBall method=none agent=ppo num_envs=2 total_steps=64 agent.num_steps=16 eval.episodes=0 progress=false run.dir=/tmp/smoke run.overwrite=true 2>&1 | tail -3
ls /tmp/parts
