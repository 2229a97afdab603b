#!/usr/bin/env bash
# Third H200 lease (2026-11-27), last call, as fixed after it: join the payload (the GGUF and the wheels, one tar
# split into six 47 MiB parts carried by six calls, since the tracked tree takes 15 of each call's 64 MiB), install,
# convert, then GLAM vs NPAE on GoToLocal, 3 seeds each, six runs at once, each stopped after $1 s.
# Fixes after that lease (which produced no record): glam_gpu.sh calls `python`, and a symlink to the image's venv
# python3 loses the venv's packages (use a wrapper); PyYAML travels as a wheel (.gd7); the runs sit under a hard
# deadline ($1 + 40 s; setup takes ~100 s, so give the call timeout_s >= $1 + 200), and their metrics are copied
# to $OUT every 30 s, so a call that runs out of time still returns what the runs logged.
# Payload, built here: g.gguf (the embedded GGUF) and whl/ (gymnasium, minigrid, pygame-ce, hydra-core, omegaconf,
# antlr4, gguf, Farama-Notifications, transformers 5.24) in one tar, `split -b 47M -d -a 1 payload.tar pp`, part
# ppN in the ignored folder .gd<N+1>; calls 1-5 copy .gdN/pp* to /tmp/parts (carry [".gdN"]), this is call 6
# (carry [".gd6", ".gd7"]; .gd6 also holds this script). A new payload has a new sha256: change it below.
set -u
secs=${1:-300}; mb=${2:-64}
export PYTHONUNBUFFERED=1
mkdir -p /tmp/bin && printf "%s\n" "#!/bin/sh" "exec $(command -v python3) \"\$@\"" > /tmp/bin/python && chmod +x /tmp/bin/python && export PATH=/tmp/bin:$PATH
cp .gd6/pp5 /tmp/parts/; cat /tmp/parts/pp0 /tmp/parts/pp1 /tmp/parts/pp2 /tmp/parts/pp3 /tmp/parts/pp4 /tmp/parts/pp5 > /tmp/payload.tar
echo "16bc4cc58b680c794daba7aad88c11d6a8805cb3896f7225eadefdad9ed99a4d  /tmp/payload.tar" | sha256sum -c || exit 3
mkdir -p /tmp/pl && tar xf /tmp/payload.tar -C /tmp/pl || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/pl/whl/*.whl .gd7/*.whl || exit 4
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import yaml, omegaconf, hydra, minigrid, gymnasium, llmguide.cli" || exit 6
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
python3 -c "from pathlib import Path; from llmguide.llm.hf import convert_gguf; convert_gguf(Path('/tmp/pl/g.gguf'), Path('/tmp/gemma-3-270m'))" || exit 5
rm -rf /tmp/glamruns; mkdir -p $OUT/train
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > $OUT/gpu_memory.csv 2>&1 &
smi=$!
( while sleep 30; do for f in /tmp/glamruns/*/metrics.jsonl; do [ -f "$f" ] && cp "$f" "$OUT/train/$(basename "$(dirname "$f")").metrics.jsonl"; done; done ) &
sync=$!
PARALLEL=6 MINIBATCH=$mb timeout -k 10 $((secs + 40)) bash benchmarks/tools/glam_gpu.sh /tmp/gemma-3-270m /tmp/glamruns "$secs" 3
kill $smi $sync
for f in $(find /tmp/glamruns -name metrics.jsonl); do cp "$f" "$OUT/train/$(basename $(dirname $f)).metrics.jsonl"; done
tar czf $OUT/logs.tgz -C /tmp/glamruns $(cd /tmp/glamruns && ls *.log)
for f in $OUT/train/*.jsonl; do echo "$f $(wc -l < $f) $(tail -1 $f | cut -c1-300)"; done
