// Matrix products of 9 to 16 rows (decode at batch 9 to 16): too many rows for the GEMV, which
// keeps a sum per row in registers and reads x once per row for every weight, and too few for
// cuBLASLt's tiles to find enough work. Each block converts (and norms) x's rows to bf16 once, in
// shared memory; each warp runs mma.sync steps of one tile of 16 weight rows against them over a
// slice of k, reading the weights once, 16 bytes a lane, so a product is one launch.
#include <utility>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/overlapped_launch.h"
#include "backends/cuda/shared_memory_limit.h"
#include "backends/cuda/skinny_product_kernels.cuh"

namespace tfm::cuda {
namespace {

// Each tile is read by one to kSkinnyWarps warps, every slice taking at least a group of chunks.
int slices_for(int64_t tiles, int64_t k) {
  return warps_per_output(tiles, k, int64_t{kChunk} * kGroupChunks, kSkinnyWarps);
}

// Launches kernel with the shared memory of `products` products over k.
template <typename... Params, typename... Args>
void launch_tiles(const char* name, void (*kernel)(Params...), int64_t tiles, int slices,
                  int products, int64_t k, cudaStream_t stream, Args&&... args) {
  const size_t bytes = skinny_shared_bytes(products, k);
  allow_shared_memory(reinterpret_cast<const void*>(kernel), bytes, name);
  launch_overlapped(name, kernel, skinny_blocks(tiles, slices), kSkinnyWarps * 32, bytes, stream,
                    std::forward<Args>(args)...);
  check_launch(name);
}

// Calls launch(SkinnyRows<true or false>) as the norm is given or not.
template <typename F>
void with_rows(const float* x, const InputNorm& norm, int64_t m, int64_t k, F launch) {
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  if (norm.weight != nullptr) return launch(SkinnyRows<true>{x, mi, ki, norm.weight, norm.eps});
  launch(SkinnyRows<false>{x, mi, ki, nullptr, 0.f});
}

const __nv_bfloat16* bf16(const void* p) { return static_cast<const __nv_bfloat16*>(p); }

}  // namespace

void skinny_linear(const float* x, const void* w, const InputNorm& norm, const float* bias,
                   const float* residual, int64_t m, int64_t n, int64_t k, float* y,
                   WeightReads reads, cudaStream_t stream) {
  if (m == 0 || n == 0) return;  // a grid of 0 blocks is a launch error
  const int slices = slices_for(n / kTile, k);
  with_rows(x, norm, m, k, [&](auto rows) {
    launch_tiles("skinny_linear", skinny_linear_kernel<decltype(rows)::kNormed>, n / kTile, slices,
                 1, k, stream, rows, bf16(w), bias, residual, static_cast<int>(n), slices, y,
                 reads == WeightReads::kEarly);
  });
}

void skinny_qkv(const float* x, const QkvProducts& products, const InputNorm& norm, int64_t m,
                int64_t k, WeightReads reads, cudaStream_t stream) {
  const int64_t tiles = (products.n[0] + products.n[1] + products.n[2]) / kTile;
  if (m == 0 || tiles == 0) return;
  const int slices = slices_for(tiles, k);
  with_rows(x, norm, m, k, [&](auto rows) {
    launch_tiles("skinny_qkv", skinny_qkv_kernel<decltype(rows)::kNormed>, tiles, slices, 1, k,
                 stream, rows, products, slices, reads == WeightReads::kEarly);
  });
}

void skinny_gated(const float* x, const void* w_gate, const void* w_up, const InputNorm& norm,
                  const float* bias_gate, const float* bias_up, int64_t m, int64_t n, int64_t k,
                  float* y, WeightReads reads, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const int slices = slices_for(n / kTile, k);
  with_rows(x, norm, m, k, [&](auto rows) {
    launch_tiles("skinny_gated", skinny_gated_kernel<decltype(rows)::kNormed>, n / kTile, slices, 2,
                 k, stream, rows, bf16(w_gate), bf16(w_up), bias_gate, bias_up, static_cast<int>(n),
                 slices, y, reads == WeightReads::kEarly);
  });
}

}  // namespace tfm::cuda
