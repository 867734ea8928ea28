"""What `import tfm` costs per decode token: the same greedy generation through the Python package
and through the `tfm generate` CLI, alternating, each run a fresh process, both timed by tfm's own
counters (decode tokens/s after the first token). Prints JSON with the CPU's ISA. Usage (from
the repo root, after `make`):

  PYTHONPATH=build/python .venv-test/bin/python bench/python_overhead.py [MODEL] [--runs 5]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys


def isa():
    flags = open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split()
    return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", default="models/shakespeare")
    p.add_argument("--tfm", default="build/tfm")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=200)
    a = p.parse_args()
    prompt = [5, 6, 7, 8]
    # Each run a fresh process, as each CLI run is: the same loading, compiling and warm-up.
    one_python_run = (
        "import json, sys, numpy as np, tfm\n"
        f"m = tfm.AutoModelForCausalLM.from_pretrained({a.model!r}, device_map='cpu')\n"
        f"m.generate(np.array([{prompt}]), max_new_tokens={a.new_tokens}, "
        f"min_new_tokens={a.new_tokens})\n"
        "print(json.dumps(m.last_generation_stats))\n")
    cli, py = [], []
    for _ in range(a.runs):
        done = subprocess.run(
            [a.tfm, "generate", a.model, "--ids", ",".join(map(str, prompt)), "--max-new-tokens",
             str(a.new_tokens), "--min-new-tokens", str(a.new_tokens), "--device", "cpu",
             "--print-ids", "--quiet"], capture_output=True, text=True, check=True)
        cli.append(float(re.search(r"([0-9.]+) tokens/s", done.stderr).group(1)))
        done = subprocess.run([sys.executable, "-c", one_python_run], capture_output=True,
                              text=True, check=True)
        s = json.loads(done.stdout.splitlines()[-1])
        py.append((s["new_tokens"] - 1) / (s["decode_ms"] / 1e3))
    out = {"model": a.model, "isa": isa(), "new_tokens": a.new_tokens, "runs": a.runs,
           "cli_tokens_per_s": statistics.median(cli), "python_tokens_per_s": statistics.median(py)}
    out["python_overhead_pct"] = 100 * (1 - out["python_tokens_per_s"] / out["cli_tokens_per_s"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
