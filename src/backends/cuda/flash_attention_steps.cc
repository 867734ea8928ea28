#include "backends/cuda/flash_attention_steps.h"

#include <cstdlib>
#include <string>

#include "backends/cuda/kernels.h"
#include "graph/plan.h"
#include "tfm/error.h"

namespace tfm::cuda {

bool runs_flash_attention(const graph::Graph& graph, const graph::Node& n) {
  for (size_t i = 0; i < 3; ++i) {
    if (input(graph, n, i).dtype != DType::bf16) return false;
  }
  return flash_attention_applies(attention_shape(graph, n), DType::bf16);
}

bool runs_flash_attention_grad(const graph::Graph& graph, const graph::Node& n) {
  static const bool enabled = [] {
    const char* setting = std::getenv("TFM_CUDA_FLASH_GRAD");
    return setting == nullptr || std::string(setting) != "0";
  }();
  return enabled && runs_flash_attention(graph, n) && input(graph, n, 5).dtype == DType::bf16;
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
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  const int64_t lse_at = n.saves_row_stats ? graph::second_result_bytes(n) : -1;
  return [=](StepContext& c) {
    flash_attention(c.ptrs[args[0]], DType::bf16, c.ptrs[args[1]], c.ptrs[args[2]],
                    i32_at(c, args[3]), i32_at(c, args[4]), shape, scale, c.ptrs[out], out_dtype,
                    lse_at >= 0 ? row_lse_in(c, out, lse_at) : nullptr, nullptr, nullptr, c.stream);
  };
}

Step flash_attention_grad_step(const graph::Graph& graph, const graph::Node& n, size_t out) {
  if (n.dtype != DType::bf16) {
    throw Error("[cuda attention_grad] flash-style writes bf16 gradients (bf16 q and dy), not " +
                std::string(dtype_name(n.dtype)));
  }
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  // The forward attention it reads (graph::save_attention_statistics) left its rows' statistics
  // where its own step ran flash-style too.
  const graph::Node* forward = n.inputs.size() > 6 ? &input(graph, n, 6) : nullptr;
  const bool saved =
      forward != nullptr && forward->saves_row_stats && runs_flash_attention(graph, *forward);
  const DType forward_dtype = saved ? forward->dtype : DType::f32;
  const int64_t lse_at = saved ? graph::second_result_bytes(*forward) : -1;
  return [=](StepContext& c) {
    const SavedForward from_forward =
        saved ? SavedForward{c.ptrs[args[6]], forward_dtype, row_lse_in(c, args[6], lse_at)}
              : SavedForward{};
    flash_attention_grad(c.ptrs[args[0]], c.ptrs[args[1]], c.ptrs[args[2]], i32_at(c, args[3]),
                         i32_at(c, args[4]), c.ptrs[args[5]], shape, scale, from_forward,
                         c.ptrs[out], c.scratch, c.stream);
  };
}

}  // namespace tfm::cuda
