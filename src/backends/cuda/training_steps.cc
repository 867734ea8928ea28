#include "backends/cuda/training_steps.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/backward_kernels.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "backends/cuda/optimizer_kernels.h"
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
  const graph::LinearGradInputArgs a = graph::linear_grad_input_args(n);
  return node_of(graph, a.w).dtype != DType::f32 && node_of(graph, a.dy).dtype == DType::f32;
}

// dx [m, k] = dy [m, n] · w [n, k]; in place, dx = sum + dy · w over the sum's buffer (input 0,
// an intermediate of the arena, so as aligned as dx itself).
Step linear_grad_input_step(const graph::Graph& graph, const Node& n, size_t out) {
  const graph::LinearGradInputArgs a = graph::linear_grad_input_args(n);
  const bool in_place = a.sum >= 0;
  const Node& w = node_of(graph, a.w);
  const DType dt = w.dtype, dy_dtype = node_of(graph, a.dy).dtype;
  if ((dt != DType::f32 && dt != DType::bf16) || (dy_dtype != DType::f32 && dy_dtype != dt)) {
    throw Error("[cuda linear_grad_input] dy of dtype " + std::string(dtype_name(dy_dtype)) +
                " with weights of dtype " + std::string(dtype_name(dt)) +
                " is not supported (f32 with f32 or bf16, bf16 with bf16)");
  }
  if (n.dtype != DType::f32 && (dy_dtype != DType::bf16 || in_place)) {
    throw Error("[cuda linear_grad_input] a " + std::string(dtype_name(n.dtype)) +
                " dx needs bf16 dy and weights, and adds into no sum");
  }
  const int64_t m = rows_of(node_of(graph, a.dy).shape), nn = w.shape[0], k = w.shape[1];
  const size_t sum = in_place ? slot(a.sum) : 0, dy = slot(a.dy), wi = slot(a.w);
  const bool widen = widens_weights(graph, n);
  const MatmulOperand weights =
      widen ? matmul_operand(256, static_cast<uint64_t>(k) * sizeof(float), false)
            : matmul_operand(graph, a.w, false);
  // dx in its node's dtype: f32, or bf16 where an elementwise chain widens it
  // (ops::linear_backward; never in place, which adds f32 sums).
  MatmulOperand dx_operand;
  dx_operand.dtype = n.dtype;
  auto product = std::make_shared<const Matmul>(
      m, k, nn, dy_dtype, matmul_operand(graph, a.dy, false), weights, dx_operand);
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
  const graph::LinearGradWeightArgs a = graph::linear_grad_weight_args(n);
  const bool in_place = a.acc >= 0;
  const int64_t m = rows_of(node_of(graph, a.dy).shape), nn = n.shape[0], k = n.shape[1];
  const size_t acc = in_place ? slot(a.acc) : 0, dy = slot(a.dy), x = slot(a.x);
  const DType dtype = node_of(graph, a.dy).dtype;
  if ((dtype != DType::f32 && dtype != DType::bf16) || node_of(graph, a.x).dtype != dtype) {
    throw Error("[cuda linear_grad_weight] dy of dtype " + std::string(dtype_name(dtype)) +
                " with x of dtype " + std::string(dtype_name(node_of(graph, a.x).dtype)) +
                " is not supported (both f32 or both bf16)");
  }
  const auto product = [&](MatmulOperand y) {
    return std::make_shared<const Matmul>(nn, k, m, dtype, matmul_operand(graph, a.dy, true),
                                          matmul_operand(graph, a.x, false), y);
  };
  const MatmulOperand aligned = matmul_operand(kArenaAlignment, k * sizeof(float), false);
  const MatmulOperand known = in_place ? matmul_operand(graph, a.acc, false) : aligned;
  const std::shared_ptr<const Matmul> fast = product(aligned);
  const std::shared_ptr<const Matmul> general =
      known.alignment == aligned.alignment ? fast : product(known);
  return [=](StepContext& c) {
    if (in_place) c.ptrs[out] = c.ptrs[acc];
    auto* dw = static_cast<float*>(c.ptrs[out]);
    const bool is_aligned = reinterpret_cast<uintptr_t>(dw) % kArenaAlignment == 0;
    (is_aligned ? fast : general)
        ->run(c.ptrs[dy], c.ptrs[x], dw, c.workspace, c.stream, in_place ? dw : nullptr);
  };
}

}  // namespace

size_t training_scratch_bytes(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  switch (n.op) {
    case Op::kCrossEntropy:
      return cross_entropy_scratch_bytes(
          rows_of(node_of(graph, graph::cross_entropy_args(n).logits).shape));
    case Op::kRmsNormGradWeight: {
      const Node& x = node_of(graph, graph::rms_norm_grad_weight_args(n).x);
      return rms_norm_grad_weight_scratch_bytes(rows_of(x.shape), x.shape.back());
    }
    case Op::kRmsNormGradInput:
      return n.adds_weight_grad
                 ? rms_norm_grads_scratch_bytes(rows_of(n.shape), n.shape.back(), n.rotated)
                 : 0;
    case Op::kReduceRows:
      return reduce_rows_scratch_bytes(rows_of(node_of(graph, graph::operand(n)).shape),
                                       n.shape[0]);
    case Op::kRopeGrad:
      return rope_grad_scratch_bytes(n.shape[3]);
    case Op::kSumSquares:
      return sum_squares_scratch_bytes(shape_numel(node_of(graph, graph::operand(n)).shape));
    case Op::kLinearGradInput: {
      const Node& w = node_of(graph, graph::linear_grad_input_args(n).w);
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
  const auto node = [&](graph::ValueId v) -> const Node& { return node_of(graph, v); };
  const size_t out = slot(id);

  switch (n.op) {
    case Op::kReduceRows: {
      const size_t x = slot(graph::operand(n));
      const int64_t rows = rows_of(node(graph::operand(n)).shape), cols = n.shape[0];
      return [=](StepContext& c) {
        reduce_rows(f32_at(c, x), rows, cols, f32_at(c, out), c.scratch, c.stream);
      };
    }
    case Op::kCrossEntropy: {
      const graph::CrossEntropyArgs a = graph::cross_entropy_args(n);
      const int64_t rows = rows_of(node(a.logits).shape), vocab = node(a.logits).shape.back();
      const DType logits_dtype = node(a.logits).dtype;
      const size_t logits = slot(a.logits), targets = slot(a.targets);
      if (a.d_loss >= 0) {  // and the gradient over the logits (graph::fold_losses_into_gradients)
        const size_t d_loss = slot(a.d_loss);
        return [=](StepContext& c) {
          cross_entropy_and_grad(c.ptrs[logits], logits_dtype, i32_at(c, targets),
                                 graph::kIgnoreIndex, f32_at(c, d_loss), rows, vocab,
                                 f32_at(c, out), c.scratch, c.stream);
        };
      }
      return [=](StepContext& c) {
        cross_entropy(c.ptrs[logits], logits_dtype, i32_at(c, targets), graph::kIgnoreIndex, rows,
                      vocab, f32_at(c, out), c.scratch, c.stream);
      };
    }
    case Op::kCrossEntropyGrad: {
      const graph::CrossEntropyGradArgs a = graph::cross_entropy_grad_args(n);
      const int64_t rows = rows_of(node(a.logits).shape), vocab = node(a.logits).shape.back();
      const bool in_place = n.in_place;
      const DType dtype = n.dtype, logits_dtype = node(a.logits).dtype;
      const size_t logits = slot(a.logits), targets = slot(a.targets), d_loss = slot(a.d_loss);
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[logits];
        cross_entropy_grad(c.ptrs[logits], logits_dtype, i32_at(c, targets), graph::kIgnoreIndex,
                           f32_at(c, d_loss), rows, vocab, c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kEmbeddingGrad: {
      // In place, the rows add into `acc` (graph::fold_summed_accumulations).
      const graph::EmbeddingGradArgs a = graph::embedding_grad_args(n);
      const bool in_place = a.acc >= 0;
      const int64_t count = shape_numel(node(a.ids).shape), vocab = n.shape[0], hidden = n.shape[1];
      const size_t acc = in_place ? slot(a.acc) : 0, dy = slot(a.dy), ids = slot(a.ids);
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[acc];
        embedding_grad(f32_at(c, dy), i32_at(c, ids), count, vocab, hidden, f32_at(c, out),
                       c.stream, in_place);
      };
    }
    case Op::kLinearGradInput:
      return linear_grad_input_step(graph, n, out);
    case Op::kLinearGradWeight:
      return linear_grad_weight_step(graph, n, out);
    case Op::kRmsNormGradInput: {
      const graph::RmsNormGradInputArgs a = graph::rms_norm_grad_input_args(n);
      const int64_t rows = rows_of(n.shape), hidden = n.shape.back();
      const float eps = n.eps;
      // dy bf16 only where RoPE's gradient runs inside (attention's gradients under autocast).
      const DType dtype = n.dtype, x_dtype = node(a.x).dtype, dy_dtype = node(a.dy).dtype;
      const bool residual = a.residual >= 0, rotated = a.positions >= 0;
      const size_t x = slot(a.x), w = slot(a.w), dy = slot(a.dy),
                   residual_at = residual ? slot(a.residual) : 0;
      if (a.weight_grad >= 0) {
        // RoPE's gradient runs inside where graph::fuse_rope_grads_into_norm_grads put it.
        const size_t positions = rotated ? slot(a.positions) : 0,
                     inv_freq = rotated ? slot(a.inv_freq) : 0, weight_grad = slot(a.weight_grad);
        const Shape s = n.shape;
        const float scaling = n.scale;
        // Its bf16 copy (graph::fold_narrow_copies) after the f32 result.
        const int64_t copy_at =
            n.narrow_copy ? fusion::second_result_bytes(n, kArenaAlignment) : -1;
        return [=](StepContext& c) {
          const RopeRows rope{rotated ? i32_at(c, positions) : nullptr,
                              rotated ? f32_at(c, inv_freq) : nullptr,
                              s[0],
                              s[1],
                              s.size() == 4 ? s[2] : 1,
                              scaling};
          rms_norm_grads(c.ptrs[x], x_dtype, f32_at(c, w), c.ptrs[dy], dy_dtype,
                         residual ? f32_at(c, residual_at) : nullptr, rows, hidden, eps,
                         c.ptrs[out], dtype, f32_at(c, weight_grad), c.scratch, c.stream,
                         rotated ? &rope : nullptr,
                         copy_at >= 0 ? static_cast<char*>(c.ptrs[out]) + copy_at : nullptr);
        };
      }
      if (rotated || n.narrow_copy) {
        throw Error(
            "[cuda rms_norm_grad_input] RoPE's gradient runs inside, and a bf16 copy is written, "
            "only where the weight's gradient is added");
      }
      require_f32_dy(n, dy_dtype);
      return [=](StepContext& c) {
        rms_norm_grad_input(c.ptrs[x], x_dtype, f32_at(c, w), f32_at(c, dy),
                            residual ? f32_at(c, residual_at) : nullptr, rows, hidden, eps,
                            c.ptrs[out], dtype, c.stream);
      };
    }
    case Op::kRmsNormGradWeight: {
      // In place, the sums add into `acc` (graph::fold_accumulations).
      const graph::RmsNormGradWeightArgs a = graph::rms_norm_grad_weight_args(n);
      const int64_t rows = rows_of(node(a.x).shape), hidden = n.shape[0];
      const float eps = n.eps;
      const bool in_place = a.acc >= 0;
      const DType x_dtype = node(a.x).dtype;
      require_f32_dy(n, node(a.dy).dtype);
      const size_t acc = in_place ? slot(a.acc) : 0, x = slot(a.x), dy = slot(a.dy);
      return [=](StepContext& c) {
        if (in_place) c.ptrs[out] = c.ptrs[acc];
        rms_norm_grad_weight(c.ptrs[x], x_dtype, f32_at(c, dy), rows, hidden, eps, f32_at(c, out),
                             c.scratch, c.stream, in_place);
      };
    }
    case Op::kRopeGrad: {
      const graph::RopeGradArgs a = graph::rope_grad_args(n);
      const Shape s = n.shape;
      const float scaling = n.scale;
      const DType dy_dtype = node(a.dy).dtype, dx_dtype = n.dtype;
      const size_t dy = slot(a.dy), positions = slot(a.positions), inv_freq = slot(a.inv_freq);
      return [=](StepContext& c) {
        rope_grad(c.ptrs[dy], dy_dtype, i32_at(c, positions), f32_at(c, inv_freq), s[0], s[1], s[2],
                  s[3], scaling, c.ptrs[out], dx_dtype, c.scratch, c.stream);
      };
    }
    case Op::kAdamW: {
      const graph::AdamWArgs a = graph::adamw_args(n);
      const int64_t count = shape_numel(n.shape);
      const bool decays = n.decays;
      const size_t param = slot(a.param), grad = slot(a.grad), m = slot(a.exp_avg),
                   v = slot(a.exp_avg_sq), scalars = slot(a.scalars);
      return [=](StepContext& c) {
        c.ptrs[out] = c.ptrs[param];
        adamw_update(f32_at(c, scalars), decays, f32_at(c, param), f32_at(c, grad), f32_at(c, m),
                     f32_at(c, v), count, c.stream);
      };
    }
    case Op::kSumSquares: {
      const graph::ValueId x_id = graph::operand(n);
      const int64_t count = shape_numel(node(x_id).shape);
      const size_t x = slot(x_id);
      return [=](StepContext& c) {
        sum_squares(f32_at(c, x), count, f32_at(c, out), c.scratch, c.stream);
      };
    }
    default:
      return std::nullopt;
  }
}

}  // namespace tfm::cuda
