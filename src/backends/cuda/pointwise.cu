// Row-wise and element-wise kernels: memory bound, one thread per element or one warp per row.
#include <cuda_bf16.h>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pointwise_kernels.cuh"

namespace tfm::cuda {

void embedding(const void* table, DType table_dtype, int64_t first_id, int64_t vocab,
               int64_t hidden, const int32_t* ids, int64_t count, float* out, cudaStream_t stream) {
  if (count * hidden == 0) return;  // a grid of 0 blocks is a launch error
  with_float_type(table_dtype, "embedding", [&](auto type) {
    using T = typename decltype(type)::type;
    embedding_kernel<<<blocks_for(count * hidden, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(table), first_id, vocab, hidden, ids, count, out);
  });
  check_launch("embedding");
}

void rms_norm(const void* x, DType x_dtype, const float* w, int64_t rows, int64_t hidden, float eps,
              void* out, DType out_dtype, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of 0 blocks is a launch error
  with_float_types(x_dtype, out_dtype, "rms_norm", [&](auto in_type, auto out_type) {
    using X = typename decltype(in_type)::type;
    using T = typename decltype(out_type)::type;
    rms_norm_kernel<<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(
        static_cast<const X*>(x), w, rows, static_cast<int>(hidden), eps, static_cast<T*>(out));
  });
  check_launch("rms_norm");
}

namespace {

template <typename T, typename X>
void launch_rope(const X* x, const int32_t* positions, const float* inv_freq, int64_t tokens,
                 int64_t heads, int half, float attention_scaling, const HeadNorm& norm, T* out,
                 cudaStream_t stream) {
  if (norm.weight != nullptr) {
    normed_rope_kernel<<<blocks_for(tokens * heads * 32, kThreads), kThreads, 0, stream>>>(
        x, norm.weight, norm.eps, positions, inv_freq, tokens, heads, half, attention_scaling, out);
  } else {
    rope_kernel<<<blocks_for(tokens * heads * half, kThreads), kThreads, 0, stream>>>(
        x, positions, inv_freq, tokens, heads, half, attention_scaling, out);
  }
}

}  // namespace

void rope(const void* x, DType x_dtype, const int32_t* positions, const float* inv_freq,
          int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling,
          void* out, DType out_dtype, cudaStream_t stream, const HeadNorm& norm) {
  const int half = static_cast<int>(head_dim / 2);
  if (batch * seq * heads * half == 0) return;  // a grid of 0 blocks is a launch error
  with_float_types(x_dtype, out_dtype, "rope", [&](auto in_type, auto out_type) {
    using X = typename decltype(in_type)::type;
    using T = typename decltype(out_type)::type;
    launch_rope(static_cast<const X*>(x), positions, inv_freq, batch * seq, heads, half,
                attention_scaling, norm, static_cast<T*>(out), stream);
  });
  check_launch("rope");
}

void slice_seq(const float* x, int64_t batch, int64_t seq, int64_t inner, int64_t start,
               int64_t length, float* out, cudaStream_t stream) {
  const int64_t total = batch * length * inner;
  if (total == 0) return;  // a grid of 0 blocks is a launch error
  slice_seq_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(x, seq, inner, start,
                                                                         length, total, out);
  check_launch("slice_seq");
}

void cache_write(void* cache, DType cache_dtype, const float* update, const int32_t* slots,
                 int64_t batch, int64_t cache_len, int64_t seq, int64_t row_elems,
                 cudaStream_t stream) {
  const int64_t total = batch * seq * row_elems;
  if (total == 0) return;  // a grid of 0 blocks is a launch error
  with_float_type(cache_dtype, "cache_write", [&](auto type) {
    using T = typename decltype(type)::type;
    cache_write_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(cache), update, slots, seq, cache_len, row_elems, total);
  });
  check_launch("cache_write");
}

namespace {

template <typename From, typename To>
void launch_cast(const void* x, void* out, int64_t count, cudaStream_t stream) {
  const auto* from = static_cast<const From*>(x);
  auto* to = static_cast<To*>(out);
  const bool vectors = count % 4 == 0 && reinterpret_cast<uintptr_t>(x) % (4 * sizeof(From)) == 0 &&
                       reinterpret_cast<uintptr_t>(out) % (4 * sizeof(To)) == 0;
  if (vectors) {
    cast_kernel<From, To, 4>
        <<<blocks_for(count / 4, kThreads), kThreads, 0, stream>>>(from, to, count);
  } else {
    cast_kernel<From, To><<<blocks_for(count, kThreads), kThreads, 0, stream>>>(from, to, count);
  }
}

}  // namespace

void cast(const void* x, DType from, void* out, DType to, int64_t count, cudaStream_t stream) {
  if (count == 0) return;  // a grid of 0 blocks is a launch error
  with_float_type(from, "cast", [&](auto from_type) {
    with_float_type(to, "cast", [&](auto to_type) {
      launch_cast<typename decltype(from_type)::type, typename decltype(to_type)::type>(
          x, out, count, stream);
    });
  });
  check_launch("cast");
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows * n == 0) return;  // a grid of 0 blocks is a launch error
  add_bias_kernel<<<blocks_for(rows * n, kThreads), kThreads, 0, stream>>>(y, bias, n, rows * n);
  check_launch("add_bias");
}

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of 0 blocks is a launch error
  argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(x, n, out);
  check_launch("argmax");
}

namespace {

template <typename T>
void launch_elementwise(const EwKernelProgram& program, int64_t count, T* out,
                        cudaStream_t stream) {
  bool vectors = count % 4 == 0 && reinterpret_cast<uintptr_t>(out) % (4 * sizeof(T)) == 0;
  for (int p = 0; p < program.count; ++p) {
    if (static_cast<graph::EwCode>(program.code[p]) != graph::EwCode::kLoad) continue;
    const int operand = program.operand[p];
    const size_t size = (program.bf16_inputs >> operand) & 1u ? 2 : 4;
    vectors = vectors && reinterpret_cast<uintptr_t>(program.inputs[operand]) % (4 * size) == 0;
  }
  if (vectors) {
    elementwise_kernel<4>
        <<<blocks_for(count / 4, kThreads), kThreads, 0, stream>>>(program, count, out);
  } else {
    elementwise_kernel<1>
        <<<blocks_for(count, kThreads), kThreads, 0, stream>>>(program, count, out);
  }
}

}  // namespace

void elementwise(const EwKernelProgram& program, int64_t count, void* out, DType out_dtype,
                 cudaStream_t stream) {
  if (count == 0) return;  // a grid of 0 blocks is a launch error
  with_float_type(out_dtype, "elementwise", [&](auto type) {
    using T = typename decltype(type)::type;
    launch_elementwise(program, count, static_cast<T*>(out), stream);
  });
  check_launch("elementwise");
}

}  // namespace tfm::cuda
