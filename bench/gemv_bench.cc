// The decode step's matrix-vector products alone, shaped like Qwen3-0.6B (28 layers of q, k, v, o,
// gate, up, down, then lm_head) with bf16 weights: how close the GEMV streams to the read
// bandwidth measured in the same run, for each build of the kernels this CPU runs (AVX2+FMA
// everywhere, AVX-512 where present: what an AVX2-only machine's decode takes, measured here
// too, AVX512_BF16's dot products and AMX's tiles where present, and oneDNN's bf16 matmul) and for
// the path tfm chooses, with ROWS rows of x (1: decode of one sequence; up to 64: a serving batch
// or a prefill chunk). Many rows are bound by arithmetic, not bandwidth: the multiply-add peak
// measured in the same run is printed beside each path's GFLOP/s. Prints JSON.
//   gemv_bench [REPEATS] [ROWS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vector_kernels.h"
#include "compute_peak.h"
#include "read_bandwidth.h"
#include "tfm/tensor.h"

namespace {

struct Matrix {
  int64_t n, k;
};

// The best time of `repeats` passes of `product` over every matrix, in seconds.
double best_pass(const std::vector<Matrix>& shapes, int repeats,
                 const std::function<void(size_t i)>& product) {
  double best = 1e9;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < shapes.size(); ++i) product(i);
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    best = std::min(best, s.count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const Matrix layer[] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                          {3072, 1024}, {3072, 1024}, {1024, 3072}};
  const Matrix head{151936, 1024};
  // Tensors, as tfm's weights are (on huge pages, core/host_memory.h).
  std::vector<tfm::Tensor> weights;
  std::vector<const uint16_t*> w;
  std::vector<Matrix> shapes;
  size_t bytes = 0;
  double flops_per_row = 0;
  for (int l = 0; l < 28; ++l) shapes.insert(shapes.end(), std::begin(layer), std::end(layer));
  shapes.push_back(head);
  for (const Matrix& m : shapes) {
    weights.push_back(tfm::Tensor::empty({m.n, m.k}, tfm::DType::bf16));
    uint16_t* values = weights.back().data_as<uint16_t>();
    std::fill(values, values + m.n * m.k, uint16_t{0x3c00});  // bf16 0.0078125
    w.push_back(values);
    bytes += weights.back().nbytes();
    flops_per_row += 2.0 * static_cast<double>(m.n * m.k);
  }
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  const int64_t rows = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<float> x(static_cast<size_t>(rows * 3072), 1.f),
      y(static_cast<size_t>(rows * head.n));

  const double bandwidth = tfm::bench::read_bandwidth_gbs();
  nlohmann::json out{{"weight_bytes", bytes}, {"bandwidth_gbs", bandwidth}, {"rows", rows}};
  out["peak_gflops"]["f32 FMA, 256-bit"] = tfm::bench::f32_fma_peak_gflops();
  if (tfm::cpu::cpu_isa().avx512) {
    out["peak_gflops"]["f32 FMA, 512-bit"] = tfm::bench::f32_fma512_peak_gflops();
  }
  if (tfm::cpu::cpu_isa().avx512_bf16) {
    out["peak_gflops"]["bf16 dot products, AVX512_BF16"] = tfm::bench::bf16_dot_peak_gflops();
  }
  if (tfm::cpu::cpu_isa().amx_bf16) {
    out["peak_gflops"]["bf16 tiles, AMX"] = tfm::bench::amx_bf16_peak_gflops();
  }
  const auto report = [&](double seconds) {
    const double gbs = static_cast<double>(bytes) / seconds / 1e9;
    return nlohmann::json{{"best_s", seconds},
                          {"gb_per_s", gbs},
                          {"fraction_of_bandwidth", gbs / bandwidth},
                          {"gflops", flops_per_row * static_cast<double>(rows) / seconds / 1e9},
                          {"tokens_per_s", 1.0 / seconds}};
  };
  for (const tfm::cpu::VectorKernels* set : tfm::cpu::runnable_vector_kernels()) {
    out["by_isa"][set->isa] = report(best_pass(shapes, repeats, [&](size_t i) {
      set->gemv_bf16(x.data(), w[i], rows, shapes[i].n, shapes[i].k, y.data());
    }));
  }
  if (const tfm::cpu::GemvBf16 dot = tfm::cpu::gemv_bf16_dot_products()) {
    out["by_isa"]["AVX512_BF16 dot products"] = report(best_pass(shapes, repeats, [&](size_t i) {
      dot(x.data(), w[i], rows, shapes[i].n, shapes[i].k, y.data());
    }));
  }
  if (const tfm::cpu::TileProducts* tiles = tfm::cpu::tile_products()) {
    out["by_isa"]["AMX tiles"] = report(best_pass(shapes, repeats, [&](size_t i) {
      const int64_t k = shapes[i].k;
      tiles->of_bf16(tfm::cpu::rounded_to_bf16(x.data(), rows * k), w[i], rows, shapes[i].n, k,
                     y.data());
    }));
  }
  if (tfm::cpu::cpu_isa().bf16_products) {
    // x rounded to bf16 once, outside the timed passes: oneDNN's own time.
    std::vector<uint16_t> xr(x.size());
    tfm::cpu::round_to_bf16(x.data(), static_cast<int64_t>(x.size()), xr.data());
    out["by_isa"]["oneDNN bf16 matmul (" + tfm::cpu::cpu_isa().onednn + ")"] =
        report(best_pass(shapes, repeats, [&](size_t i) {
          const int64_t k = shapes[i].k;
          tfm::cpu::bf16_gemm(rows, shapes[i].n, k, {xr.data(), k, 1}, {w[i], 1, k}, y.data(),
                              shapes[i].n, false, "gemv_bench");
        }));
  }
  if (const tfm::cpu::GemvBf16 widened = tfm::cpu::widened_products()) {
    out["by_isa"]["AVX-512 FMAs, weights widened in registers"] =
        report(best_pass(shapes, repeats, [&](size_t i) {
          widened(x.data(), w[i], rows, shapes[i].n, shapes[i].k, y.data());
        }));
  }
  if (rows > tfm::cpu::kGemvRows) {
    out["by_isa"]["oneDNN sgemm, weights widened to f32"] =
        report(best_pass(shapes, repeats, [&](size_t i) {
          tfm::cpu::linear_bf16_weights(x.data(), w[i], rows, shapes[i].n, shapes[i].k, y.data(),
                                        tfm::cpu::BigProducts::kWidened);
        }));
  }
  out["chosen"] = report(best_pass(shapes, repeats, [&](size_t i) {
    tfm::cpu::linear(x.data(), w[i], tfm::DType::bf16, nullptr, rows, shapes[i].n, shapes[i].k,
                     y.data());
  }));
  out["chosen"]["isa"] = tfm::cpu::gemv_kernels(rows).isa;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
