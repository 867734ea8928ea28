#include "backends/cuda/flash_attention_steps.h"

#include <string>

#include "backends/cuda/attention_steps.h"
#include "backends/cuda/kernels.h"
#include "fusion/plan.h"
#include "tfm/error.h"

namespace tfm::cuda {

size_t saved_score_grad_bytes(const KernelOptions& kernels) {
  if (kernels.saved_score_grad_mib < 0 || kernels.saved_score_grad_mib > (int64_t{1} << 20)) {
    throw Error("[cuda] saved_score_grad_mib must be 0 to 1048576, not " +
                std::to_string(kernels.saved_score_grad_mib));
  }
  return static_cast<size_t>(kernels.saved_score_grad_mib) << 20;
}

namespace {

// Where a forward attention that saves its rows' statistics leaves them: `at` bytes into the
// buffer of value `id` (graph::second_result_bytes).
float* row_lse_in(StepContext& c, size_t id, int64_t at) {
  return reinterpret_cast<float*>(static_cast<char*>(c.ptrs[id]) + at);
}

}  // namespace

Step flash_attention_step(const graph::Graph& graph, const graph::Node& n, size_t out) {
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  const DType out_dtype = n.dtype;
  const graph::AttentionArgs a = graph::attention_args(n);
  const int64_t lse_at = n.saves_row_stats ? fusion::second_result_bytes(n, kArenaAlignment) : -1;
  return [=](StepContext& c) {
    flash_attention(c.ptrs[slot(a.q)], DType::bf16, c.ptrs[slot(a.k)], c.ptrs[slot(a.v)],
                    i32_at(c, slot(a.mask)), i32_at(c, slot(a.slots)), shape, scale, c.ptrs[out],
                    out_dtype, lse_at >= 0 ? row_lse_in(c, out, lse_at) : nullptr, nullptr, nullptr,
                    c.stream);
  };
}

Step flash_attention_grad_step(const graph::Graph& graph, const graph::Node& n, size_t out,
                               const fusion::Plan* plan, const KernelOptions& kernels) {
  if (n.dtype != DType::bf16) {
    throw Error("[cuda attention_grad] flash-style writes bf16 gradients (bf16 q and dy), not " +
                std::string(dtype_name(n.dtype)));
  }
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  const graph::AttentionGradArgs a = graph::attention_grad_args(n);
  // The forward attention it reads (graph::save_attention_statistics) left its rows' statistics
  // where its own step ran flash-style too.
  const graph::Node* forward = a.forward >= 0 ? &node_of(graph, a.forward) : nullptr;
  const bool saved = forward != nullptr && forward->saves_row_stats &&
                     attention_path(graph, *forward, plan, kernels) == AttentionPath::kFlash;
  const size_t budget = saved_score_grad_bytes(kernels);
  const DType forward_dtype = saved ? forward->dtype : DType::f32;
  const int64_t lse_at = saved ? fusion::second_result_bytes(*forward, kArenaAlignment) : -1;
  return [=](StepContext& c) {
    const SavedForward from_forward = saved ? SavedForward{c.ptrs[slot(a.forward)], forward_dtype,
                                                           row_lse_in(c, slot(a.forward), lse_at)}
                                            : SavedForward{};
    flash_attention_grad(c.ptrs[slot(a.q)], c.ptrs[slot(a.k)], c.ptrs[slot(a.v)],
                         i32_at(c, slot(a.mask)), i32_at(c, slot(a.slots)), c.ptrs[slot(a.dy)],
                         shape, scale, from_forward, budget, c.ptrs[out], c.scratch, c.stream);
  };
}

}  // namespace tfm::cuda
