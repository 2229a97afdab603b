#!/usr/bin/env bash
# Fifth H200 lease, call 9 of 9 (carry [".gd9"]): lease4_go.sh again, now that GLAMPPO.ppo_update skips a
# minibatch whose gradient is not finite. Seeds 0 and 1 only, the two that stopped on NaN losses in the fourth
# lease (at updates 2 and 13 on both tasks), so four runs share the card instead of six. Joins the GGUF (parts
# g.00-g.08 in /tmp/parts), checks its sha256, converts it with transformers 5.24, then GLAM as in the fourth
# lease (LoRA in the top 6 blocks + value head, bf16, minibatches of 64 prompts in forwards of $2, 4 epochs,
# 32 envs x 16 steps) on GoToLocal and GoToRedBall, each run stopped after $1 s. The metrics are copied to $OUT
# every 30 s, so a call that runs out of time still returns what was logged; the runs' logs hold the guard's
# warnings ("skipped ... minibatch", with the largest |log ratio|).
set -u
secs=${1:-360}; micro=${2:-64}
export PYTHONUNBUFFERED=1
mkdir -p /tmp/bin && printf "%s\n" "#!/bin/sh" "exec $(command -v python3) \"\$@\"" > /tmp/bin/python && chmod +x /tmp/bin/python && export PATH=/tmp/bin:$PATH
cp .gd9/g.* /tmp/parts/ && cat /tmp/parts/g.0[0-8] > /tmp/g.gguf || exit 3
echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/g.gguf" | sha256sum -c || exit 3
export PYTHONPATH=/tmp/site:$PWD/src
python3 -c "from pathlib import Path; from llmguide.llm.backends.gguf_convert import convert_gguf; convert_gguf(Path('/tmp/g.gguf'), Path('/tmp/gemma-3-270m'))" || exit 5
rm -rf /tmp/glamruns; mkdir -p $OUT/train /tmp/glamruns
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > $OUT/gpu_memory.csv 2>&1 &
smi=$!
copy() { for f in /tmp/glamruns/*/*/metrics.jsonl; do [ -f "$f" ] && cp "$f" "$OUT/train/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$(dirname "$f")").metrics.jsonl"; done; }
( while sleep 30; do copy; done ) &
sync=$!
pids=()
for task in GoToLocal GoToRedBall; do
  METHODS=glam EXTRA=method.lora_last_layers=6 PARALLEL=2 MICRO=$micro timeout -k 10 $((secs + 60)) bash benchmarks/tools/glam_gpu.sh /tmp/gemma-3-270m "/tmp/glamruns/$task" "$secs" 2 "$task" > "/tmp/glamruns/$task.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
kill $smi; pkill -P $sync; kill $sync
copy
tar czf $OUT/logs.tgz -C /tmp/glamruns $(cd /tmp/glamruns && ls */*.log *.out)
grep -h -i -E "skipped|non-finite|nan" /tmp/glamruns/*/*.log | cut -c1-300 | head -40
for f in $OUT/train/*.jsonl; do echo "$f $(wc -l < $f) $(grep -c success $f) $(tail -1 $f | cut -c1-250)"; done
