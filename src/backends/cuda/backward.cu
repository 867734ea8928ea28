// The row-wise backward kernels: bias and norm-weight gradients (sums over rows), RMSNorm's input
// gradient, the embedding table's gradient and RoPE's. Sums run in double where the cpu's do and
// always in a fixed order, so a step's gradients are the same bits every run.
#include "backends/cuda/backward_device_kernels.cuh"
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

template <typename Term>
void column_sum(Term term, int64_t rows, int64_t n, float* out, void* partials, cudaStream_t stream,
                bool accumulate = false) {
  if (n == 0) return;  // a grid of no blocks fails to launch (no rows still write zeros)
  auto* chunk_sums = static_cast<double*>(partials);
  const dim3 grid(static_cast<unsigned>(blocks_for(n, kColumns)),
                  static_cast<unsigned>(row_chunks(rows)));
  column_chunk_sum_kernel<<<grid, dim3(kColumns, kRowSlices), 0, stream>>>(term, rows, n,
                                                                           chunk_sums);
  sum_chunks_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(chunk_sums, row_chunks(rows),
                                                                      n, accumulate, out);
}

}  // namespace

size_t reduce_rows_scratch_bytes(int64_t rows, int64_t n) {
  return static_cast<size_t>(row_chunks(rows) * n) * sizeof(double);
}

void reduce_rows(const float* x, int64_t rows, int64_t n, float* out, void* scratch,
                 cudaStream_t stream) {
  column_sum(Element{x, n}, rows, n, out, scratch, stream);
  check_launch("reduce_rows");
}

void rms_norm_grad_input(const void* x, DType x_dtype, const float* w, const float* dy,
                         const float* residual, int64_t rows, int64_t hidden, float eps, void* dx,
                         DType dx_dtype, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of no blocks fails to launch
  with_float_types(x_dtype, dx_dtype, "rms_norm_grad_input", [&](auto in_type, auto out_type) {
    using X = typename decltype(in_type)::type;
    using T = typename decltype(out_type)::type;
    rms_norm_grad_input_kernel<<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(
        static_cast<const X*>(x), w, dy, residual, rows, static_cast<int>(hidden), eps,
        static_cast<T*>(dx));
  });
  check_launch("rms_norm_grad_input");
}

namespace {

// Scratch: 1 / rms per row, then the column sum's partials, 8-byte aligned after the rows.
int64_t inv_rms_floats(int64_t rows) { return (rows + 1) / 2 * 2; }

}  // namespace

size_t rms_norm_grad_weight_scratch_bytes(int64_t rows, int64_t hidden) {
  return static_cast<size_t>(inv_rms_floats(rows)) * sizeof(float) +
         reduce_rows_scratch_bytes(rows, hidden);
}

void rms_norm_grad_weight(const void* x, DType x_dtype, const float* dy, int64_t rows,
                          int64_t hidden, float eps, float* dw, void* scratch, cudaStream_t stream,
                          bool accumulate) {
  auto* inv_rms = static_cast<float*>(scratch);
  with_float_type(x_dtype, "rms_norm_grad_weight", [&](auto type) {
    using X = typename decltype(type)::type;
    const auto* rows_x = static_cast<const X*>(x);
    // A grid of no blocks fails to launch; no rows still need dw's zeros from column_sum.
    if (rows > 0) {
      inv_rms_kernel<<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(
          rows_x, rows, static_cast<int>(hidden), eps, inv_rms);
      check_launch("rms_norm_grad_weight_inv_rms");
    }
    column_sum(NormalizedProduct<X>{rows_x, dy, inv_rms, hidden}, rows, hidden, dw,
               inv_rms + inv_rms_floats(rows), stream, accumulate);
  });
  check_launch("rms_norm_grad_weight");
}

namespace {

// The fused kernel's rows: up to 32 lanes x kMaxLaneColumns values. Wider rows take the two
// kernels above in turn.
constexpr int kMaxLaneColumns = 32;

bool fuses_norm_grads(int64_t hidden) { return hidden <= 32 * kMaxLaneColumns; }

// The fewest registers that hold a row: a power of two of columns per lane.
int lane_columns(int64_t hidden) {
  int columns = 4;
  while (32 * columns < hidden) columns *= 2;
  return columns;
}

// RoPE's gradient runs inside the fused kernel where each lane holds both values of a rotated
// pair: rows of exactly 32 x its columns.
bool rotates_in_registers(int64_t hidden) {
  return fuses_norm_grads(hidden) && hidden == 32 * lane_columns(hidden);
}

template <int kLaneColumns>
void launch_norm_grads(const void* x, DType x_dtype, const float* w, const void* dy, DType dy_dtype,
                       const float* residual, int64_t rows, int64_t hidden, float eps, void* dx,
                       DType dx_dtype, double* chunk_sums, const RopeRows& rope, void* bf16_copy,
                       cudaStream_t stream) {
  with_float_types(x_dtype, dx_dtype, "rms_norm_grads", [&](auto in_type, auto out_type) {
    with_float_type(dy_dtype, "rms_norm_grads", [&](auto dy_type) {
      using X = typename decltype(in_type)::type;
      using T = typename decltype(out_type)::type;
      using DY = typename decltype(dy_type)::type;
      rms_norm_grads_kernel<kLaneColumns, T, X, DY>
          <<<static_cast<unsigned>(norm_grad_chunks(rows)), kThreads, 0, stream>>>(
              static_cast<const X*>(x), w, static_cast<const DY*>(dy), residual, rows,
              static_cast<int>(hidden), eps, norm_grad_chunk_rows(rows), static_cast<T*>(dx),
              chunk_sums, rope, static_cast<__nv_bfloat16*>(bf16_copy));
    });
  });
}

// Bytes of scratch a rotated dy takes where the kernel cannot rotate it (rope_grad writes it
// whole first), aligned for what follows it.
size_t rotated_dy_bytes(int64_t rows, int64_t hidden, bool rotated) {
  if (!rotated || rotates_in_registers(hidden)) return 0;
  const size_t bytes =
      static_cast<size_t>(rows * hidden) * sizeof(float) + rope_grad_scratch_bytes(hidden);
  return (bytes + 255) / 256 * 256;
}

}  // namespace

size_t rms_norm_grads_scratch_bytes(int64_t rows, int64_t hidden, bool rotated) {
  const size_t sums = fuses_norm_grads(hidden)
                          ? static_cast<size_t>(norm_grad_chunks(rows) * hidden) * sizeof(double)
                          : rms_norm_grad_weight_scratch_bytes(rows, hidden);
  return rotated_dy_bytes(rows, hidden, rotated) + sums;
}

void rms_norm_grads(const void* x, DType x_dtype, const float* w, const void* dy, DType dy_dtype,
                    const float* residual, int64_t rows, int64_t hidden, float eps, void* dx,
                    DType dx_dtype, float* dw_acc, void* scratch, cudaStream_t stream,
                    const RopeRows* rope, void* bf16_copy) {
  RopeRows rotation = rope != nullptr ? *rope : RopeRows{};
  if (const size_t skip = rotated_dy_bytes(rows, hidden, rope != nullptr); skip > 0) {
    auto* rotated = static_cast<float*>(scratch);
    rope_grad(dy, dy_dtype, rope->positions, rope->inv_freq, rope->batch, rope->seq, rope->heads,
              hidden, rope->attention_scaling, rotated, DType::f32, rotated + rows * hidden,
              stream);
    dy = rotated;
    dy_dtype = DType::f32;
    rotation = {};
    scratch = static_cast<char*>(scratch) + skip;
  }
  if (!fuses_norm_grads(hidden)) {
    if (dy_dtype != DType::f32) {
      throw Error("[cuda rms_norm_grads] rows of " + std::to_string(hidden) +
                  " values take an f32 dy, got " + std::string(dtype_name(dy_dtype)));
    }
    const auto* dy32 = static_cast<const float*>(dy);
    rms_norm_grad_input(x, x_dtype, w, dy32, residual, rows, hidden, eps, dx, dx_dtype, stream);
    rms_norm_grad_weight(x, x_dtype, dy32, rows, hidden, eps, dw_acc, scratch, stream, true);
    if (bf16_copy != nullptr) cast(dx, dx_dtype, bf16_copy, DType::bf16, rows * hidden, stream);
    return;
  }
  if (rows == 0 || hidden == 0) return;  // no gradient to add; a grid of no blocks fails to launch
  auto* chunk_sums = static_cast<double*>(scratch);
  switch (lane_columns(hidden)) {
    case 4:
      launch_norm_grads<4>(x, x_dtype, w, dy, dy_dtype, residual, rows, hidden, eps, dx, dx_dtype,
                           chunk_sums, rotation, bf16_copy, stream);
      break;
    case 8:
      launch_norm_grads<8>(x, x_dtype, w, dy, dy_dtype, residual, rows, hidden, eps, dx, dx_dtype,
                           chunk_sums, rotation, bf16_copy, stream);
      break;
    case 16:
      launch_norm_grads<16>(x, x_dtype, w, dy, dy_dtype, residual, rows, hidden, eps, dx, dx_dtype,
                            chunk_sums, rotation, bf16_copy, stream);
      break;
    default:
      launch_norm_grads<kMaxLaneColumns>(x, x_dtype, w, dy, dy_dtype, residual, rows, hidden, eps,
                                         dx, dx_dtype, chunk_sums, rotation, bf16_copy, stream);
  }
  check_launch("rms_norm_grads");
  sum_chunks_kernel<<<blocks_for(hidden, kThreads), kThreads, 0, stream>>>(
      chunk_sums, norm_grad_chunks(rows), hidden, true, dw_acc);
  check_launch("rms_norm_grads_sum");
}

void embedding_grad(const float* dy, const int32_t* ids, int64_t count, int64_t vocab,
                    int64_t hidden, float* d_table, cudaStream_t stream, bool accumulate) {
  if (!accumulate) {
    TFM_CUDA(
        cudaMemsetAsync(d_table, 0, static_cast<size_t>(vocab * hidden) * sizeof(float), stream));
  }
  if (hidden == 0) return;  // a grid of no blocks fails to launch
  embedding_grad_kernel<<<blocks_for(hidden, kThreads), kThreads, 0, stream>>>(
      dy, ids, count, vocab, hidden, d_table);
  check_launch("embedding_grad");
}

size_t rope_grad_scratch_bytes(int64_t head_dim) {
  return static_cast<size_t>(head_dim / 2) * sizeof(float);
}

// Rotating by minus the angle is rotating with negated frequencies (the angle is position x
// frequency, and negation is exact): the forward kernel runs on a negated copy of inv_freq.
void rope_grad(const void* dy, DType dy_dtype, const int32_t* positions, const float* inv_freq,
               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling,
               void* dx, DType dx_dtype, void* scratch, cudaStream_t stream) {
  auto* negated = static_cast<float*>(scratch);
  const int64_t half = head_dim / 2;
  if (batch * seq * heads * half == 0) return;  // nothing to rotate; no grid may be empty
  negate_kernel<<<blocks_for(half, kThreads), kThreads, 0, stream>>>(inv_freq, half, negated);
  check_launch("rope_grad_negate");
  rope(dy, dy_dtype, positions, negated, batch, seq, heads, head_dim, attention_scaling, dx,
       dx_dtype, stream);
}

}  // namespace tfm::cuda
