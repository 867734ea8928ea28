#include "backends/cuda/steps.h"

#include <array>
#include <memory>
#include <optional>

#include "backends/cuda/attention_product_steps.h"
#include "backends/cuda/collective_steps.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/flash_attention_steps.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "backends/cuda/product_steps.h"
#include "backends/cuda/training_steps.h"
#include "graph/attention_fusion.h"
#include "graph/plan.h"
#include "tfm/error.h"

namespace tfm::cuda {

int64_t rows_of(const Shape& shape) { return shape_numel(shape) / shape.back(); }

const graph::Node& input(const graph::Graph& graph, const graph::Node& n, size_t i) {
  return graph.nodes[static_cast<size_t>(n.inputs[i])];
}

namespace {

// The alignment in bytes (a power of two, at most 256) a value's start is sure to have on every
// run. A computed value owns an arena offset, which graph::Plan aligns to kArenaAlignment (an
// eager run's own buffers are allocations, aligned as much); a weight already on the device is
// used where it is (a view into training's flat parameters, say), any other is uploaded into an
// allocation (256-aligned); an input may be the caller's device tensor used where it is (a state
// buffer, or any input of an eager run), so only its element alignment is sure; a view starts
// `start` elements into its input.
uint32_t known_alignment(const graph::Graph& graph, graph::ValueId id) {
  uint64_t offset = 0;
  auto alignment = static_cast<uint32_t>(graph::kArenaAlignment);
  for (;;) {
    const graph::Node& n = graph.nodes[static_cast<size_t>(id)];
    if (n.op == graph::Op::kView) {
      offset += static_cast<uint64_t>(n.start) * dtype_size(n.dtype);
    } else if (n.op == graph::Op::kWeight) {
      if (n.constant.device().type == DeviceType::cuda) {
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
    id = n.inputs[0];
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
  const Shape& q = input(graph, n, 0).shape;
  const Shape& k = input(graph, n, 1).shape;
  return {q[0], q[1], k[1], q[2], k[2], q[3]};
}

EwKernelProgram to_kernel_program(const graph::ElementwiseProgram& program, size_t inputs) {
  if (program.instrs.size() > static_cast<size_t>(kMaxEwInstrs) ||
      inputs > static_cast<size_t>(kMaxEwInputs)) {
    throw Error("[cuda elementwise] fused chain of " + std::to_string(program.instrs.size()) +
                " ops over " + std::to_string(inputs) + " inputs exceeds the kernel's " +
                std::to_string(kMaxEwInstrs) + " ops and " + std::to_string(kMaxEwInputs) +
                " inputs");
  }
  if (graph::program_depth(program) > graph::kMaxElementwiseDepth) {
    throw Error("[cuda elementwise] fused chain needs more than " +
                std::to_string(graph::kMaxElementwiseDepth) + " temporaries");
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

// Whether no kernel of the step writes what fused decode attention reads of its keys, so that it
// may read them before it waits for the kernel before (FreshToken::keys_before_wait): the mask
// and the slots are the run's inputs, and the caches are state no node but the attention and the
// prepare folded into it takes.
bool keys_written_by_no_step(const graph::Graph& graph, const Node& n, graph::ValueId attention,
                             graph::ValueId prepare) {
  const auto run_input = [&](size_t i, bool state) {
    const Node& x = input(graph, n, i);
    return x.op == Op::kInput && x.is_state == state;
  };
  if (!run_input(1, true) || !run_input(2, true) || !run_input(3, false) || !run_input(4, false)) {
    return false;
  }
  for (size_t j = 0; j < graph.nodes.size(); ++j) {
    if (static_cast<graph::ValueId>(j) == attention || static_cast<graph::ValueId>(j) == prepare) {
      continue;
    }
    for (graph::ValueId x : graph.nodes[j].inputs) {
      if (x == n.inputs[1] || x == n.inputs[2]) return false;
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

// A prepare_attention node's inputs (graph::Builder::prepare_attention's order: q, k, v,
// positions, inv_freq, slots, the caches, then the optional q and k norms) as its step reads them.
AttentionInputs attention_inputs(StepContext& c, const std::vector<size_t>& args) {
  const bool norms = args.size() > 8;
  return {.q = f32_at(c, args[0]),
          .k = f32_at(c, args[1]),
          .v = f32_at(c, args[2]),
          .positions = i32_at(c, args[3]),
          .slots = i32_at(c, args[5]),
          .inv_freq = f32_at(c, args[4]),
          .q_norm = norms ? f32_at(c, args[8]) : nullptr,
          .k_norm = norms ? f32_at(c, args[9]) : nullptr};
}

}  // namespace

size_t scratch_bytes(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  if (n.op == Op::kAttention) {
    const AttentionShape shape = attention_shape(graph, n);
    if (runs_flash_attention(graph, n)) return 0;
    return input(graph, n, 0).dtype == DType::bf16
               ? attention_products_scratch_bytes(shape, false)
               : attention_scratch_bytes(shape, input(graph, n, 1).dtype);
  }
  if (const size_t bytes = collective_scratch_bytes(graph, id)) return bytes;
  if (n.op == Op::kLinear || n.op == Op::kGatedLinear || n.op == Op::kQkvLinear) {
    return product_scratch_bytes(graph, n);
  }
  return training_scratch_bytes(graph, id);
}

Step make_step(const graph::Graph& graph, graph::ValueId id, const graph::Plan* plan) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  const auto in = [&](size_t i) -> const Node& { return input(graph, n, i); };
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  const auto out = static_cast<size_t>(id);

  switch (n.op) {
    case Op::kEmbedding: {
      const DType dt = in(0).dtype;
      const int64_t vocab = in(0).shape[0], hidden = in(0).shape[1],
                    count = shape_numel(in(1).shape), first_id = n.shard ? n.start : 0;
      return [=](StepContext& c) {
        embedding(c.ptrs[args[0]], dt, first_id, vocab, hidden, i32_at(c, args[1]), count,
                  f32_at(c, out), c.stream);
      };
    }
    case Op::kLinear:
      return linear_step(graph, n, out);
    case Op::kGatedLinear:
      return gated_linear_step(graph, n, out);
    case Op::kQkvLinear:
      return qkv_linear_step(graph, n, out);
    case Op::kPrepareAttention: {
      if (graph::prepare_folds_into_attention(graph, id, plan)) return [](StepContext&) {};
      const Shape q = in(0).shape, cache = in(6).shape;
      const AttentionShape shape{q[0], q[1], cache[1], q[2], cache[2], q[3]};
      const DType cache_dtype = in(6).dtype;
      const float eps = n.eps, scaling = n.scale;
      return [=](StepContext& c) {
        prepare_attention(attention_inputs(c, args), shape, eps, scaling, c.ptrs[args[6]],
                          c.ptrs[args[7]], cache_dtype, f32_at(c, out), c.stream);
      };
    }
    case Op::kRmsNorm: {
      const int64_t rows = rows_of(n.shape), hidden = n.shape.back();
      const float eps = n.eps;
      const DType dtype = n.dtype, x_dtype = in(0).dtype;
      return [=](StepContext& c) {
        rms_norm(c.ptrs[args[0]], x_dtype, f32_at(c, args[1]), rows, hidden, eps, c.ptrs[out],
                 dtype, c.stream);
      };
    }
    case Op::kRope: {
      const Shape s = n.shape;
      const float scaling = n.scale, eps = n.eps;
      const DType dtype = n.dtype, x_dtype = in(0).dtype;
      const bool normed = n.normed;
      return [=](StepContext& c) {
        const HeadNorm norm{normed ? f32_at(c, args[3]) : nullptr, eps};
        rope(c.ptrs[args[0]], x_dtype, i32_at(c, args[1]), f32_at(c, args[2]), s[0], s[1], s[2],
             s[3], scaling, c.ptrs[out], dtype, c.stream, norm);
      };
    }
    case Op::kAccumulate: {
      const int64_t count = shape_numel(n.shape);
      return [=](StepContext& c) {
        c.ptrs[out] = c.ptrs[args[0]];
        add_bias(f32_at(c, args[0]), f32_at(c, args[1]), 1, count, c.stream);  // one row: acc += x
      };
    }
    case Op::kAttention: {
      // Under autocast (bf16 q, k and v): flash-style, or else as tensor-core products.
      if (runs_flash_attention(graph, n)) return flash_attention_step(graph, n, out);
      if (in(0).dtype == DType::bf16) return attention_products_step(graph, n, out);
      // graph::fold_casts gives a bf16 output to autocast's attention (bf16 q) alone.
      if (n.dtype != DType::f32) {
        throw Error("[cuda attention] f32 q writes an f32 output, not " +
                    std::string(dtype_name(n.dtype)));
      }
      const AttentionShape shape = attention_shape(graph, n);
      const float scale = n.scale;
      const DType kv_dtype = in(1).dtype;
      // The step owns its rows' arrival counters (split keys): each launch leaves them zero for
      // the next.
      const std::shared_ptr<void> arrivals = zeroed_device_buffer(
          static_cast<size_t>(shape.batch * shape.seq * shape.q_heads) * sizeof(unsigned));
      if (graph::prepare_folds_into_attention(graph, n.inputs[0], plan)) {
        const std::vector<size_t> prepare_args(in(0).inputs.begin(), in(0).inputs.end());
        const float eps = in(0).eps, scaling = in(0).scale;
        const bool keys_before_wait = keys_written_by_no_step(graph, n, id, n.inputs[0]);
        return [=](StepContext& c) {
          const FreshToken fresh{attention_inputs(c, prepare_args), eps, scaling, keys_before_wait};
          attention(nullptr, c.ptrs[args[1]], c.ptrs[args[2]], kv_dtype, i32_at(c, args[3]),
                    i32_at(c, args[4]), shape, scale, f32_at(c, out), c.scratch,
                    static_cast<unsigned*>(arrivals.get()), &fresh, c.stream);
        };
      }
      return [=](StepContext& c) {
        attention(f32_at(c, args[0]), c.ptrs[args[1]], c.ptrs[args[2]], kv_dtype,
                  i32_at(c, args[3]), i32_at(c, args[4]), shape, scale, f32_at(c, out), c.scratch,
                  static_cast<unsigned*>(arrivals.get()), nullptr, c.stream);
      };
    }
    case Op::kSliceSeq: {
      const Shape x = in(0).shape;
      const int64_t inner = shape_numel(x) / (x[0] * x[1]), start = n.start, length = n.shape[1];
      return [=](StepContext& c) {
        slice_seq(f32_at(c, args[0]), x[0], x[1], inner, start, length, f32_at(c, out), c.stream);
      };
    }
    case Op::kReshape:
      return [=](StepContext& c) { c.ptrs[out] = c.ptrs[args[0]]; };
    case Op::kView: {
      const size_t byte_offset = static_cast<size_t>(n.start) * dtype_size(n.dtype);
      return
          [=](StepContext& c) { c.ptrs[out] = static_cast<char*>(c.ptrs[args[0]]) + byte_offset; };
    }
    case Op::kPad: {
      const size_t elem = dtype_size(n.dtype), offset = static_cast<size_t>(n.start) * elem,
                   bytes = static_cast<size_t>(shape_numel(in(0).shape)) * elem,
                   total = static_cast<size_t>(shape_numel(n.shape)) * elem;
      return [=](StepContext& c) {
        auto* dst = static_cast<char*>(c.ptrs[out]);
        if (total > 0) TFM_CUDA(cudaMemsetAsync(dst, 0, total, c.stream));
        if (bytes > 0) {
          TFM_CUDA(cudaMemcpyAsync(dst + offset, c.ptrs[args[0]], bytes, cudaMemcpyDeviceToDevice,
                                   c.stream));
        }
      };
    }
    case Op::kConcatRows: {
      std::vector<size_t> bytes;
      for (size_t i = 0; i < args.size(); ++i) {
        bytes.push_back(static_cast<size_t>(shape_numel(in(i).shape)) * dtype_size(n.dtype));
      }
      return [=](StepContext& c) {
        auto* dst = static_cast<char*>(c.ptrs[out]);
        for (size_t i = 0; i < args.size(); ++i) {
          if (bytes[i] > 0) {
            TFM_CUDA(cudaMemcpyAsync(dst, c.ptrs[args[i]], bytes[i], cudaMemcpyDeviceToDevice,
                                     c.stream));
          }
          dst += bytes[i];
        }
      };
    }
    case Op::kElementwise: {
      EwKernelProgram program = to_kernel_program(n.program, args.size());
      if (program.results == 2) {
        program.second = graph::second_result_bytes(n) / static_cast<int64_t>(dtype_size(n.dtype));
      }
      for (size_t i = 0; i < args.size(); ++i) {
        check_float_kind(in(i).dtype, "elementwise");
        if (in(i).dtype == DType::bf16) program.bf16_inputs |= 1u << i;
      }
      const int64_t count = shape_numel(n.shape);
      const DType dtype = n.dtype;
      return [=](StepContext& c) {
        EwKernelProgram bound = program;
        for (size_t i = 0; i < args.size(); ++i) bound.inputs[i] = c.ptrs[args[i]];
        elementwise(bound, count, c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kCast: {
      const DType from = in(0).dtype, to = n.dtype;
      const int64_t count = shape_numel(n.shape);
      return [=](StepContext& c) { cast(c.ptrs[args[0]], from, c.ptrs[out], to, count, c.stream); };
    }
    case Op::kArgmax: {
      const int64_t rows = rows_of(in(0).shape), cols = in(0).shape.back();
      return [=](StepContext& c) {
        argmax_rows(f32_at(c, args[0]), rows, cols, static_cast<int32_t*>(c.ptrs[out]), c.stream);
      };
    }
    default:
      if (std::optional<Step> step = make_collective_step(graph, id)) return *step;
      break;
  }
  if (auto s = make_training_step(graph, id)) return *s;
  throw Error(std::string("[cuda] no kernel for op ") + graph::op_name(n.op) +
              (n.shard ? " (vocabulary shard)" : "") +
              " yet: run this graph with device_map=\"cpu\"");
}

}  // namespace tfm::cuda
