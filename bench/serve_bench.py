"""tfm serve under load, beside llama.cpp's llama-server on the same weights when given its folder:
a loopback load generator, bounded in requests and time, printing JSON.

    python3 bench/serve_bench.py [--llama-cpp DIR] [--build build] [--model DIR]
        [--clients 1,8,32] [--requests 2] [--max-tokens 64]

Each of C clients sends --requests streamed /v1/completions requests one after another (greedy,
ignore_eos, a prompt of its own), all clients at once. Per server and C: output tokens/s over the
whole run, p50/p99 time to first token and inter-token latency. At one client it also runs
`tfm generate` on the first prompt: serving one client should decode as fast. llama-server runs
with as many slots as the most clients (-np) and --max-model-len of context each, on a GGUF of the
model's weights (tools/make_gguf.py; llama.cpp is built beside tfm, never inside it:
  cmake -S DIR -B DIR/build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build DIR/build
        --target llama-server).
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["ROMEO:", "JULIET:", "KING RICHARD III:", "First Citizen:", "HAMLET:", "MENENIUS:",
           "Second Servingman:", "DUKE VINCENTIO:"]
DEADLINE_S = 600  # the whole run at most


def percentile(values, p):
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def stream(url, prompt, max_tokens):
    """(time to first token, inter-token gaps, tokens) of one streamed request."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"{url}: {response.status} {response.read()[:200]}")
    first, last, gaps, chunks, usage = None, None, [], 0, None
    buffer = b""
    while True:
        data = response.read1(65536)
        if not data:
            break
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            chunk = json.loads(event[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if not chunk.get("choices") or not chunk["choices"][0].get("text"):
                continue
            now = time.perf_counter()
            chunks += 1
            if first is None:
                first = now - start
            else:
                gaps.append(now - last)
            last = now
    conn.close()
    return first, gaps, usage["completion_tokens"] if usage else chunks


def load(url, clients, requests, max_tokens):
    results, errors = [], []

    def client(i):
        for r in range(requests):
            try:
                results.append(stream(url, PROMPTS[(i + r) % len(PROMPTS)], max_tokens))
            except Exception as e:  # reported, not hidden
                errors.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{url}: {len(errors)} failed requests, e.g. {errors[0]}")
    ttft = [r[0] for r in results if r[0] is not None]
    gaps = [g for r in results for g in r[1]]
    tokens = sum(r[2] for r in results)
    ms = lambda v: None if v is None else round(v * 1e3, 2)
    return {"clients": clients, "requests": len(results), "output_tokens": tokens,
            "output_tok_per_s": round(tokens / elapsed, 1),
            "ttft_ms_p50": ms(percentile(ttft, 50)), "ttft_ms_p99": ms(percentile(ttft, 99)),
            "itl_ms_p50": ms(percentile(gaps, 50)), "itl_ms_p99": ms(percentile(gaps, 99))}


def wait_ready(url, process, seconds=600):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({process.returncode})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready in {seconds} s")


def serve(command, url, args):
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, process)
        return [load(url, c, args.requests, args.max_tokens) for c in args.clients]
    finally:
        process.terminate()
        process.wait(timeout=60)


def tfm_generate(args):
    out = subprocess.run([os.path.join(args.build, "tfm"), "generate", args.model, PROMPTS[0],
                          "--max-new-tokens", str(args.max_tokens), "--quiet", "--device", "cpu"],
                         capture_output=True, text=True, check=True).stderr
    return float(out.split(" tokens/s")[0].rsplit(", ", 1)[1])


def cpu_isa():
    flags = open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0]
    return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
                    if f" {f}" in flags)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-cpp", help="a llama.cpp folder with build/bin/llama-server")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "shakespeare"))
    p.add_argument("--clients", default="1,8,32")
    p.add_argument("--requests", type=int, default=2, help="per client")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=256)
    p.add_argument("--port", type=int, default=8321)
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    slots = max(args.clients)
    report = {"cpu": cpu_isa(), "threads": os.cpu_count(), "model": args.model,
              "max_tokens": args.max_tokens, "requests_per_client": args.requests}
    url = f"http://127.0.0.1:{args.port}"
    report["tfm"] = serve([os.path.join(args.build, "tfm"), "serve", args.model, "--port",
                           str(args.port), "--device", "cpu", "--max-num-seqs", str(slots),
                           "--max-model-len", str(args.max_model_len)], url, args)
    report["tfm_generate_tok_per_s"] = tfm_generate(args)
    if args.llama_cpp:
        gguf = os.path.join(args.model, "model.gguf")
        if not os.path.exists(gguf):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_gguf.py"),
                            args.llama_cpp, args.model, gguf], check=True)
        server = os.path.join(args.llama_cpp, "build", "bin", "llama-server")
        report["llama_server"] = serve(
            [server, "-m", gguf, "--port", str(args.port), "-np", str(slots), "-c",
             str(slots * args.max_model_len), "-t", str(os.cpu_count()), "--no-webui"], url, args)
        report["ratios"] = [
            {"clients": t["clients"],
             "throughput_vs_llama_server": round(t["output_tok_per_s"] / l["output_tok_per_s"], 2),
             "ttft_p99_vs_llama_server": round(t["ttft_ms_p99"] / l["ttft_ms_p99"], 2)}
            for t, l in zip(report["tfm"], report["llama_server"])]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
