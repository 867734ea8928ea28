#!/usr/bin/env bash
# On the H200 machine: where the GPU time goes. Builds the benches, then runs a bf16 training
# step of a Qwen3-0.6B-shaped model (8 x 1024), a 1024-token prefill with batch-1 decode, and
# batch-16 decode, each profiled (KernelOptions::profile: the time per op and shape, per compiled-graph
# run; see src/backends/cuda/step_profile.h), and torch's attention at the step's layer shape
# (bench/anchor_attention.py). Writes profile_*.txt, anchor_attention.json and stages.log into
# OUTDIR.
#   bench/cuda_profile.sh OUTDIR [DEBS_DIR]
#   run(command="bash bench/cuda_profile.sh $OUT .debs", carry=[".debs"], timeout_s=300)
set -uo pipefail
source "$(dirname "$0")/cuda_env.sh"

start_checkpoint

stage build
build_targets train_bench generate_bench
echo "build exit $?" | tee -a "$out/stages.log"
wait $checkpoint

stage train-profile
timeout 90 "$build/bench/train_bench" "$model/config.json" --device cuda --profile \
  --bf16 --batch 8 --seq 1024 --steps 1 > "$out/profile_train.txt" 2>&1
echo "train profile exit $?" | tee -a "$out/stages.log"

stage attention-anchor
# torch's flash attention at the step's layer shape, against the attention lines of profile_train.
timeout 60 python3 bench/anchor_attention.py --device cuda > "$out/anchor_attention.json" \
  2>> "$out/stages.log"
echo "attention anchor exit $?" | tee -a "$out/stages.log"

stage decode-profile
for batch in 1 16; do
  timeout 60 "$build/bench/generate_bench" "$model" --device cuda --dtype bf16 --profile 1 \
    --new-tokens 3 --prefill 1024 --batches "$batch" > "$out/profile_decode_b$batch.txt" 2>&1
  echo "decode profile batch $batch exit $?" | tee -a "$out/stages.log"
done
stage done
