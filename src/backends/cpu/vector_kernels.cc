#include "backends/cpu/vector_kernels.h"

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/packed_products.h"

namespace tfm::cpu {
namespace avx2 {
extern const VectorKernels kernels;
}
namespace avx512 {
extern const VectorKernels kernels;
}
namespace avx512_bf16 {
void gemv_bf16(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
void gemm_bf16(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
void packed_product(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b,
                    int64_t depth_tiles, int64_t n, int64_t k, const float* scale, float* out,
                    int64_t ldo);
}  // namespace avx512_bf16
namespace avx512_widened {
void products(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
}  // namespace avx512_widened
namespace amx {
void gemm_bf16_each(const uint16_t* x, const Bf16Rows* weights, int64_t count, int64_t m,
                    int64_t k);
void gemm_bf16(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k, float* out);
void packed_product(const uint16_t* a, int64_t lda, int64_t m, const uint16_t* b,
                    int64_t depth_tiles, int64_t n, int64_t k, const float* scale, float* out,
                    int64_t ldo);
}  // namespace amx

namespace {

template <auto product>
void one_at_a_time(const uint16_t* x, const Bf16Rows* weights, int64_t count, int64_t m,
                   int64_t k) {
  for (int64_t i = 0; i < count; ++i) product(x, weights[i].w, m, weights[i].n, k, weights[i].out);
}

}  // namespace

std::vector<const VectorKernels*> runnable_vector_kernels() {
  std::vector<const VectorKernels*> sets{&avx2::kernels};
  if (cpu_isa().avx512) sets.push_back(&avx512::kernels);
  return sets;
}

GemvBf16 gemv_bf16_dot_products() {
  return cpu_isa().avx512 && cpu_isa().avx512_bf16 ? avx512_bf16::gemv_bf16 : nullptr;
}

GemvBf16 widened_products() { return cpu_isa().avx512 ? avx512_widened::products : nullptr; }

const TileProducts* tile_products() {
  static const TileProducts tiles{amx::gemm_bf16, amx::gemm_bf16_each};
  return cpu_isa().amx_bf16 ? &tiles : nullptr;
}

const TileProducts* dot_products() {
  static const TileProducts dots{avx512_bf16::gemm_bf16, one_at_a_time<avx512_bf16::gemm_bf16>};
  return cpu_isa().dot_product_rows > 0 ? &dots : nullptr;
}

PackedProduct packed_product() {
  if (tile_products() != nullptr) return amx::packed_product;
  return dot_products() != nullptr ? avx512_bf16::packed_product : nullptr;
}

std::vector<PackedProduct> runnable_packed_products() {
  std::vector<PackedProduct> all;
  if (cpu_isa().avx512_bf16) all.push_back(avx512_bf16::packed_product);
  if (cpu_isa().amx_bf16) all.push_back(amx::packed_product);
  return all;
}

const VectorKernels& vector_kernels() {
  static const VectorKernels* const best = runnable_vector_kernels().back();
  return *best;
}

const VectorKernels& gemv_kernels(int64_t m) { return m == 1 ? avx2::kernels : vector_kernels(); }

}  // namespace tfm::cpu
