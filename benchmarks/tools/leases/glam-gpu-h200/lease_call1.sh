#!/usr/bin/env bash
# call 5 of the lease: join the GGUF, convert, parity + timing table, then one GLAM and one NPAE run for 150 s
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cp .gw5/p5 /tmp/parts/ && cat /tmp/parts/p1 /tmp/parts/p2 /tmp/parts/p3 /tmp/parts/p4 /tmp/parts/p5 > /tmp/g.gguf
echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  /tmp/g.gguf" | sha256sum -c || exit 3
python -c "from pathlib import Path; from llmguide.llm.hf import convert_gguf; convert_gguf(Path('/tmp/g.gguf'), Path('/tmp/gemma-3-270m'))" || exit 4
nvidia-smi --query-gpu=name,memory.total --format=csv
mkdir -p $OUT/parity $OUT/train
(timeout 300 python benchmarks/costs/glam_device.py --model /tmp/gemma-3-270m --device cuda --out $OUT/parity) > $OUT/parity/log.txt 2>&1
grep -v "Loading weights" $OUT/parity/log.txt | tail -n 30
d=$(python - <<'PY'
import json, os
try:
    rows = {r["variant"]: r for r in json.load(open(os.environ["OUT"] + "/parity/result.json"))["rows"]}
    r = rows.get("bfloat16:sdpa:32", {})
    print("bfloat16" if r.get("finite") and r.get("tv_max", 1) <= 0.2 else "float32")
except Exception:
    print("float32")
PY
)
echo "training dtype: $d"
PARALLEL=2 DTYPE=$d bash benchmarks/tools/glam_gpu.sh /tmp/gemma-3-270m /tmp/glamruns 150 1
for f in $(find /tmp/glamruns -name metrics.jsonl); do cp "$f" "$OUT/train/$(basename $(dirname $f)).metrics.jsonl"; done
cp /tmp/glamruns/*.log $OUT/train/ 2>/dev/null
ls -la $OUT/train
