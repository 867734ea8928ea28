#include "backends/cuda/attention_steps.h"

#include <memory>
#include <string>

#include "backends/cuda/attention_fusion.h"
#include "backends/cuda/attention_product_steps.h"
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/flash_attention_steps.h"
#include "graph/effects.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Node;
using graph::Op;

// A prepare_attention node's inputs as its step reads them.
AttentionInputs attention_inputs(StepContext& c, const graph::PrepareAttentionArgs& a) {
  const bool norms = a.q_norm >= 0;
  return {.q = f32_at(c, slot(a.q)),
          .k = f32_at(c, slot(a.k)),
          .v = f32_at(c, slot(a.v)),
          .positions = i32_at(c, slot(a.positions)),
          .slots = i32_at(c, slot(a.slots)),
          .inv_freq = f32_at(c, slot(a.inv_freq)),
          .q_norm = norms ? f32_at(c, slot(a.q_norm)) : nullptr,
          .k_norm = norms ? f32_at(c, slot(a.k_norm)) : nullptr};
}

// Whether no kernel of the step writes what fused decode attention reads of its keys, so that it
// may read them before it waits for the kernel before (FreshToken::keys_before_wait): the mask
// and the slots are the run's inputs, and the caches are state that no node but the attention,
// the prepare folded into it and the caches' views after that prepare takes.
bool keys_written_by_no_step(const graph::Graph& graph, const Node& n, graph::ValueId attention,
                             graph::ValueId prepare) {
  const graph::AttentionArgs a = graph::attention_args(n);
  const graph::ValueId k_cache = graph::storage_of(graph, a.k),
                       v_cache = graph::storage_of(graph, a.v);
  const auto run_input = [&](graph::ValueId v, bool state) {
    const Node& x = node_of(graph, v);
    return x.op == Op::kInput && x.is_state == state;
  };
  if (!run_input(k_cache, true) || !run_input(v_cache, true) || !run_input(a.mask, false) ||
      !run_input(a.slots, false)) {
    return false;
  }
  for (size_t j = 0; j < graph.nodes.size(); ++j) {
    const Node& other = graph.nodes[j];
    const auto id = static_cast<graph::ValueId>(j);
    if (id == attention || id == prepare || id == a.k || id == a.v) continue;
    for (graph::ValueId x : other.inputs) {
      if (x == k_cache || x == v_cache) return false;
    }
  }
  return true;
}

// Device memory on the current device, zeroed before any step runs.
std::shared_ptr<void> zeroed_device_buffer(size_t bytes) {
  int device = 0;
  TFM_CUDA(cudaGetDevice(&device));
  std::shared_ptr<void> buffer = device_allocate(device, bytes);
  device_fill_zero(buffer.get(), bytes, device);
  return buffer;
}

// The forward attention's operands of an attention or its gradient.
graph::AttentionArgs operands(const Node& n) {
  return n.op == Op::kAttention ? graph::attention_args(n)
                                : graph::attention_operands(graph::attention_grad_args(n));
}

Step split_keys_step(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = node_of(graph, id);
  const graph::AttentionArgs a = graph::attention_args(n);
  // graph::fold_casts gives a bf16 output to autocast's attention (bf16 q) alone.
  if (n.dtype != DType::f32) {
    throw Error("[cuda attention] f32 q writes an f32 output, not " +
                std::string(dtype_name(n.dtype)));
  }
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  const DType kv_dtype = node_of(graph, a.k).dtype;
  const size_t q = slot(a.q), k = slot(a.k), v = slot(a.v), mask = slot(a.mask),
               slots = slot(a.slots), out = slot(id);
  // The step owns its rows' arrival counters (split keys): each launch leaves them zero for the
  // next.
  const std::shared_ptr<void> arrivals = zeroed_device_buffer(
      static_cast<size_t>(shape.batch * shape.seq * shape.q_heads) * sizeof(unsigned));
  return [=](StepContext& c) {
    attention(f32_at(c, q), c.ptrs[k], c.ptrs[v], kv_dtype, i32_at(c, mask), i32_at(c, slots),
              shape, scale, f32_at(c, out), c.scratch, static_cast<unsigned*>(arrivals.get()),
              nullptr, c.stream);
  };
}

Step fused_decode_step(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = node_of(graph, id);
  const graph::AttentionArgs a = graph::attention_args(n);
  const Node& prepare_node = node_of(graph, a.q);
  const graph::PrepareAttentionArgs prepare = graph::prepare_attention_args(prepare_node);
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale, eps = prepare_node.eps, scaling = prepare_node.scale;
  const DType kv_dtype = node_of(graph, a.k).dtype;
  const size_t k = slot(a.k), v = slot(a.v), mask = slot(a.mask), slots = slot(a.slots),
               out = slot(id);
  const bool keys_before_wait = keys_written_by_no_step(graph, n, id, a.q);
  const std::shared_ptr<void> arrivals = zeroed_device_buffer(
      static_cast<size_t>(shape.batch * shape.seq * shape.q_heads) * sizeof(unsigned));
  return [=](StepContext& c) {
    const FreshToken fresh{attention_inputs(c, prepare), eps, scaling, keys_before_wait};
    attention(nullptr, c.ptrs[k], c.ptrs[v], kv_dtype, i32_at(c, mask), i32_at(c, slots), shape,
              scale, f32_at(c, out), c.scratch, static_cast<unsigned*>(arrivals.get()), &fresh,
              c.stream);
  };
}

Step split_keys_grad_step(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = node_of(graph, id);
  const graph::AttentionGradArgs a = graph::attention_grad_args(n);
  const auto dtype = [&](graph::ValueId v) { return node_of(graph, v).dtype; };
  if (dtype(a.k) != DType::f32 || dtype(a.v) != DType::f32 || dtype(a.dy) != DType::f32) {
    throw Error("[cuda attention_grad] f32 q needs f32 keys, values and dy, got " +
                std::string(dtype_name(dtype(a.k))) + ", " + std::string(dtype_name(dtype(a.v))) +
                " and " + std::string(dtype_name(dtype(a.dy))));
  }
  const AttentionShape shape = attention_shape(graph, n);
  const float scale = n.scale;
  const size_t q = slot(a.q), k = slot(a.k), v = slot(a.v), mask = slot(a.mask),
               slots = slot(a.slots), dy = slot(a.dy), out = slot(id);
  return [=](StepContext& c) {
    attention_grad(f32_at(c, q), f32_at(c, k), f32_at(c, v), i32_at(c, mask), i32_at(c, slots),
                   f32_at(c, dy), shape, scale, f32_at(c, out), c.scratch, c.stream);
  };
}

}  // namespace

AttentionPath attention_path(const graph::Graph& graph, const Node& n, const fusion::Plan* plan,
                             const KernelOptions& kernels) {
  const graph::AttentionArgs a = operands(n);
  const auto bf16 = [&](graph::ValueId v) { return node_of(graph, v).dtype == DType::bf16; };
  if (bf16(a.q) && bf16(a.k) && bf16(a.v)) {
    // The flash kernels have no sliding window.
    const bool flash =
        n.window == 0 && flash_attention_applies(attention_shape(graph, n), DType::bf16);
    if (n.op == Op::kAttention) return flash ? AttentionPath::kFlash : AttentionPath::kProducts;
    const bool bf16_dy = bf16(graph::attention_grad_args(n).dy);
    return flash && bf16_dy && kernels.flash_attention_grad ? AttentionPath::kFlash
                                                            : AttentionPath::kProducts;
  }
  if (bf16(a.q)) return AttentionPath::kProducts;
  if (n.op == Op::kAttention && prepare_folds_into_attention(graph, a.q, plan)) {
    return AttentionPath::kFusedDecode;
  }
  return AttentionPath::kSplitKeys;
}

size_t attention_step_scratch_bytes(const graph::Graph& graph, const Node& n,
                                    const fusion::Plan* plan, const KernelOptions& kernels) {
  const AttentionShape shape = attention_shape(graph, n);
  const bool forward = n.op == Op::kAttention;
  switch (attention_path(graph, n, plan, kernels)) {
    case AttentionPath::kFlash:
      return forward ? 0
                     : flash_attention_grad_scratch_bytes(shape, saved_score_grad_bytes(kernels));
    case AttentionPath::kProducts:
      return attention_products_scratch_bytes(shape, !forward);
    default:
      return forward ? attention_scratch_bytes(shape, node_of(graph, operands(n).k).dtype)
                     : attention_grad_scratch_bytes(shape);
  }
}

Step attention_step(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
                    const KernelOptions& kernels) {
  const Node& n = node_of(graph, id);
  const bool forward = n.op == Op::kAttention;
  switch (attention_path(graph, n, plan, kernels)) {
    case AttentionPath::kFlash:
      return forward ? flash_attention_step(graph, n, slot(id))
                     : flash_attention_grad_step(graph, n, slot(id), plan, kernels);
    case AttentionPath::kProducts:
      return forward ? attention_products_step(graph, n, slot(id))
                     : attention_grad_products_step(graph, n, slot(id));
    case AttentionPath::kFusedDecode:
      return fused_decode_step(graph, id);
    case AttentionPath::kSplitKeys:
      break;
  }
  return forward ? split_keys_step(graph, id) : split_keys_grad_step(graph, id);
}

Step prepare_attention_step(const graph::Graph& graph, graph::ValueId id,
                            const fusion::Plan* plan) {
  if (prepare_folds_into_attention(graph, id, plan)) return [](StepContext&) {};
  const Node& n = node_of(graph, id);
  const graph::PrepareAttentionArgs a = graph::prepare_attention_args(n);
  const Shape q = node_of(graph, a.q).shape, cache = node_of(graph, a.k_cache).shape;
  const AttentionShape shape{q[0], q[1], cache[1], q[2], cache[2], q[3]};
  const DType cache_dtype = node_of(graph, a.k_cache).dtype;
  const float eps = n.eps, scaling = n.scale;
  const size_t k_cache = slot(a.k_cache), v_cache = slot(a.v_cache), out = slot(id);
  return [=](StepContext& c) {
    prepare_attention(attention_inputs(c, a), shape, eps, scaling, c.ptrs[k_cache], c.ptrs[v_cache],
                      cache_dtype, f32_at(c, out), c.stream);
  };
}

}  // namespace tfm::cuda
