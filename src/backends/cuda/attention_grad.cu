// Attention's backward pass. The probabilities are recomputed rather than stored: [S, L] per head
// would not fit for long sequences. With P the softmax of the scaled scores over the visible keys
// and dP = dy v^T:
//   delta_i = sum_j P_ij dP_ij,  dS = P * (dP - delta),
//   dq = scale dS k,  dk = scale dS^T q,  dv = P^T dy  (dk and dv summed over a KV head's group).
// Three kernels, each one block per output row whose kWarps warps split the row's loop and add
// their partial sums in warp order (no atomics, the same bits every run):
//   row_stats  per (batch, query, q head): the softmax maximum, 1 / sum and delta;
//   query_grad per (batch, query, q head): dq, over the keys the query sees;
//   key_grad   per (batch, key, kv head):  dk and dv, over the queries (and heads) that see it.
// As in the forward kernel, each lane holds E elements of a head_dim row in registers.
#include "backends/cuda/attention_grad_kernels.cuh"
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

template <int E>
void launch(const Operands& o, const AttentionShape& s, float scale, float* out, RowStats* stats,
            cudaStream_t stream) {
  const int64_t q_rows = s.batch * s.seq * s.q_heads, kv_rows = s.batch * s.cache_len * s.kv_heads;
  float* dq = out;
  float* dk = dq + q_rows * s.head_dim;
  float* dv = dk + kv_rows * s.head_dim;
  constexpr int kThreads = kWarps * 32;
  // A grid of no blocks fails to launch: no queries still leave zero dk and dv, and no keys a
  // zero dq (the queries see nothing).
  if (q_rows > 0) {
    row_stats_kernel<E><<<static_cast<unsigned>(q_rows), kThreads, 0, stream>>>(o, s, scale, stats);
    check_launch("attention_grad_row_stats");
    query_grad_kernel<E>
        <<<static_cast<unsigned>(q_rows), kThreads, 0, stream>>>(o, s, scale, stats, dq);
    check_launch("attention_grad_query");
  }
  if (kv_rows > 0) {
    key_grad_kernel<E>
        <<<static_cast<unsigned>(kv_rows), kThreads, 0, stream>>>(o, s, scale, stats, dk, dv);
    check_launch("attention_grad_key");
  }
}

}  // namespace

size_t attention_grad_scratch_bytes(const AttentionShape& shape) {
  return static_cast<size_t>(shape.batch * shape.seq * shape.q_heads) * sizeof(RowStats);
}

void attention_grad(const float* q, const float* k, const float* v, const int32_t* mask,
                    const int32_t* slots, const float* dy, const AttentionShape& shape, float scale,
                    float* out, void* scratch, cudaStream_t stream) {
  const Operands o{q, k, v, dy, mask, slots};
  auto* stats = static_cast<RowStats*>(scratch);
  const int64_t per_lane = (shape.head_dim + 31) / 32;
  if (per_lane <= 1) {
    launch<1>(o, shape, scale, out, stats, stream);
  } else if (per_lane <= 2) {
    launch<2>(o, shape, scale, out, stats, stream);
  } else if (per_lane <= 4) {
    launch<4>(o, shape, scale, out, stats, stream);
  } else if (per_lane <= 8) {
    launch<8>(o, shape, scale, out, stats, stream);
  } else {
    throw Error("[cuda attention_grad] head_dim " + std::to_string(shape.head_dim) +
                " is larger than the supported 256");
  }
}

}  // namespace tfm::cuda
