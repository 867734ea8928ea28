#!/usr/bin/env bash
# Distributed training on CPU: throughput and per-rank peak memory of `tfm train` on the demo
# config (3.7M parameters) for 1, 2 and 4 processes under tfmrun, FSDP and tensor parallel, with
# the same global batch (16 rows x 256 tokens) and 6 steps; prints JSON. The processes share this
# machine's cores, so the figures show the cost of the collectives, not a speedup.
#   bench/distributed_train.sh [BUILD_DIR]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # NAME PROCESSES TP FSDP
  local name=$1 n=$2 tp=$3 fsdp=$4
  "$build/tfmrun" --nproc_per_node "$n" --master_port $((29600 + 10 * n + tp)) \
    /usr/bin/time -f "peak_rss_kb %M" "$build/tfm" train --model demo/qwen3-shakespeare.json \
    --tokenizer demo/tokenizer --data data/tinyshakespeare/input.txt --sample_by document \
    --max_length 256 --per_device_train_batch_size $((16 / fsdp)) --max_steps 6 \
    --logging_steps 1 --save_steps 0 --learning_rate 1e-3 --disable_tqdm --device cpu \
    --output_dir "$work/$name" --tp-size "$tp" --fsdp-size "$fsdp" > "$work/$name.log" 2>&1
}

run one 1 1 1
run fsdp2 2 1 2
run tp2 2 2 1
run fsdp4 4 1 4
run tp2_fsdp2 4 2 2
python3 - "$work" <<'PY'
import json, os, re, sys
work = sys.argv[1]
out = {}
for name in ["one", "fsdp2", "tp2", "fsdp4", "tp2_fsdp2"]:
    logs = [json.loads(l) for l in open(os.path.join(work, name, "logs.jsonl"))]
    final = [l for l in logs if "train_tokens_per_second" in l][0]
    steps = [l for l in logs if "loss" in l]
    rss = [int(m) / 1024 for m in re.findall(r"peak_rss_kb (\d+)", open(os.path.join(work, name + ".log")).read())]
    out[name] = {"tokens_per_s": final["train_tokens_per_second"],
                 "step_s": final["train_runtime"] / len(steps),
                 "loss_step6": steps[-1]["loss"],
                 "peak_rss_mib_per_rank": max(rss)}
base = out["one"]
for v in out.values():
    v["peak_rss_vs_one_process"] = v["peak_rss_mib_per_rank"] / base["peak_rss_mib_per_rank"]
print(json.dumps(out, indent=2))
PY
