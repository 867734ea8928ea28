// WMMA for the CPU emulation of CUDA kernels (see cuda_runtime.h here): every lane holds a whole
// 16x16 fragment and computes the whole product; lane 0 alone stores, so the warp's later
// __syncwarp orders the store before other lanes read it, as on a GPU.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_bf16.h"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 fragments only");
  float x[16][16];
};

// WMMA's rules for a tile in memory: a 32-byte aligned start, rows a multiple of 16 bytes apart.
template <typename T>
void check_tile_address(const T* p, unsigned ld) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ld * sizeof(T) % 16 != 0) {
    std::fprintf(stderr, "wmma: tile at %p with ldm %u breaks WMMA's alignment rules\n",
                 static_cast<const void*>(p), ld);
    std::abort();
  }
}

inline float widened(float v) { return v; }
inline float widened(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ld) {
  check_tile_address(p, ld);
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned c = 0; c < 16; ++c) {
      f.x[r][c] = widened(std::is_same_v<Layout, row_major> ? p[r * ld + c] : p[c * ld + r]);
    }
  }
}

template <typename Fragment>
void fill_fragment(Fragment& f, float value) {
  for (auto& row : f.x) {
    for (float& v : row) v = value;
  }
}

template <typename D, typename A, typename B, typename C>
void mma_sync(D& d, const A& a, const B& b, const C& c) {
  D product;
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 16; ++n) {
      float sum = c.x[r][n];
      for (int k = 0; k < 16; ++k) sum += a.x[r][k] * b.x[k][n];
      product.x[r][n] = sum;
    }
  }
  d = product;
}

template <typename Fragment>
void store_matrix_sync(float* p, const Fragment& f, unsigned ld, layout_t layout) {
  check_tile_address(p, ld);
  if (tfm::cuda_emulation::linear_thread() % 32 != 0) return;
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned c = 0; c < 16; ++c) {
      p[layout == mem_row_major ? r * ld + c : c * ld + r] = f.x[r][c];
    }
  }
}

}  // namespace nvcuda::wmma
