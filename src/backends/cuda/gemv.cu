// Matrix-vector products for decode: the weights stream through once, 16 bytes per lane per load,
// while the few activation rows stay in L1.
#include <type_traits>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/gemv_kernels.cuh"
#include "backends/cuda/overlapped_launch.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

// Each output column is read by one to kWarps warps, every lane taking at least 8 weights.
int slices_for(int64_t n, int64_t k) { return warps_per_output(n, k, int64_t{32} * 8, kWarps); }

// Calls launch(std::integral_constant<int, m>{}) for the row count m (1 .. kGemvMaxRows): the
// kernels keep one accumulator per row in registers.
template <typename F>
void with_rows(int m, F launch) {
  switch (m) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 5: return launch(std::integral_constant<int, 5>{});
    case 6: return launch(std::integral_constant<int, 6>{});
    case 7: return launch(std::integral_constant<int, 7>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    default:
      throw Error("[cuda gemv] " + std::to_string(m) + " rows: at most " +
                  std::to_string(kGemvMaxRows));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool vectorizable(const void* x, const void* w, int k, const InputNorm& norm = {}) {
  return k % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(norm.weight);
}

// Calls launch(NormedRows<true or false>) as the norm is given or not.
template <typename F>
void with_norm(const InputNorm& norm, F launch) {
  if (norm.weight != nullptr) return launch(NormedRows<true>{norm.weight, norm.eps});
  launch(NormedRows<false>{nullptr, 0.f});
}

template <typename W>
void launch(const float* x, const W* w, const float* bias, const float* residual, int m, int n,
            int k, float* y, bool early, cudaStream_t stream) {
  if (m == 0 || n == 0) return;  // nothing to write; a grid of 0 blocks is a launch error
  const int threads = kWarps * 32;
  if (!vectorizable(x, w, k)) {
    gemv_any_kernel<<<gemv_blocks(n, 1), threads, 0, stream>>>(x, w, InputNorm{}, bias, residual, m,
                                                               n, k, y);
    return;
  }
  const int slices = slices_for(n, k);
  with_rows(m, [&](auto rows) {
    launch_overlapped("gemv", gemv_kernel<W, decltype(rows)::value, false>, gemv_blocks(n, slices),
                      threads, 0, stream, x, w, NormedRows<false>{nullptr, 0.f}, bias, residual, n,
                      k, slices, y, early);
  });
}

template <typename W>
void launch_qkv(const float* x, const QkvProducts& p, const InputNorm& norm, int m, int k,
                bool early, cudaStream_t stream) {
  const int64_t n = p.n[0] + p.n[1] + p.n[2];
  if (m == 0 || n == 0) return;
  const int threads = kWarps * 32;
  bool aligned = true;
  for (const void* w : p.w) aligned = aligned && vectorizable(x, w, k, norm);
  if (!aligned) {
    for (int i = 0; i < 3; ++i) {
      if (p.n[i] == 0) continue;
      gemv_any_kernel<<<gemv_blocks(p.n[i], 1), threads, 0, stream>>>(
          x, static_cast<const W*>(p.w[i]), norm, p.bias[i], nullptr, m, static_cast<int>(p.n[i]),
          k, p.y[i]);
    }
    return;
  }
  const int slices = slices_for(n, k);
  with_norm(norm, [&](auto normed) {
    with_rows(m, [&](auto rows) {
      launch_overlapped("qkv_gemv",
                        qkv_gemv_kernel<W, decltype(rows)::value, decltype(normed)::kNormed>,
                        gemv_blocks(n, slices), threads, 0, stream, x, normed, p, k, slices, early);
    });
  });
}

template <typename W>
void launch_gated(const float* x, const W* wg, const W* wu, const InputNorm& norm, const float* bg,
                  const float* bu, int m, int n, int k, float* y, bool early, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const int threads = kWarps * 32;
  if (!vectorizable(x, wg, k, norm) || !vectorizable(x, wu, k, norm)) {
    gated_gemv_any_kernel<<<gemv_blocks(n, 1), threads, 0, stream>>>(x, wg, wu, norm, bg, bu, m, n,
                                                                     k, y);
    return;
  }
  const int slices = slices_for(n, k);
  with_norm(norm, [&](auto normed) {
    with_rows(m, [&](auto rows) {
      launch_overlapped("gated_gemv",
                        gated_gemv_kernel<W, decltype(rows)::value, decltype(normed)::kNormed>,
                        gemv_blocks(n, slices), threads, 0, stream, x, wg, wu, normed, bg, bu, n, k,
                        slices, y, early);
    });
  });
}

}  // namespace

void gemv(const float* x, const void* w, DType w_dtype, const float* bias, const float* residual,
          int64_t m, int64_t n, int64_t k, float* y, WeightReads reads, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  with_float_type(w_dtype, "linear", [&](auto type) {
    using T = typename decltype(type)::type;
    launch(x, static_cast<const T*>(w), bias, residual, mi, ni, ki, y, reads == WeightReads::kEarly,
           stream);
  });
  check_launch("gemv");
}

void qkv_gemv(const float* x, const QkvProducts& products, DType w_dtype, const InputNorm& norm,
              int64_t m, int64_t k, WeightReads reads, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  with_float_type(w_dtype, "qkv_linear", [&](auto type) {
    launch_qkv<typename decltype(type)::type>(x, products, norm, mi, ki,
                                              reads == WeightReads::kEarly, stream);
  });
  check_launch("qkv_gemv");
}

void gated_gemv(const float* x, const void* w_gate, const void* w_up, DType w_dtype,
                const InputNorm& norm, const float* bias_gate, const float* bias_up, int64_t m,
                int64_t n, int64_t k, float* y, WeightReads reads, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  with_float_type(w_dtype, "gated_linear", [&](auto type) {
    using T = typename decltype(type)::type;
    launch_gated(x, static_cast<const T*>(w_gate), static_cast<const T*>(w_up), norm, bias_gate,
                 bias_up, mi, ni, ki, y, reads == WeightReads::kEarly, stream);
  });
  check_launch("gated_gemv");
}

}  // namespace tfm::cuda
