// The host's read bandwidth, which bounds CPU decode: shared by the benchmarks that compare a
// kernel's streaming rate with it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backends/cpu/simd.h"
#include "tfm/tensor.h"

namespace tfm::bench {

// Read bandwidth with all threads over a buffer far larger than the caches, in GB/s. The buffer is
// a tensor's, on the huge pages tfm's weights are on (core/host_memory.h): on 4 KiB pages the
// TLB misses would lower the bound below what the weights stream at.
inline double read_bandwidth_gbs() {
  const size_t n = size_t{1} << 28;  // 1 GiB of floats
  tfm::Tensor storage = tfm::Tensor::empty({static_cast<int64_t>(n)}, tfm::DType::f32);
  float* buffer = storage.data_as<float>();
  std::fill(buffer, buffer + n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    float sum = 0;
    const size_t step = 4 * tfm::cpu::simd::kWidth;
#pragma omp parallel reduction(+ : sum)
    {
      using namespace tfm::cpu::simd;
      // Four vector sums, reduced once a thread: a horizontal sum every step made the adds, not
      // the loads, the limit (a Xeon's 2 cores measured 18 GB/s while the GEMV streamed 29).
      Vec a = zero(), b = zero(), c = zero(), d = zero();
#pragma omp for schedule(static) nowait
      for (size_t i = 0; i < n; i += step) {
        a += load(&buffer[i]);
        b += load(&buffer[i + step / 4]);
        c += load(&buffer[i + step / 2]);
        d += load(&buffer[i + 3 * step / 4]);
      }
      sum += tfm::cpu::simd::sum(a) + tfm::cpu::simd::sum(b) + tfm::cpu::simd::sum(c) +
             tfm::cpu::simd::sum(d);
    }
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    if (sum < 0) std::puts("");  // keeps the loop from being optimized away
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s.count() / 1e9);
  }
  return best;
}

}  // namespace tfm::bench
