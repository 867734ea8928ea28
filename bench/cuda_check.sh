#!/usr/bin/env bash
# On the H200 machine (no package registry there): builds tfm with the CUDA backend for sm_90,
# runs the CUDA tests, and benchmarks a Qwen3-0.6B-shaped checkpoint (random bf16 weights made
# there with its transformers) against transformers + torch on the same GPU, runs NCCL in a world
# of one rank, and times a training step of that model against transformers. Writes logs and JSON
# into OUTDIR (seven files, as the device tool brings back eight at most; the NCCL and training
# figures go into stages.log, the benchmarks' own logs into bench.log). Each stage has its own time
# limit and they run most important first, so a run cut at 8 minutes loses the least.
#   bench/cuda_check.sh OUTDIR [DEBS_DIR]
# DEBS_DIR holds the Debian 12 packages the build needs (tools/download_cuda_debs.sh fetches them
# on a Debian machine); they are unpacked into /tmp/deps, never into /. With the device tool:
#   run(command="bash bench/cuda_check.sh $OUT .debs", carry=[".debs"], timeout_s=480)
set -uo pipefail
source "$(dirname "$0")/cuda_env.sh"

start_checkpoint

stage build
build_targets tfm tfmrun tfm_backends_tests tfm_models_tests tfm_generation_tests tfm_core_tests \
  tfm_training_tests generate_bench collectives_bench train_bench step_memory_bench
echo "build exit $?" | tee -a "$out/stages.log"
grep "tfm: " "$out/build.log" >> "$out/stages.log"
wait $checkpoint

stage tests
export TFM_BIN=$PWD/$build/tfm
for t in core backends models generation training; do
  timeout 60 "$build/tests/tfm_${t}_tests" --gtest_filter='*Cuda*:*cuda*:Device*' \
    >> "$out/tests.log" 2>&1
  echo "tests $t exit $?" | tee -a "$out/stages.log"
done

stage nccl
# A world of one rank (the machine has one GPU), started by the launcher as a job would be.
timeout 60 "$build/tfmrun" --nproc_per_node 1 "$build/bench/collectives_bench" --device cuda \
  --mib 16,256,1024 >> "$out/stages.log" 2>&1
echo "nccl bench exit $?" | tee -a "$out/stages.log"

stage tfm-bench
timeout 100 "$build/bench/generate_bench" "$model" --device cuda --dtype bf16 --new-tokens 64 \
  --prefill 128,1024 --batches 1,16 > "$out/tfm.json" 2>> "$out/bench.log"
echo "tfm bench exit $?" | tee -a "$out/stages.log"

stage transformers-bench
timeout 170 python3 bench/anchor_transformers.py "$model" --device cuda --new-tokens 64 \
  --prefill 128,1024 --batches 1,16 > "$out/transformers.json" 2>> "$out/bench.log"
echo "transformers bench exit $?" | tee -a "$out/stages.log"
stage train-bench
# Training a Qwen3-0.6B-shaped model from fresh weights, 8 x 1024 tokens, bf16 autocast; the
# anchor eager (torch.compile's first step alone takes minutes there). JSON into stages.log.
timeout 120 "$build/bench/train_bench" "$model/config.json" --device cuda --bf16 --batch 8 \
  --seq 1024 --steps 5 >> "$out/stages.log" 2>&1
# What the plan says the step needs, beside the peak the run measured.
"$build/bench/step_memory_bench" "$model/config.json" --batch 8 --seq 1024 --bf16 \
  >> "$out/stages.log" 2>&1
echo "tfm train bench exit $?" | tee -a "$out/stages.log"
# The same with the flash backward's dq kernel running the products again instead of reading the
# scores' gradients the dk/dv kernel saved (budget 0), and with those saved two batch rows at a
# time (64 MiB: 36 MB of tiles written, then read, within the 60 MB L2), then with attention's
# backward pass as cuBLASLt products instead of the flash kernels.
for mib in 0 64; do
  echo "train bench, --saved-ds-mib $mib:" >> "$out/stages.log"
  timeout 90 "$build/bench/train_bench" "$model/config.json" --saved-ds-mib $mib \
    --device cuda --bf16 --batch 8 --seq 1024 --steps 5 >> "$out/stages.log" 2>&1
  echo "tfm train bench, saved dS budget $mib MiB, exit $?" | tee -a "$out/stages.log"
done
echo "train bench, attention backward as cuBLASLt products:" >> "$out/stages.log"
timeout 90 "$build/bench/train_bench" "$model/config.json" --device cuda --no-flash-grad \
  --bf16 --batch 8 --seq 1024 --steps 5 >> "$out/stages.log" 2>&1
echo "tfm train bench, products backward, exit $?" | tee -a "$out/stages.log"
timeout 90 python3 bench/anchor_train.py "$model/config.json" --device cuda --bf16 --batch 8 \
  --seq 1024 --steps 5 >> "$out/stages.log" 2>&1
echo "transformers train bench exit $?" | tee -a "$out/stages.log"

stage decode-profile
# Last, as the least needed: where a batch-1 decode step's GPU time goes, kernel by kernel
# (--profile 1: the steps run one by one between events, without the overlap), into bench.log;
# bench/cuda_profile.sh has the fuller profiles.
echo "decode profile, batch 1 (--profile 1):" >> "$out/bench.log"
timeout 40 "$build/bench/generate_bench" "$model" --device cuda --dtype bf16 \
  --new-tokens 3 --prefill 128 --batches 1 --profile 1 >> "$out/bench.log" 2>&1
echo "decode profile exit $?" | tee -a "$out/stages.log"
stage done
