#include "backends/cuda/flash_attention_steps.h"

#include <cstdlib>
#include <string>

#include "backends/cuda/kernels.h"
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

Step flash_attention_step(const graph::Graph& graph, const graph::Node& n, size_t out) {
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  const DType out_dtype = n.dtype;
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  return [=](StepContext& c) {
    flash_attention(c.ptrs[args[0]], DType::bf16, c.ptrs[args[1]], c.ptrs[args[2]],
                    i32_at(c, args[3]), i32_at(c, args[4]), shape, scale, c.ptrs[out], out_dtype,
                    nullptr, nullptr, c.stream);
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
  return [=](StepContext& c) {
    flash_attention_grad(c.ptrs[args[0]], c.ptrs[args[1]], c.ptrs[args[2]], i32_at(c, args[3]),
                         i32_at(c, args[4]), c.ptrs[args[5]], shape, scale, c.ptrs[out], c.scratch,
                         c.stream);
  };
}

}  // namespace tfm::cuda
