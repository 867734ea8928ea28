// Attention over the static KV cache, split-K style (prefill over a bf16 cache runs flash-style,
// flash_attention.cu): each block runs an online softmax over one chunk of the keys its query
// sees for one (batch, query, head), its warps taking every kWarps-th key, and the last of a row's
// blocks to finish merges the chunks (one launch in all). Query heads of a group read the same KV
// head (grouped-query).
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/overlapped_launch.h"
#include "backends/cuda/split_attention_kernel.cuh"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

// Where a launch writes: the chunks' partial results, the rows' arrival counters, the output;
// and the decode step's fresh token, when prepare_attention is fused in.
struct Targets {
  float* partials;
  unsigned* arrivals;
  float* out;
  FreshToken fresh;
};

template <typename KV, int E>
void launch_partials(const float* q, const void* k, const void* v, const int32_t* mask,
                     const int32_t* slots, const AttentionShape& s, float scale, Split split,
                     const Targets& t, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.batch * s.seq * s.q_heads),
                  static_cast<unsigned>(split.count));
  launch_overlapped("attention", attention_partial_kernel<KV, E>, grid, kWarps * 32, 0, stream, q,
                    static_cast<const KV*>(k), static_cast<const KV*>(v), mask, slots, s, scale,
                    t.partials, t.arrivals, t.out, t.fresh);
}

template <typename KV>
void launch_for_head_dim(const float* q, const void* k, const void* v, const int32_t* mask,
                         const int32_t* slots, const AttentionShape& s, float scale, Split split,
                         const Targets& t, cudaStream_t stream) {
  const int64_t per_lane = (s.head_dim + 31) / 32;
  if (per_lane <= 1) {
    launch_partials<KV, 1>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 2) {
    launch_partials<KV, 2>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 4) {
    launch_partials<KV, 4>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else if (per_lane <= 8) {
    launch_partials<KV, 8>(q, k, v, mask, slots, s, scale, split, t, stream);
  } else {
    throw Error("[cuda attention] head_dim " + std::to_string(s.head_dim) +
                " is larger than the supported 256");
  }
}

}  // namespace

size_t attention_scratch_bytes(const AttentionShape& shape, DType kv_dtype) {
  if (flash_attention_applies(shape, kv_dtype)) return flash_attention_scratch_bytes(shape);
  const Split split = split_of(shape);
  return static_cast<size_t>(shape.batch * shape.seq * shape.q_heads * split.count *
                             (shape.head_dim + 2)) *
         sizeof(float);
}

void attention(const float* q, const void* k, const void* v, DType kv_dtype, const int32_t* mask,
               const int32_t* slots, const AttentionShape& shape, float scale, float* out,
               void* scratch, unsigned* arrivals, const FreshToken* fresh, cudaStream_t stream) {
  if (fresh != nullptr && (shape.seq != 1 || flash_attention_applies(shape, kv_dtype))) {
    throw Error("[cuda attention] prepare_attention is fused in only for one new token a row");
  }
  if (shape.batch * shape.seq * shape.q_heads == 0) return;  // a grid of 0 blocks is a launch error
  if (flash_attention_applies(shape, kv_dtype)) {
    flash_attention(q, DType::f32, k, v, mask, slots, shape, scale, out, DType::f32, nullptr,
                    scratch, arrivals, stream);
    return;
  }
  const Split split = split_of(shape);
  const Targets t{static_cast<float*>(scratch), arrivals, out,
                  fresh != nullptr ? *fresh : FreshToken{}};
  with_float_type(kv_dtype, "attention", [&](auto type) {
    using T = typename decltype(type)::type;
    launch_for_head_dim<T>(q, k, v, mask, slots, shape, scale, split, t, stream);
  });
  check_launch("attention");
}

}  // namespace tfm::cuda
