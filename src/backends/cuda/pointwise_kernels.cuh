// The row-wise and element-wise kernels (see pointwise.cu), in a header of their own so
// tests/cuda_emulation can run them on the CPU.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kernels.h"

namespace tfm::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const T* table, int64_t first_id, int64_t vocab, int64_t hidden,
                                 const int32_t* ids, int64_t count, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count * hidden) return;
  // A vocabulary shard reads other ranks' ids as zero rows. Ids are checked on the host before
  // they are copied; this also keeps a bad one in bounds.
  const int64_t row = ids[i / hidden] - first_id;
  out[i] = row >= 0 && row < vocab ? widen(table[row * hidden + i % hidden]) : 0.f;
}

// 1 / rms of a row of `hidden` values, from the warp whose lane this is (every lane gets it).
template <typename X>
__device__ __forceinline__ float warp_row_inv_rms(const X* row, int hidden, float eps, int lane) {
  float sum_sq = 0.f;
  for (int i = lane; i < hidden; i += 32) sum_sq += widen(row[i]) * widen(row[i]);
  sum_sq = warp_sum(sum_sq);
  return 1.f / sqrtf(sum_sq / static_cast<float>(hidden) + eps);
}

// x: f32, or a bf16 product's output, widened as it is loaded (as for every X below).
template <typename T, typename X>
__global__ void rms_norm_kernel(const X* x, const float* w, int64_t rows, int hidden, float eps,
                                T* out) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const X* in = x + row * hidden;
  const float inv_rms = warp_row_inv_rms(in, hidden, eps, lane);
  T* o = out + row * hidden;
  for (int i = lane; i < hidden; i += 32) o[i] = narrow<T>(w[i] * (widen(in[i]) * inv_rms));
}

// Rotates the pair (x1, x2) = (element f, element f + half) of a head at `position`.
template <typename T>
__device__ __forceinline__ void rotate_pair(float x1, float x2, int32_t position,
                                            const float* inv_freq, int f, int half, float scaling,
                                            T* head_out) {
  // The angle is formed in f32 as PyTorch does, so large positions round the same way.
  const float angle = static_cast<float>(position) * inv_freq[f];
  const float c = cosf(angle) * scaling, s = sinf(angle) * scaling;
  head_out[f] = narrow<T>(x1 * c - x2 * s);
  head_out[f + half] = narrow<T>(x2 * c + x1 * s);
}

template <typename T, typename X>
__global__ void rope_kernel(const X* x, const int32_t* positions, const float* inv_freq,
                            int64_t tokens, int64_t heads, int half, float scaling, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= tokens * heads * half) return;
  const int64_t token = i / (heads * half);
  const int f = static_cast<int>(i % half);
  const int64_t base = (i / half) * 2 * half;
  rotate_pair(widen(x[base + f]), widen(x[base + f + half]), positions[token], inv_freq, f, half,
              scaling, out + base);
}

// RoPE of each head RMS-normed over its head_dim first (Qwen3's q_norm and k_norm; graph::
// fuse_norms_into_rope): one warp per (token, head), the normed values never stored. The same
// sum and products as rms_norm_kernel, so the same bits as the two kernels one after the other.
template <typename T, typename X>
__global__ void normed_rope_kernel(const X* x, const float* w, float eps, const int32_t* positions,
                                   const float* inv_freq, int64_t tokens, int64_t heads, int half,
                                   float scaling, T* out) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= tokens * heads) return;
  const X* in = x + row * 2 * half;
  const float inv_rms = warp_row_inv_rms(in, 2 * half, eps, lane);
  const int32_t position = positions[row / heads];
  for (int f = lane; f < half; f += 32) {
    rotate_pair(w[f] * (widen(in[f]) * inv_rms), w[f + half] * (widen(in[f + half]) * inv_rms),
                position, inv_freq, f, half, scaling, out + row * 2 * half);
  }
}

__global__ void slice_seq_kernel(const float* x, int64_t seq, int64_t inner, int64_t start,
                                 int64_t length, int64_t total, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int64_t e = i % inner, s = (i / inner) % length, b = i / (inner * length);
  out[i] = x[(b * seq + start + s) * inner + e];
}

// Token s's row of `update` (row_elems f32 values of each batch row b) into slot slots[s] of the
// cache row, narrowed to the cache's dtype; a slot outside the cache writes nothing.
template <typename T>
__global__ void cache_write_kernel(T* cache, const float* update, const int32_t* slots, int64_t seq,
                                   int64_t cache_len, int64_t row_elems, int64_t total) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int64_t e = i % row_elems, s = (i / row_elems) % seq, b = i / (row_elems * seq);
  const int64_t slot = slots[s];
  if (slot < 0 || slot >= cache_len) return;
  cache[(b * cache_len + slot) * row_elems + e] = narrow<T>(update[i]);
}

// Elements W * i .. W * i + W - 1 for thread i; with W = 4 (both pointers aligned to four
// elements, count a multiple of 4) each side moves as one vector.
template <typename T, int W>
struct alignas(W * sizeof(T)) Elements {
  T v[W];
};

template <typename From, typename To, int W = 1>
__global__ void cast_kernel(const From* x, To* out, int64_t count) {
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * W;
  if (first >= count) return;
  const Elements<From, W> in = *reinterpret_cast<const Elements<From, W>*>(x + first);
  Elements<To, W> converted;
#pragma unroll
  for (int w = 0; w < W; ++w) converted.v[w] = narrow<To>(widen(in.v[w]));
  *reinterpret_cast<Elements<To, W>*>(out + first) = converted;
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t total) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) y[i] += bias[i % n];
}

constexpr int kArgmaxThreads = 1024;

// One block per row: each thread scans a strided slice, then the block reduces (value, index).
// A row is read four at a time (16-byte loads, four of them in flight a thread) from its first
// 16-byte boundary, the few before it and after the last whole four one at a time: one
// multiprocessor reads the whole row (a vocabulary's logits), so what it keeps in flight sets
// the time.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* x, int64_t n, int32_t* out) {
  const float* row = x + blockIdx.x * n;
  float best = -INFINITY;
  int64_t best_at = n;
  // The larger value wins, then the smaller index, whatever order a thread sees them in; NaN
  // never does.
  const auto consider = [&](float v, int64_t i) {
    if (v > best || (v == best && i < best_at)) best = v, best_at = i;
  };
  const int64_t head = before_boundary(row, n), quads = (n - head) / 4, tail = head + 4 * quads;
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) consider(row[i], i);
  for (int64_t i = tail + threadIdx.x; i < n; i += blockDim.x) consider(row[i], i);
  const auto* fours = reinterpret_cast<const float4*>(row + head);
#pragma unroll 4
  for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
    const float4 v = fours[q];
    const int64_t at = head + 4 * q;
    consider(v.x, at), consider(v.y, at + 1), consider(v.z, at + 2), consider(v.w, at + 3);
  }
  __shared__ float values[kArgmaxThreads];
  __shared__ int64_t indices[kArgmaxThreads];
  values[threadIdx.x] = best;
  indices[threadIdx.x] = best_at;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float v = values[threadIdx.x + half];
      const int64_t at = indices[threadIdx.x + half];
      if (v > values[threadIdx.x] || (v == values[threadIdx.x] && at < indices[threadIdx.x])) {
        values[threadIdx.x] = v;
        indices[threadIdx.x] = at;
      }
    }
    __syncthreads();
  }
  // A row of NaN or -inf only has no larger value: index 0, as std::max_element gives. So does a
  // NaN first element: std::max_element compares with `<`, so nothing ever replaces it.
  if (threadIdx.x == 0) {
    out[blockIdx.x] = static_cast<int32_t>(indices[0] < n && !isnan(row[0]) ? indices[0] : 0);
  }
}

// The fused program's stack for W elements at once: a slot is named through comparisons with
// every slot index, which the compiler unrolls into selects, so the W-wide stack stays in
// registers.
template <int W>
struct EwStack {
  float slot[kMaxEwDepth][W];

  __device__ __forceinline__ void read(int at, float (&v)[W]) const {
#pragma unroll
    for (int j = 0; j < kMaxEwDepth; ++j) {
      if (j == at) {
#pragma unroll
        for (int w = 0; w < W; ++w) v[w] = slot[j][w];
      }
    }
  }
  __device__ __forceinline__ void write(int at, const float (&v)[W]) {
#pragma unroll
    for (int j = 0; j < kMaxEwDepth; ++j) {
      if (j == at) {
#pragma unroll
        for (int w = 0; w < W; ++w) slot[j][w] = v[w];
      }
    }
  }
};

// Elements first .. first + W - 1 of a T input, widened into a.
template <typename T, int W>
__device__ __forceinline__ void load_widened(const void* input, int64_t first, float (&a)[W]) {
  const Elements<T, W> v =
      *reinterpret_cast<const Elements<T, W>*>(static_cast<const T*>(input) + first);
#pragma unroll
  for (int w = 0; w < W; ++w) a[w] = widen(v.v[w]);
}

// Elements W * i .. W * i + W - 1 for thread i (W = 4: every input and out aligned to four of its
// elements and count a multiple of 4, each side moved as one vector), written as T; a paired
// program's second result `program.second` elements further on (a multiple of four).
template <int W, typename T>
__global__ void elementwise_kernel(const EwKernelProgram program, int64_t count, T* out) {
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * W;
  if (first >= count) return;
  EwStack<W> stack{};
  int top = -1;
  float a[W] = {}, b[W] = {};
  for (int p = 0; p < program.count; ++p) {
    const auto code = static_cast<graph::EwCode>(program.code[p]);
    if (code == graph::EwCode::kLoad) {
      const int operand = program.operand[p];
      if ((program.bf16_inputs >> operand) & 1u) {
        load_widened<__nv_bfloat16>(program.inputs[operand], first, a);
      } else {
        load_widened<float>(program.inputs[operand], first, a);
      }
      stack.write(++top, a);
      continue;
    }
    const bool binary = code == graph::EwCode::kAdd || code == graph::EwCode::kMul ||
                        code == graph::EwCode::kSiluGrad;
    if (binary) {
      stack.read(top--, b);  // the operand pushed last
    }
    stack.read(top, a);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      switch (code) {
        case graph::EwCode::kAdd:
          a[w] += b[w];
          break;
        case graph::EwCode::kMul:
          a[w] *= b[w];
          break;
        case graph::EwCode::kSilu:
          a[w] = silu(a[w]);
          break;
        case graph::EwCode::kScale:
          a[w] *= program.scalar[p];
          break;
        case graph::EwCode::kSiluGrad: {  // a = x, b = dy
          const float sigmoid = 1.f / (1.f + expf(-a[w]));
          a[w] = b[w] * sigmoid * (1.f + a[w] * (1.f - sigmoid));
          break;
        }
        case graph::EwCode::kLoad:
          break;
      }
    }
    stack.write(top, a);
  }
  for (int r = 0; r < program.results; ++r) {
    stack.read(r, a);
    Elements<T, W> result;
#pragma unroll
    for (int w = 0; w < W; ++w) result.v[w] = narrow<T>(a[w]);
    *reinterpret_cast<Elements<T, W>*>(out + r * program.second + first) = result;
  }
}

}  // namespace
}  // namespace tfm::cuda
