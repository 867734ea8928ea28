#!/usr/bin/env bash
# tfm vs transformers training on CPU, same config (the demo model's), same batch and steps;
# prints both and the ratios with the CPU's ISA.
#   bench/cpu_train.sh [--bf16] [--rounds N] [BUILD_DIR] [CONFIG_JSON]
# --bf16: both train under bf16 autocast (tfm's --bf16, torch.autocast). --rounds N (default 1)
# alternates N processes of each, one after the other, so a shared machine's swings fall on both;
# each round's ratio is printed, and the median.
set -euo pipefail
precision=()
rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --bf16) precision=(--bf16); shift ;;
    --rounds)
      [ $# -ge 2 ] && [ "$2" -ge 1 ] 2>/dev/null || { echo "cpu_train.sh: --rounds needs a count >= 1" >&2; exit 1; }
      rounds=$2; shift 2 ;;
    --*) echo "cpu_train.sh: unknown flag $1" >&2; exit 1 ;;
    *) break ;;
  esac
done
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
config=${2:-$here/../demo/qwen3-shakespeare.json}
args=("$config" --batch 16 --seq 256 --steps 8 "${precision[@]}")
runs=()
for _ in $(seq "$rounds"); do
  tfm=$("$build/bench/train_bench" "${args[@]}")
  hf=$(python3 "$here/anchor_train.py" "${args[@]}")
  runs+=("$tfm" "$hf")
done
. "$here/cpu_identity.sh"
python3 - "$cpu" "$isa" "${runs[@]}" <<'PY'
import json, statistics, sys
cpu, isa, runs = sys.argv[1].strip(), sys.argv[2].strip(), [json.loads(r) for r in sys.argv[3:]]
rounds = [{"tfm": runs[i], "transformers": runs[i + 1],
           "tokens_per_s_speedup": runs[i]["tokens_per_s"] / runs[i + 1]["tokens_per_s"],
           "peak_rss_ratio": runs[i]["peak_rss_mib"] / runs[i + 1]["peak_rss_mib"]}
          for i in range(0, len(runs), 2)]
print(json.dumps({"cpu": cpu, "isa": isa, "rounds": rounds,
                  "median_tokens_per_s_speedup":
                      statistics.median(r["tokens_per_s_speedup"] for r in rounds)}, indent=2))
PY
