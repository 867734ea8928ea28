// Prefill attention alone on the CPU, one layer shaped like Qwen3-0.6B (16 query and 8 KV heads
// of 128) over a causal prompt of SEQ tokens in a KV cache of as many slots: over a bf16 cache (the
// path tfm chooses: AMX tiles where the CPU has them, else keys and values widened to f32 for
// oneDNN's sgemm) and over an f32 cache (oneDNN's sgemm). The anchor is torch's
// scaled_dot_product_attention on the same shape in bf16, forward only:
//   python3 bench/anchor_attention.py --device cpu --batch 1 --seq SEQ
// Prints JSON with each path's best time over REPEATS calls and its GFLOP/s (the causal half of
// the two products, FlashAttention's count).
//   attention_bench [REPEATS] [SEQ]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "tfm/tensor.h"

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t seq = argc > 2 ? std::atoll(argv[2]) : 1024;
  if (repeats < 1 || seq < 1) {
    std::fprintf(stderr, "usage: attention_bench [REPEATS >= 1] [SEQ >= 1]\n");
    return 2;
  }
  constexpr int64_t kQueryHeads = 16, kKvHeads = 8, kHeadDim = 128;
  const float scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  std::vector<float> q(static_cast<size_t>(seq * kQueryHeads * kHeadDim));
  std::vector<float> k(static_cast<size_t>(seq * kKvHeads * kHeadDim)), v(k.size());
  uint32_t state = 12345;
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.f * 2.f - 1.f;
  };
  for (float* values : {q.data(), k.data(), v.data()}) {
    const size_t n = values == q.data() ? q.size() : k.size();
    for (size_t i = 0; i < n; ++i) values[i] = next();
  }
  std::vector<int32_t> mask(static_cast<size_t>(seq), 1), slots(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const tfm::Shape cache_shape{1, seq, kKvHeads, kHeadDim};
  std::vector<float> out(q.size());

  const double flop = 2.0 * 2.0 * kQueryHeads * seq * seq * kHeadDim / 2.0;
  const auto timed = [&](tfm::DType cache) {
    const tfm::Tensor k_cache = tfm::Tensor::from_vector<float>(k, cache_shape).to(cache);
    const tfm::Tensor v_cache = tfm::Tensor::from_vector<float>(v, cache_shape).to(cache);
    double best = 1e9;
    for (int rep = 0; rep < repeats; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      tfm::cpu::attention(q.data(), k_cache.data(), v_cache.data(), cache, mask.data(),
                          slots.data(), 1, seq, seq, kQueryHeads, kKvHeads, kHeadDim, scale,
                          out.data());
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
      best = std::min(best, s.count());
    }
    return nlohmann::json{{"best_ms", best * 1e3}, {"gflops", flop / best / 1e9}};
  };
  nlohmann::json report{{"isa", tfm::cpu::describe(tfm::cpu::cpu_isa())},
                        {"seq", seq},
                        {"heads", {{"q", kQueryHeads}, {"kv", kKvHeads}, {"dim", kHeadDim}}}};
  report["bf16 cache (tfm's choice)"] = timed(tfm::DType::bf16);
  report["f32 cache (oneDNN sgemm)"] = timed(tfm::DType::f32);
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
