#!/usr/bin/env bash
# second lease call: transformers 5.17 (the device's) vs 5.24 (this box's): conversion x model code, CPU float32;
# then the GPU parity table and a short GLAM run with 5.24
set -u
export PYTHONUNBUFFERED=1
S=/tmp/site:$PWD/src
cp .gw5/p5 /tmp/parts/ && cat /tmp/parts/p1 /tmp/parts/p2 /tmp/parts/p3 /tmp/parts/p4 /tmp/parts/p5 > /tmp/g.gguf
echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/g.gguf" | sha256sum -c || exit 3
conv='import sys; from pathlib import Path; from llmguide.llm.hf import convert_gguf; convert_gguf(Path("/tmp/g.gguf"), Path(sys.argv[1]))'
PYTHONPATH=$S python -c "$conv" /tmp/m517 > /dev/null 2>&1 || echo "convert 5.17 failed"
PYTHONPATH=/tmp/tf524:$S python -c "$conv" /tmp/m524 > /dev/null 2>&1 || echo "convert 5.24 failed"
mkdir -p $OUT/parity524 $OUT/train
for code in 517 524; do for m in m517 m524; do
  pp=$S; [ $code = 524 ] && pp=/tmp/tf524:$S
  PYTHONPATH=$pp timeout 45 python /tmp/gw6/xver.py /tmp/$m 2>&1 | grep -a "XVER\|Error" | tail -n 2
done; done | tee $OUT/parity524/xver.txt
(PYTHONPATH=/tmp/tf524:$S timeout 100 python benchmarks/costs/glam_device.py --model /tmp/m524 --device cuda --variants bfloat16:sdpa:32,float32:sdpa:32 --out $OUT/parity524) > $OUT/parity524/log.txt 2>&1
grep -av "Loading" $OUT/parity524/log.txt | tail -n 8
PYTHONPATH=/tmp/tf524:$S timeout -s INT -k 10 100 python -c "import sys; from llmguide.cli import main; sys.exit(main(sys.argv[1:]))" train env=babyai env.task=GoToLocal num_envs=32 llm=hf llm.model_path=/tmp/m524 llm.device=cuda llm.dtype=bfloat16 llm.max_batch=256 method=glam method.score_batch=32 method.k_history=3 agent.rollout_steps=16 agent.epochs=4 agent.minibatch=32 agent.torch_threads=2 total_steps=1500000 eval.episodes=0 progress=false run.dir=/tmp/g524runs run.name=glam-s0 run.overwrite=true seed=0 > $OUT/train/glam524.log 2>&1
cp /tmp/g524runs/glam-s0/metrics.jsonl $OUT/train/glam524.metrics.jsonl 2>/dev/null
cat $OUT/train/glam524.metrics.jsonl 2>/dev/null | head -5
grep -a "error\|Error" $OUT/train/glam524.log | tail -n 3
