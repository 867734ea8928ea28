// Matrix products with transposed weights, as every projection in these models is.
// Where the CPU has AVX-512 and its vdpbf16ps, if any, does not outrun its f32 FMAs
// (cpu_isa().widened_products), products of bf16 weights with any number of rows take tfm's kernel
// widening them in registers (faster at every row count from 1 to 128 on a Xeon without AMX).
// Elsewhere, small M (decode) is memory bound: a hand-written GEMV streams the weights once and
// widens bf16 in registers; from 5 rows to cpu_isa().dot_product_rows, where the CPU has
// AVX512_BF16, on its dot products instead (one pass over the weights for all rows, x rounded to
// bf16). Large M (prefill, training) is compute bound: with bf16 weights, oneDNN's bf16 matmul (x
// rounded to bf16, as torch's bf16 activations are; f32 accumulation) where the CPU has native bf16
// dot products (cpu_isa().bf16_products), else oneDNN's f32 sgemm fed the weights widened one block
// of rows at a time (f32 compute is ~2x faster than emulated bf16 dot products).
#include <string>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/vector_kernels.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

void sgemm_nt(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out,
              int64_t ldc) {
  sgemm('N', 'T', m, n, k, 1.f, x, k, w, k, 0.f, out, ldc, "linear");
}

void gemm_widened_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                          float* out) {
  for_each_f32_tile(w, n, k, [&](const float* tile, int64_t r0, int64_t rows) {
    sgemm_nt(x, tile, m, rows, k, out + r0, n);
  });
}

void gemm_bf16_products(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                        float* out) {
  bf16_gemm(m, n, k, {x, k, 1}, {w, 1, k}, out, n, false, "linear");
}

void add_bias(const float* bias, int64_t m, int64_t n, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  }
}

// Whether products of `m` rows along `path` take tfm's bf16 dot-product kernel.
bool dot_product_kernel(int64_t m, BigProducts path) {
  return path == BigProducts::kBf16 && m > kExactGemvRows && m <= cpu_isa().dot_product_rows;
}

// tfm's own kernel for products of 5 to cpu_isa().dot_product_rows rows: AMX tiles where the CPU
// has them, else AVX512_BF16's dot products.
void own_bf16_products(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                       float* out) {
  if (const TileProducts* tiles = tile_products()) {
    tiles->of_bf16(rounded_to_bf16(x, m * k), w, m, n, k, out);
  } else {
    gemv_bf16_dot_products()(x, w, m, n, k, out);
  }
}

}  // namespace

bool bf16_rows_path(int64_t m) {
  return m > kGemvRows && big_products_path() == BigProducts::kBf16;
}

void linear_bf16_rows(const uint16_t* x, const uint16_t* w, const float* bias, int64_t m, int64_t n,
                      int64_t k, float* out) {
  const TileProducts* tiles = tile_products();
  if (tiles != nullptr && m <= cpu_isa().dot_product_rows) {
    tiles->of_bf16(x, w, m, n, k, out);
  } else {
    gemm_bf16_products(x, w, m, n, k, out);
  }
  if (bias != nullptr) add_bias(bias, m, n, out);
}

void linear_bf16_rows_rounded(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                              uint16_t* out) {
  if (tile_products() != nullptr && m <= cpu_isa().dot_product_rows) {
    thread_local Scratch products;
    products.resize(static_cast<size_t>(m * n));
    linear_bf16_rows(x, w, nullptr, m, n, k, products.data());
    round_to_bf16(products.data(), m * n, out);
  } else {
    bf16_gemm_rounded(m, n, k, {x, k, 1}, {w, 1, k}, out, n, "linear");
  }
}

bool reads_rounded_activations(int64_t m, BigProducts path) {
  if (path != BigProducts::kBf16) return false;
  return m > kGemvRows || dot_product_kernel(m, path);
}

void linear_bf16_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                         float* out, BigProducts path) {
  if (path == BigProducts::kWidenedInRegisters) {
    widened_products()(x, w, m, n, k, out);
  } else if (dot_product_kernel(m, path)) {
    own_bf16_products(x, w, m, n, k, out);
  } else if (m <= kGemvRows) {
    gemv_kernels(m).gemv_bf16(x, w, m, n, k, out);
  } else if (path == BigProducts::kBf16) {
    gemm_bf16_products(rounded_to_bf16(x, m * k), w, m, n, k, out);
  } else {
    gemm_widened_weights(x, w, m, n, k, out);
  }
}

BigProducts big_products_path() {
  if (cpu_isa().widened_products) return BigProducts::kWidenedInRegisters;
  return cpu_isa().bf16_products ? BigProducts::kBf16 : BigProducts::kWidened;
}

void linear(const float* x, const void* w, DType w_dtype, const float* bias, int64_t m, int64_t n,
            int64_t k, float* out) {
  const bool small = m <= kGemvRows;
  if (w_dtype == DType::f32) {
    const auto* wf = static_cast<const float*>(w);
    if (small)
      vector_kernels().gemv_f32(x, wf, m, n, k, out);
    else
      sgemm_nt(x, wf, m, n, k, out, n);
  } else if (w_dtype == DType::bf16) {
    linear_bf16_weights(x, static_cast<const uint16_t*>(w), m, n, k, out, big_products_path());
  } else {
    throw Error("[linear] weights of dtype " + std::string(dtype_name(w_dtype)) +
                " are not supported on cpu (f32, bf16)");
  }
  if (bias != nullptr) add_bias(bias, m, n, out);
}

void linear_shared_x(const float* x, const SharedXProduct* products, int64_t count, DType w_dtype,
                     int64_t m, int64_t k) {
  const BigProducts path = big_products_path();
  const TileProducts* tiles = tile_products();
  const bool one_row = m == 1 && path != BigProducts::kWidenedInRegisters,
             on_tiles = tiles != nullptr && dot_product_kernel(m, path);
  if (w_dtype != DType::bf16 || !(one_row || on_tiles)) {
    for (int64_t i = 0; i < count; ++i) {
      const SharedXProduct& p = products[i];
      linear(x, p.w, w_dtype, p.bias, m, p.n, k, p.out);
    }
    return;
  }
  std::vector<Bf16Rows> weights;
  for (int64_t i = 0; i < count; ++i) {
    weights.push_back(
        {static_cast<const uint16_t*>(products[i].w), products[i].n, products[i].out});
  }
  if (one_row) {
    gemv_kernels(1).gemv_bf16_one_row_each(x, weights.data(), count, k);
  } else {
    tiles->of_bf16_each(rounded_to_bf16(x, m * k), weights.data(), count, m, k);
  }
  for (int64_t i = 0; i < count; ++i) {
    if (products[i].bias != nullptr) add_bias(products[i].bias, m, products[i].n, products[i].out);
  }
}

}  // namespace tfm::cpu
