#include "backends/cuda/steps.h"

#include <array>
#include <memory>
#include <optional>

#include "backends/cuda/attention_steps.h"
#include "backends/cuda/collective_steps.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "backends/cuda/moe_steps.h"
#include "backends/cuda/product_steps.h"
#include "backends/cuda/training_steps.h"
#include "fusion/plan.h"
#include "graph/effects.h"
#include "tfm/error.h"

namespace tfm::cuda {

int64_t rows_of(const Shape& shape) { return shape_numel(shape) / shape.back(); }

const graph::Node& node_of(const graph::Graph& graph, graph::ValueId id) {
  return graph.nodes[static_cast<size_t>(id)];
}

namespace {

// The alignment in bytes (a power of two, at most 256) a value's start is sure to have on every
// run. A computed value owns an arena offset, which fusion::Plan aligns to kArenaAlignment (an
// eager run's own buffers are allocations, aligned as much); a weight already on the device is
// used where it is (a view into training's flat parameters, say), any other is uploaded into an
// allocation (256-aligned); an input may be the caller's device tensor used where it is (a state
// buffer, or any input of an eager run), so only its element alignment is sure; a view starts
// `start` elements into its input.
uint32_t known_alignment(const graph::Graph& graph, graph::ValueId id) {
  uint64_t offset = 0;
  auto alignment = static_cast<uint32_t>(kArenaAlignment);
  for (;;) {
    const graph::Node& n = graph.nodes[static_cast<size_t>(id)];
    if (n.op == graph::Op::kView) {
      offset += static_cast<uint64_t>(n.start) * dtype_size(n.dtype);
    } else if (n.op == graph::Op::kWeight) {
      if (n.constant.device().type == "cuda") {
        offset += reinterpret_cast<uintptr_t>(n.constant.data());
      }
      alignment = 256;
      break;
    } else if (n.op == graph::Op::kInput) {
      alignment = static_cast<uint32_t>(dtype_size(n.dtype));
      break;
    } else if (!graph::aliases_input(n)) {
      break;
    }
    id = n.op == graph::Op::kView ? graph::view_args(n).x : n.inputs[0];
  }
  while (offset % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace

MatmulOperand matmul_operand(uint32_t start_alignment, uint64_t row_bytes, bool transposed) {
  uint32_t alignment = start_alignment;
  while (row_bytes % alignment != 0) alignment /= 2;
  return {transposed, alignment};
}

MatmulOperand matmul_operand(const graph::Graph& graph, graph::ValueId id, bool transposed) {
  const graph::Node& n = graph.nodes[static_cast<size_t>(id)];
  return matmul_operand(known_alignment(graph, id),
                        static_cast<uint64_t>(n.shape.back()) * dtype_size(n.dtype), transposed);
}

AttentionShape attention_shape(const graph::Graph& graph, const graph::Node& n) {
  const graph::AttentionArgs a = n.op == graph::Op::kAttention
                                     ? graph::attention_args(n)
                                     : graph::attention_operands(graph::attention_grad_args(n));
  const Shape& q = node_of(graph, a.q).shape;
  const Shape& k = node_of(graph, a.k).shape;
  return {q[0], q[1], k[1], q[2], k[2], q[3], n.window};
}

EwKernelProgram to_kernel_program(const graph::ElementwiseProgram& program, size_t inputs) {
  if (program.instrs.size() > static_cast<size_t>(kMaxEwInstrs) ||
      inputs > static_cast<size_t>(kMaxEwInputs)) {
    throw Error("[cuda elementwise] fused chain of " + std::to_string(program.instrs.size()) +
                " ops over " + std::to_string(inputs) + " inputs exceeds the kernel's " +
                std::to_string(kMaxEwInstrs) + " ops and " + std::to_string(kMaxEwInputs) +
                " inputs");
  }
  if (graph::program_depth(program) > kMaxEwDepth) {
    throw Error("[cuda elementwise] fused chain needs more than " + std::to_string(kMaxEwDepth) +
                " temporaries");
  }
  if (program.results < 1 || program.results > 2) {
    throw Error("[cuda elementwise] a chain of " + std::to_string(program.results) +
                " results; the kernel writes one or two");
  }
  EwKernelProgram k;
  k.count = static_cast<int>(program.instrs.size());
  k.results = program.results;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    k.code[i] = static_cast<uint8_t>(program.instrs[i].code);
    k.operand[i] = static_cast<uint8_t>(program.instrs[i].operand);
    k.scalar[i] = program.instrs[i].scalar;
  }
  return k;
}

namespace {

using graph::Node;
using graph::Op;

}  // namespace

size_t scratch_bytes(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
                     const KernelOptions& kernels) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  if (n.op == Op::kAttention || n.op == Op::kAttentionGrad) {
    return attention_step_scratch_bytes(graph, n, plan, kernels);
  }
  if (const size_t bytes = collective_scratch_bytes(graph, id)) return bytes;
  if (const size_t bytes = moe_scratch_bytes(graph, id)) return bytes;
  if (n.op == Op::kLinear || n.op == Op::kGatedLinear || n.op == Op::kQkvLinear) {
    return product_scratch_bytes(graph, n);
  }
  return training_scratch_bytes(graph, id);
}

Step make_step(const graph::Graph& graph, graph::ValueId id, const fusion::Plan* plan,
               const KernelOptions& kernels) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  const auto node = [&](graph::ValueId v) -> const Node& { return node_of(graph, v); };
  const size_t out = slot(id);

  switch (n.op) {
    case Op::kEmbedding: {
      const graph::EmbeddingArgs a = graph::embedding_args(n);
      const DType dt = node(a.table).dtype;
      const int64_t vocab = node(a.table).shape[0], hidden = node(a.table).shape[1],
                    count = shape_numel(node(a.ids).shape), first_id = n.shard ? n.start : 0;
      const size_t table = slot(a.table), ids = slot(a.ids);
      return [=](StepContext& c) {
        embedding(c.ptrs[table], dt, first_id, vocab, hidden, i32_at(c, ids), count, f32_at(c, out),
                  c.stream);
      };
    }
    case Op::kLinear:
      return linear_step(graph, n, out);
    case Op::kGatedLinear:
      return gated_linear_step(graph, n, out);
    case Op::kQkvLinear:
      return qkv_linear_step(graph, n, out);
    case Op::kPrepareAttention:
      return prepare_attention_step(graph, id, plan);
    case Op::kCacheWrite: {
      const graph::CacheWriteArgs a = graph::cache_write_args(n);
      const Shape cache = node(a.cache).shape, update = node(a.update).shape;
      const DType cache_dtype = node(a.cache).dtype;
      const size_t into = slot(a.cache), rows = slot(a.update), slots = slot(a.slots);
      return [=](StepContext& c) {
        c.ptrs[out] = c.ptrs[into];
        cache_write(c.ptrs[into], cache_dtype, f32_at(c, rows), i32_at(c, slots), update[0],
                    cache[1], update[1], update[2] * update[3], c.stream);
      };
    }
    case Op::kRmsNorm: {
      const graph::RmsNormArgs a = graph::rms_norm_args(n);
      const int64_t rows = rows_of(n.shape), hidden = n.shape.back();
      const float eps = n.eps;
      const DType dtype = n.dtype, x_dtype = node(a.x).dtype;
      const size_t x = slot(a.x), w = slot(a.w);
      return [=](StepContext& c) {
        rms_norm(c.ptrs[x], x_dtype, f32_at(c, w), rows, hidden, eps, c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kRope: {
      const graph::RopeArgs a = graph::rope_args(n);
      const Shape s = n.shape;
      const float scaling = n.scale, eps = n.eps;
      const DType dtype = n.dtype, x_dtype = node(a.x).dtype;
      const bool normed = a.norm >= 0;
      const size_t x = slot(a.x), positions = slot(a.positions), inv_freq = slot(a.inv_freq),
                   norm = normed ? slot(a.norm) : 0;
      return [=](StepContext& c) {
        const HeadNorm head_norm{normed ? f32_at(c, norm) : nullptr, eps};
        rope(c.ptrs[x], x_dtype, i32_at(c, positions), f32_at(c, inv_freq), s[0], s[1], s[2], s[3],
             scaling, c.ptrs[out], dtype, c.stream, head_norm);
      };
    }
    case Op::kAccumulate: {
      const graph::AccumulateArgs a = graph::accumulate_args(n);
      const int64_t count = shape_numel(n.shape);
      const size_t acc = slot(a.acc), x = slot(a.x);
      return [=](StepContext& c) {
        c.ptrs[out] = c.ptrs[acc];
        add_bias(f32_at(c, acc), f32_at(c, x), 1, count, c.stream);  // one row: acc += x
      };
    }
    case Op::kAttention:
    case Op::kAttentionGrad:
      return attention_step(graph, id, plan, kernels);
    case Op::kSliceSeq: {
      const graph::ValueId x_id = graph::operand(n);
      const Shape x = node(x_id).shape;
      const int64_t inner = shape_numel(x) / (x[0] * x[1]), start = n.start, length = n.shape[1];
      const size_t from = slot(x_id);
      return [=](StepContext& c) {
        slice_seq(f32_at(c, from), x[0], x[1], inner, start, length, f32_at(c, out), c.stream);
      };
    }
    case Op::kReshape: {
      const size_t x = slot(graph::operand(n));
      return [=](StepContext& c) { c.ptrs[out] = c.ptrs[x]; };
    }
    case Op::kView: {
      const size_t x = slot(graph::view_args(n).x);
      const size_t byte_offset = static_cast<size_t>(n.start) * dtype_size(n.dtype);
      return [=](StepContext& c) { c.ptrs[out] = static_cast<char*>(c.ptrs[x]) + byte_offset; };
    }
    case Op::kPad: {
      const graph::ValueId x_id = graph::operand(n);
      const size_t elem = dtype_size(n.dtype), offset = static_cast<size_t>(n.start) * elem,
                   bytes = static_cast<size_t>(shape_numel(node(x_id).shape)) * elem,
                   total = static_cast<size_t>(shape_numel(n.shape)) * elem;
      const size_t x = slot(x_id);
      return [=](StepContext& c) {
        auto* dst = static_cast<char*>(c.ptrs[out]);
        if (total > 0) TFM_CUDA(cudaMemsetAsync(dst, 0, total, c.stream));
        if (bytes > 0) {
          TFM_CUDA(
              cudaMemcpyAsync(dst + offset, c.ptrs[x], bytes, cudaMemcpyDeviceToDevice, c.stream));
        }
      };
    }
    case Op::kConcatRows: {
      std::vector<size_t> parts, bytes;
      for (graph::ValueId p : n.inputs) {
        parts.push_back(slot(p));
        bytes.push_back(static_cast<size_t>(shape_numel(node(p).shape)) * dtype_size(n.dtype));
      }
      return [=](StepContext& c) {
        auto* dst = static_cast<char*>(c.ptrs[out]);
        for (size_t i = 0; i < parts.size(); ++i) {
          if (bytes[i] > 0) {
            TFM_CUDA(cudaMemcpyAsync(dst, c.ptrs[parts[i]], bytes[i], cudaMemcpyDeviceToDevice,
                                     c.stream));
          }
          dst += bytes[i];
        }
      };
    }
    case Op::kElementwise: {
      EwKernelProgram program = to_kernel_program(n.program, n.inputs.size());
      if (program.results == 2) {
        program.second = fusion::second_result_bytes(n, kArenaAlignment) /
                         static_cast<int64_t>(dtype_size(n.dtype));
      }
      std::vector<size_t> operands;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const DType dtype = node(n.inputs[i]).dtype;
        check_float_kind(dtype, "elementwise");
        if (dtype == DType::bf16) program.bf16_inputs |= 1u << i;
        operands.push_back(slot(n.inputs[i]));
      }
      const int64_t count = shape_numel(n.shape);
      const DType dtype = n.dtype;
      return [=](StepContext& c) {
        EwKernelProgram bound = program;
        for (size_t i = 0; i < operands.size(); ++i) bound.inputs[i] = c.ptrs[operands[i]];
        elementwise(bound, count, c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kCast: {
      const graph::ValueId x_id = graph::operand(n);
      const DType from = node(x_id).dtype, to = n.dtype;
      const int64_t count = shape_numel(n.shape);
      const size_t x = slot(x_id);
      return [=](StepContext& c) { cast(c.ptrs[x], from, c.ptrs[out], to, count, c.stream); };
    }
    case Op::kArgmax: {
      const graph::ValueId x_id = graph::operand(n);
      const int64_t rows = rows_of(node(x_id).shape), cols = node(x_id).shape.back();
      const size_t x = slot(x_id);
      return [=](StepContext& c) {
        argmax_rows(f32_at(c, x), rows, cols, static_cast<int32_t*>(c.ptrs[out]), c.stream);
      };
    }
    default:
      if (std::optional<Step> step = make_collective_step(graph, id)) return *step;
      break;
  }
  if (auto s = make_training_step(graph, id)) return *s;
  if (auto s = make_moe_step(graph, id)) return *s;
  throw Error(std::string("[cuda] no kernel for op ") + graph::op_name(n.op) +
              (n.shard ? " (vocabulary shard)" : "") +
              " yet: run this graph with device_map=\"cpu\"");
}

}  // namespace tfm::cuda
