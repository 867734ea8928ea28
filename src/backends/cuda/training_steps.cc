#include "backends/cuda/training_steps.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/attention_product_steps.h"
#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/flash_attention_steps.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Node;
using graph::Op;

// A norm gradient's dy outside the fused step (which RoPE's bf16 gradient may enter) is f32.
void require_f32_dy(const Node& n, DType dy_dtype) {
  if (dy_dtype != DType::f32) {
    throw Error("[cuda " + std::string(graph::op_name(n.op)) + "] dy must be f32 here, got " +
                std::string(dtype_name(dy_dtype)));
  }
}

// Are the weights bf16 while dy is f32? Then they are widened into scratch for an f32 product.
// (Under autocast dy is bf16 too, and the product is bf16 accumulated in f32, on the tensor cores.)
bool widens_weights(const graph::Graph& graph, const Node& n) {
  const size_t dy = graph::first_operand(n);
  return input(graph, n, dy + 1).dtype != DType::f32 && input(graph, n, dy).dtype == DType::f32;
}

// dx [m, k] = dy [m, n] · w [n, k]; in place, dx = sum + dy · w over the sum's buffer (input 0,
// an intermediate of the arena, so as aligned as dx itself).
Step linear_grad_input_step(const graph::Graph& graph, const Node& n, size_t out) {
  const size_t first = graph::first_operand(n);
  const bool in_place = n.in_place;
  const Node& w = input(graph, n, first + 1);
  const DType dt = w.dtype, dy_dtype = input(graph, n, first).dtype;
  if ((dt != DType::f32 && dt != DType::bf16) || (dy_dtype != DType::f32 && dy_dtype != dt)) {
    throw Error("[cuda linear_grad_input] dy of dtype " + std::string(dtype_name(dy_dtype)) +
                " with weights of dtype " + std::string(dtype_name(dt)) +
                " is not supported (f32 with f32 or bf16, bf16 with bf16)");
  }
  if (n.dtype != DType::f32 && (dy_dtype != DType::bf16 || in_place)) {
    throw Error("[cuda linear_grad_input] a " + std::string(dtype_name(n.dtype)) +
                " dx needs bf16 dy and weights, and adds into no sum");
  }
  const int64_t m = rows_of(input(graph, n, first).shape), nn = w.shape[0], k = w.shape[1];
  const size_t sum = static_cast<size_t>(n.inputs[0]), dy = static_cast<size_t>(n.inputs[first]),
               wi = static_cast<size_t>(n.inputs[first + 1]);
  const bool widen = widens_weights(graph, n);
  const MatmulOperand weights =
      widen ? matmul_operand(256, static_cast<uint64_t>(k) * sizeof(float), false)
            : matmul_operand(graph, n.inputs[first + 1], false);
  // dx in its node's dtype: f32, or bf16 where an elementwise chain widens it
  // (ops::linear_backward; never in place, which adds f32 sums).
  MatmulOperand dx_operand;
  dx_operand.dtype = n.dtype;
  auto product = std::make_shared<const Matmul>(
      m, k, nn, dy_dtype, matmul_operand(graph, n.inputs[first], false), weights, dx_operand);
  return [=](StepContext& c) {
    if (in_place) c.ptrs[out] = c.ptrs[sum];
    const void* rhs = c.ptrs[wi];
    if (widen) {
      cast(rhs, dt, c.scratch, DType::f32, nn * k, c.stream);
      rhs = c.scratch;
    }
    void* dx = c.ptrs[out];
    product->run(c.ptrs[dy], rhs, dx, c.workspace, c.stream,
                 in_place ? static_cast<const float*>(dx) : nullptr);
  };
}

// dw [n, k] = dy [m, n]^T · x [m, k], over every row; dy and x both f32, or both bf16 (autocast).
// In place (graph::fold_accumulations), input 0 is the accumulator: the product adds into it as
// its addend (beta 1) and the result is that buffer. A state accumulator (the trainer's gradient
// buffers) is only sure of its element alignment when the step is built, and cuBLASLt's fast
// kernels want 16 bytes or more, so the product is planned for both and picks by the pointer.
Step linear_grad_weight_step(const graph::Graph& graph, const Node& n, size_t out) {
  const bool in_place = n.in_place;
  const size_t first = graph::first_operand(n);
  const int64_t m = rows_of(input(graph, n, first).shape), nn = n.shape[0], k = n.shape[1];
  const size_t acc = static_cast<size_t>(n.inputs[0]);
  const size_t dy = static_cast<size_t>(n.inputs[first]),
               x = static_cast<size_t>(n.inputs[first + 1]);
  const DType dtype = input(graph, n, first).dtype;
  if ((dtype != DType::f32 && dtype != DType::bf16) || input(graph, n, first + 1).dtype != dtype) {
    throw Error("[cuda linear_grad_weight] dy of dtype " + std::string(dtype_name(dtype)) +
                " with x of dtype " + std::string(dtype_name(input(graph, n, first + 1).dtype)) +
                " is not supported (both f32 or both bf16)");
  }
  const auto product = [&](MatmulOperand y) {
    return std::make_shared<const Matmul>(nn, k, m, dtype,
                                          matmul_operand(graph, n.inputs[first], true),
                                          matmul_operand(graph, n.inputs[first + 1], false), y);
  };
  const MatmulOperand aligned = matmul_operand(graph::kArenaAlignment, k * sizeof(float), false);
  const MatmulOperand known = in_place ? matmul_operand(graph, n.inputs[0], false) : aligned;
  const std::shared_ptr<const Matmul> fast = product(aligned);
  const std::shared_ptr<const Matmul> general =
      known.alignment == aligned.alignment ? fast : product(known);
  return [=](StepContext& c) {
    if (in_place) c.ptrs[out] = c.ptrs[acc];
    auto* dw = static_cast<float*>(c.ptrs[out]);
    const bool is_aligned = reinterpret_cast<uintptr_t>(dw) % graph::kArenaAlignment == 0;
    (is_aligned ? fast : general)
        ->run(c.ptrs[dy], c.ptrs[x], dw, c.workspace, c.stream, in_place ? dw : nullptr);
  };
}

}  // namespace

size_t training_scratch_bytes(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  switch (n.op) {
    case Op::kCrossEntropy:
      return cross_entropy_scratch_bytes(rows_of(input(graph, n, 0).shape));
    case Op::kRmsNormGradWeight: {
      const Node& x = input(graph, n, graph::first_operand(n));
      return rms_norm_grad_weight_scratch_bytes(rows_of(x.shape), x.shape.back());
    }
    case Op::kRmsNormGradInput:
      return n.adds_weight_grad
                 ? rms_norm_grads_scratch_bytes(rows_of(n.shape), n.shape.back(), n.rotated)
                 : 0;
    case Op::kReduceRows:
      return reduce_rows_scratch_bytes(rows_of(input(graph, n, 0).shape), n.shape[0]);
    case Op::kRopeGrad:
      return rope_grad_scratch_bytes(n.shape[3]);
    case Op::kAttentionGrad:
      if (runs_flash_attention_grad(graph, n)) {
        return flash_attention_grad_scratch_bytes(attention_shape(graph, n));
      }
      return input(graph, n, 0).dtype == DType::bf16
                 ? attention_products_scratch_bytes(attention_shape(graph, n), true)
                 : attention_grad_scratch_bytes(attention_shape(graph, n));
    case Op::kLinearGradInput: {
      const Node& w = input(graph, n, graph::first_operand(n) + 1);
      return widens_weights(graph, n) ? static_cast<size_t>(shape_numel(w.shape)) * sizeof(float)
                                      : 0;
    }
    default:
      return 0;
  }
}

std::optional<Step> make_training_step(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  // A vocabulary shard's softmax spans the group's ranks: tensor parallel runs on the cpu.
  if (n.shard) return std::nullopt;
  const auto in = [&](size_t i) -> const Node& { return input(graph, n, i); };
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  const auto out = static_cast<size_t>(id);

  switch (n.op) {
    case Op::kReduceRows: {
      const int64_t rows = rows_of(in(0).shape), cols = n.shape[0];
      return [=](StepContext& c) {
        reduce_rows(f32_at(c, args[0]), rows, cols, f32_at(c, out), c.scratch, c.stream);
      };
    }
    case Op::kCrossEntropy: {
      const int64_t rows = rows_of(in(0).shape), vocab = in(0).shape.back();
      const DType logits_dtype = in(0).dtype;
      if (n.in_place) {  // and the gradient over the logits (graph::fold_losses_into_gradients)
        return [=](StepContext& c) {
          cross_entropy_and_grad(c.ptrs[args[0]], logits_dtype, i32_at(c, args[1]),
                                 graph::kIgnoreIndex, f32_at(c, args[2]), rows, vocab,
                                 f32_at(c, out), c.scratch, c.stream);
        };
      }
      return [=](StepContext& c) {
        cross_entropy(c.ptrs[args[0]], logits_dtype, i32_at(c, args[1]), graph::kIgnoreIndex, rows,
                      vocab, f32_at(c, out), c.scratch, c.stream);
      };
    }
    case Op::kCrossEntropyGrad: {
      const int64_t rows = rows_of(in(0).shape), vocab = in(0).shape.back();
      const bool in_place = n.in_place;
      const DType dtype = n.dtype, logits_dtype = in(0).dtype;
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[args[0]];
        cross_entropy_grad(c.ptrs[args[0]], logits_dtype, i32_at(c, args[1]), graph::kIgnoreIndex,
                           f32_at(c, args[2]), rows, vocab, c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kEmbeddingGrad: {
      // In place, input 0 is the sum the rows add into (graph::fold_summed_accumulations).
      const bool in_place = n.in_place;
      const size_t first = graph::first_operand(n);
      const int64_t count = shape_numel(in(first + 1).shape), vocab = n.shape[0],
                    hidden = n.shape[1];
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[args[0]];
        embedding_grad(f32_at(c, args[first]), i32_at(c, args[first + 1]), count, vocab, hidden,
                       f32_at(c, out), c.stream, in_place);
      };
    }
    case Op::kLinearGradInput:
      return linear_grad_input_step(graph, n, out);
    case Op::kLinearGradWeight:
      return linear_grad_weight_step(graph, n, out);
    case Op::kRmsNormGradInput: {
      const int64_t rows = rows_of(n.shape), hidden = n.shape.back();
      const float eps = n.eps;
      // dy bf16 only where RoPE's gradient runs inside (attention's gradients under autocast).
      const DType dtype = n.dtype, x_dtype = in(0).dtype, dy_dtype = in(2).dtype;
      const bool residual = n.residual;
      if (n.adds_weight_grad) {
        // Where RoPE's gradient runs inside (graph::fuse_rope_grads_into_norm_grads), its
        // positions and frequencies follow the residual.
        const bool rotated = n.rotated;
        const size_t rope_args = residual ? 4 : 3;
        const Shape s = n.shape;
        const float scaling = n.scale;
        // Its bf16 copy (graph::fold_narrow_copies) after the f32 result.
        const int64_t copy_at = n.narrow_copy ? graph::second_result_bytes(n) : -1;
        return [=](StepContext& c) {
          const RopeRows rope{rotated ? i32_at(c, args[rope_args]) : nullptr,
                              rotated ? f32_at(c, args[rope_args + 1]) : nullptr,
                              s[0],
                              s[1],
                              s.size() == 4 ? s[2] : 1,
                              scaling};
          rms_norm_grads(c.ptrs[args[0]], x_dtype, f32_at(c, args[1]), c.ptrs[args[2]], dy_dtype,
                         residual ? f32_at(c, args[3]) : nullptr, rows, hidden, eps, c.ptrs[out],
                         dtype, f32_at(c, args.back()), c.scratch, c.stream,
                         rotated ? &rope : nullptr,
                         copy_at >= 0 ? static_cast<char*>(c.ptrs[out]) + copy_at : nullptr);
        };
      }
      if (n.rotated || n.narrow_copy) {
        throw Error(
            "[cuda rms_norm_grad_input] RoPE's gradient runs inside, and a bf16 copy is written, "
            "only where the weight's gradient is added");
      }
      require_f32_dy(n, dy_dtype);
      return [=](StepContext& c) {
        rms_norm_grad_input(c.ptrs[args[0]], x_dtype, f32_at(c, args[1]), f32_at(c, args[2]),
                            residual ? f32_at(c, args[3]) : nullptr, rows, hidden, eps, c.ptrs[out],
                            dtype, c.stream);
      };
    }
    case Op::kRmsNormGradWeight: {
      // In place, input 0 is the accumulator the sums add into (graph::fold_accumulations).
      const size_t first = graph::first_operand(n);
      const int64_t rows = rows_of(in(first).shape), hidden = n.shape[0];
      const float eps = n.eps;
      const bool in_place = n.in_place;
      const DType x_dtype = in(first).dtype;
      require_f32_dy(n, in(first + 1).dtype);
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[args[0]];
        rms_norm_grad_weight(c.ptrs[args[first]], x_dtype, f32_at(c, args[first + 1]), rows, hidden,
                             eps, f32_at(c, out), c.scratch, c.stream, in_place);
      };
    }
    case Op::kRopeGrad: {
      const Shape s = n.shape;
      const float scaling = n.scale;
      const DType dy_dtype = in(0).dtype, dx_dtype = n.dtype;
      return [=](StepContext& c) {
        rope_grad(c.ptrs[args[0]], dy_dtype, i32_at(c, args[1]), f32_at(c, args[2]), s[0], s[1],
                  s[2], s[3], scaling, c.ptrs[out], dx_dtype, c.scratch, c.stream);
      };
    }
    case Op::kAttentionGrad: {
      // Under autocast (bf16 q, k and v): flash-style for bf16 dy (attention's output gradient
      // there), or as tensor-core products for f32 dy and head sizes without a flash kernel.
      if (runs_flash_attention_grad(graph, n)) return flash_attention_grad_step(graph, n, out);
      if (in(0).dtype == DType::bf16) return attention_grad_products_step(graph, n, out);
      if (in(1).dtype != DType::f32 || in(2).dtype != DType::f32 || in(5).dtype != DType::f32) {
        throw Error("[cuda attention_grad] f32 q needs f32 keys, values and dy, got " +
                    std::string(dtype_name(in(1).dtype)) + ", " +
                    std::string(dtype_name(in(2).dtype)) + " and " +
                    std::string(dtype_name(in(5).dtype)));
      }
      const AttentionShape shape = attention_shape(graph, n);
      const float scale = n.scale;
      return [=](StepContext& c) {
        attention_grad(f32_at(c, args[0]), f32_at(c, args[1]), f32_at(c, args[2]),
                       i32_at(c, args[3]), i32_at(c, args[4]), f32_at(c, args[5]), shape, scale,
                       f32_at(c, out), c.scratch, c.stream);
      };
    }
    default:
      return std::nullopt;
  }
}

}  // namespace tfm::cuda
