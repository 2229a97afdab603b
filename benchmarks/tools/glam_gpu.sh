#!/usr/bin/env bash
# GLAM against NPAE on BabyAI-Text on one GPU: the seeds of both methods, PARALLEL runs at a time, each run
# stopped at a wall-clock limit (a lent GPU comes for minutes, not hours), so the learning curves are compared
# at equal time and their env steps are read from metrics.jsonl.  DRRN is cheap: run it on the CPU at the steps
# these runs reach (benchmarks/studies/glam.py --arms drrn --steps N).
#
#   benchmarks/tools/glam_gpu.sh MODEL_DIR OUT SECONDS [SEEDS] [TASK]
#
# MODEL_DIR: a transformers folder of Gemma 3 270M (llmguide.llm.backends.hf.convert_gguf makes one from the GGUF).
# Settings are GLAM's where the GPU allows: 32 envs, 3 observations in the prompt, 4 PPO epochs; rollouts of 16
# steps per env (GLAM: 40) so that a short lease still sees many updates; LoRA on every block; minibatch 8
# (GLAM: 64), because memory, measured on one H100 (80 GB), at 32 envs: GLAM bf16 minibatch 64 ~42 GB, NPAE fp32
# minibatch 64 ~52 GB; minibatch 8: GLAM ~14 GB, NPAE 9-17 GB, so six runs at once did not fit and four do.  Those
# figures came with a wrong tokenizer (one token per character; benchmarks/results/glam/gpu-h200/): with the right
# one a GLAM minibatch of 8 peaks at ~3 GB on an H200 and the update, 0.2 s per minibatch, sets the speed, so
# GLAM's own minibatch of 64 is the default now, in forwards of MICRO (16) prompts whose gradients accumulate into
# one optimizer step (agent.micro_batch): 4 epochs x 8 minibatches of 64 per 512-sample update, not 256 of 8.
# GLAM runs in bf16 (peft keeps the LoRA adapters in fp32); NPAE fine-tunes every weight, which Adam cannot
# do in bf16 at lr 1e-4 (most updates round away), so NPAE runs in fp32.  Every run first checks its action
# distributions against a float32 CPU copy (agent.device_check) and stops with one line if they differ.
# DEVICE=cpu DTYPE=float32 NUM_ENVS=2 ROLLOUT=2 MINIBATCH=4 MICRO=2 run the same script on a CPU for a smoke test.
# METHODS (default "glam npae") names the arms to run; EXTRA adds overrides to every run (space-separated), e.g.
# EXTRA=llm.attn_implementation=eager, the check still owed on GLAM's non-finite gradients (glam/gpu-h200-nanguard).
# MINIBATCH is prompts per gradient step: agent.num_minibatches = NUM_ENVS x ROLLOUT / MINIBATCH (divide evenly).
set -u
model=$1 out=$2 secs=$3 seeds=${4:-3} task=${5:-GoToLocal}
device=${DEVICE:-cuda} dtype=${DTYPE:-bfloat16} npae_dtype=${NPAE_DTYPE:-float32} envs=${NUM_ENVS:-32} rollout=${ROLLOUT:-16} minibatch=${MINIBATCH:-64} micro=${MICRO:-16}
parallel=${PARALLEL:-4} methods=${METHODS:-glam npae}
mkdir -p "$out"
common=(env=babyai "env.task=$task" "num_envs=$envs" llm=hf "llm.model_path=$model" "llm.device=$device"
        llm.max_batch=256 "method.score_batch=$envs" method.k_history=3
        "agent.num_steps=$rollout" agent.update_epochs=4 "agent.num_minibatches=$(( envs * rollout / minibatch > 0 ? envs * rollout / minibatch : 1 ))" "agent.micro_batch=$micro" agent.torch_threads=2
        total_steps=1500000 eval.episodes=0 progress=false "run.dir=$out" run.overwrite=true ${EXTRA:-})
runner="import sys; from llmguide.cli import main; sys.exit(main(sys.argv[1:]))"
one() {   # one run: METHOD SEED
  local precision="llm.dtype=$dtype"
  [ "$1" = npae ] && precision="llm.dtype=$npae_dtype"
  timeout -s INT -k 20 "$secs" python -c "$runner" train "${common[@]}" "method=$1" "$precision" "seed=$2" \
    "run.name=$1-s$2" > "$out/$1-s$2.log" 2>&1
}
for seed in $(seq 0 $((seeds - 1))); do
  for method in $methods; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
    one "$method" "$seed" &
  done
done
wait
for log in "$out"/*.log; do echo "== $log"; tail -3 "$log"; done
