// The decode step's matrix-vector products alone, shaped like Qwen3-0.6B (28 layers of q, k, v, o,
// gate, up, down, then lm_head) with bf16 weights: how close the GEMV streams to memory bandwidth.
// Prints JSON.   gemv_bench [REPEATS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/cpu/kernels.h"

int main(int argc, char** argv) {
  struct Matrix {
    int64_t n, k;
  };
  const Matrix layer[] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                          {3072, 1024}, {3072, 1024}, {1024, 3072}};
  const Matrix head{151936, 1024};
  std::vector<std::vector<uint16_t>> weights;
  std::vector<Matrix> shapes;
  size_t bytes = 0;
  for (int l = 0; l < 28; ++l) shapes.insert(shapes.end(), std::begin(layer), std::end(layer));
  shapes.push_back(head);
  for (const Matrix& m : shapes) {
    weights.emplace_back(static_cast<size_t>(m.n * m.k), uint16_t{0x3c00});  // bf16 0.0078125
    bytes += weights.back().size() * sizeof(uint16_t);
  }
  std::vector<float> x(3072, 1.f), y(static_cast<size_t>(head.n));
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  double best = 1e9;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < shapes.size(); ++i) {
      tfm::cpu::linear(x.data(), weights[i].data(), tfm::DType::bf16, nullptr, 1, shapes[i].n,
                       shapes[i].k, y.data());
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf(
      "{\"weight_bytes\": %zu, \"best_s\": %.5f, \"gb_per_s\": %.2f, \"tokens_per_s\": %.2f}\n",
      bytes, best, static_cast<double>(bytes) / best / 1e9, 1.0 / best);
  return 0;
}
