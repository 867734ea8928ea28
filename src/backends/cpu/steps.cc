#include "backends/cpu/steps.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/collective_steps.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/moe_steps.h"
#include "backends/cpu/product_steps.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/step_operands.h"
#include "fusion/plan.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

using graph::Node;
using graph::Op;

void check_f32(const Node& n, const char* op) {
  if (n.dtype != DType::f32) {
    throw Error(std::string("[") + op + "] needs f32 operands on cpu, got " +
                std::string(dtype_name(n.dtype)) + " for '" + n.name + "'");
  }
}

// A step of an op that graph::fold_casts may have made write bf16, or that reads bf16 inputs.
// compute(first, count, dst) writes units first .. first + count - 1 of the result (rows or
// tokens: `unit` floats each) as f32 to dst. With f32 inputs and output that is one call on the
// node's own buffer, the kernels splitting the work among threads. Otherwise the threads share out
// blocks of kNarrowedBlock floats, each computing its blocks with its own copy of `compute` (and so
// its own buffers for widened inputs) into the node's buffer or, for bf16, into a block of its own
// narrowed into place after each call: no f32 copy of the whole result is ever held, and widening
// and narrowing run on every thread rather than between parallel kernels.
constexpr int64_t kNarrowedBlock = int64_t{1} << 16;

bool reads_narrow_floats(const graph::Graph& graph, const Node& n) {
  return std::any_of(n.inputs.begin(), n.inputs.end(), [&graph](graph::ValueId v) {
    const DType d = graph.nodes[static_cast<size_t>(v)].dtype;
    return d == DType::bf16 || d == DType::f16;
  });
}

template <typename Compute>
std::function<void()> with_output(const graph::Graph& graph, const Node& n, StepBuffers buf,
                                  int64_t unit, Compute compute) {
  const int64_t units = shape_numel(n.shape) / unit;
  const DType dtype = n.dtype;
  const auto at = [=](int64_t element) {
    return static_cast<char*>(buf.out()) + element * static_cast<int64_t>(dtype_size(dtype));
  };
  if (dtype == DType::f32 && !reads_narrow_floats(graph, n)) {
    return [=]() mutable { compute(0, units, reinterpret_cast<float*>(at(0))); };
  }
  const int64_t block = std::max<int64_t>(1, kNarrowedBlock / unit);
  const int64_t blocks = (units + block - 1) / block;
  struct Worker {
    Compute compute;
    Scratch rows;
  };
  const bool narrow = dtype != DType::f32;
  return [=, workers = std::vector<Worker>()]() mutable {
    while (workers.size() < static_cast<size_t>(omp_get_max_threads())) {
      workers.push_back({compute, {}});
    }
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      Worker& w = workers[static_cast<size_t>(omp_get_thread_num())];
      const int64_t first = b * block, count = std::min(block, units - first);
      if (narrow) w.rows.resize(static_cast<size_t>(block * unit));
      float* dst = narrow ? w.rows.data() : reinterpret_cast<float*>(at(first * unit));
      w.compute(first, count, dst);
      if (narrow) cast(dst, DType::f32, at(first * unit), dtype, static_cast<size_t>(count * unit));
    }
  };
}

// RoPE's inputs, or its gradient's as the same rotation reads them (dy as x).
graph::RopeArgs rotation_args(const Node& n) {
  if (n.op == Op::kRope) return graph::rope_args(n);
  const graph::RopeGradArgs g = graph::rope_grad_args(n);
  return {g.dy, g.positions, g.inv_freq};
}

static_assert(ops::kAdamWScalarCount == graph::kAdamWScalars);

}  // namespace

std::function<void()> make_step(const graph::Graph& graph, graph::ValueId id,
                                std::vector<void*>& ptrs) {
  const Node& n = node_of(graph, id);
  const auto node = [&graph](graph::ValueId v) -> const Node& { return node_of(graph, v); };
  const StepBuffers buf(ptrs, id);
  // The node's vocabulary shard; its group lives as long as the graph that holds the node.
  const std::shared_ptr<const VocabShard> shard =
      n.shard ? std::make_shared<const VocabShard>(VocabShard{
                    n.start, n.vocab_size, n.group ? n.group->communicator.get() : nullptr})
              : nullptr;

  switch (n.op) {
    case Op::kEmbedding: {
      const graph::EmbeddingArgs a = graph::embedding_args(n);
      const Node& table = node(a.table);
      const DType dt = table.dtype;
      const int64_t vocab = table.shape[0], hidden = table.shape[1],
                    count = shape_numel(node(a.ids).shape), first_id = n.start;
      if (n.shard) {
        return [=] {
          embedding_shard(buf.ptr(a.table), dt, vocab, hidden, first_id, buf.i32(a.ids), count,
                          buf.out_f32());
        };
      }
      return [=] {
        embedding(buf.ptr(a.table), dt, vocab, hidden, buf.i32(a.ids), count, buf.out_f32());
      };
    }
    case Op::kLinear:
    case Op::kGatedLinear:
    case Op::kQkvLinear:
    case Op::kLinearGradInput:
    case Op::kLinearGradWeight:
      return make_product_step(graph, id, ptrs);
    case Op::kPrepareAttention: {
      const graph::PrepareAttentionArgs a = graph::prepare_attention_args(n);
      const Shape q = node(a.q).shape, k = node(a.k).shape, cache = node(a.k_cache).shape;
      const DType cache_dtype = node(a.k_cache).dtype;
      const float eps = n.eps, scaling = n.scale;
      return [=] {
        Scratch k_rotated(static_cast<size_t>(shape_numel(k)));
        const float* q_in = buf.f(a.q);
        const float* k_in = buf.f(a.k);
        if (a.q_norm >= 0) {
          rms_norm(q_in, buf.f(a.q_norm), shape_numel(q) / q[3], q[3], eps, buf.out_f32());
          rms_norm(k_in, buf.f(a.k_norm), shape_numel(k) / k[3], k[3], eps, k_rotated.data());
          q_in = buf.out_f32();
          k_in = k_rotated.data();
        }
        rope(q_in, buf.i32(a.positions), buf.f(a.inv_freq), q[0], q[1], q[2], q[3], scaling,
             buf.out_f32());
        rope(k_in, buf.i32(a.positions), buf.f(a.inv_freq), k[0], k[1], k[2], k[3], scaling,
             k_rotated.data());
        cache_write(buf.ptr(a.k_cache), cache_dtype, k_rotated.data(), buf.i32(a.slots), k[0],
                    cache[1], k[1], k[2] * k[3]);
        cache_write(buf.ptr(a.v_cache), cache_dtype, buf.f(a.v), buf.i32(a.slots), k[0], cache[1],
                    k[1], k[2] * k[3]);
      };
    }
    case Op::kCacheWrite: {
      const graph::CacheWriteArgs a = graph::cache_write_args(n);
      const Shape cache = node(a.cache).shape, update = node(a.update).shape;
      const DType cache_dtype = node(a.cache).dtype;
      return [=] {
        buf.out() = buf.ptr(a.cache);
        cache_write(buf.ptr(a.cache), cache_dtype, buf.f(a.update), buf.i32(a.slots), update[0],
                    cache[1], update[1], update[2] * update[3]);
      };
    }
    // x may be a bf16 product's output (autocast), widened a block of rows at a time, as for
    // RoPE and the norm's gradients below.
    case Op::kRmsNorm: {
      const graph::RmsNormArgs a = graph::rms_norm_args(n);
      const int64_t hidden = n.shape.back();
      const float eps = n.eps;
      const DType x_dtype = node(a.x).dtype;
      return with_output(
          graph, n, buf, hidden,
          [=, widened = Scratch()](int64_t first, int64_t count, float* dst) mutable {
            rms_norm(f32_range(buf.ptr(a.x), x_dtype, first * hidden, count * hidden, widened),
                     buf.f(a.w), count, hidden, eps, dst);
          });
    }
    case Op::kRope:
    case Op::kRopeGrad: {
      // Tokens are the rows: one position each, so a block of them is a batch of one. Each head
      // is normed first where graph::fuse_norms_into_rope folded its norm in; RoPE rotates the
      // normed rows where they are (in place), and its gradient rotates dy back.
      const graph::RopeArgs a = rotation_args(n);
      const Shape s = n.shape;
      const float scaling = n.scale, eps = n.eps;
      const auto rotate = n.op == Op::kRope ? rope : rope_grad;
      const int64_t row = s[2] * s[3];
      const DType x_dtype = node(a.x).dtype;
      return with_output(
          graph, n, buf, row,
          [=, widened = Scratch()](int64_t first, int64_t count, float* dst) mutable {
            const float* x = f32_range(buf.ptr(a.x), x_dtype, first * row, count * row, widened);
            if (a.norm >= 0) {
              rms_norm(x, buf.f(a.norm), count * s[2], s[3], eps, dst);
              x = dst;
            }
            rotate(x, buf.i32(a.positions) + first, buf.f(a.inv_freq), 1, count, s[2], s[3],
                   scaling, dst);
          });
    }
    case Op::kAccumulate: {
      const graph::AccumulateArgs a = graph::accumulate_args(n);
      const int64_t count = shape_numel(n.shape);
      return [=] {
        buf.out() = buf.ptr(a.acc);
        add_into(buf.f(a.acc), buf.f(a.x), count);
      };
    }
    case Op::kAttention: {
      const graph::AttentionArgs a = graph::attention_args(n);
      const Shape q = node(a.q).shape, k = node(a.k).shape;
      const float scale = n.scale;
      const int64_t window = n.window;
      const DType q_dtype = node(a.q).dtype, kv_dtype = node(a.k).dtype;
      // A bf16 KV cache (with f32 q) is read as it is, and so are autocast's bf16 k and v (q
      // widened exactly): attention() takes them to AMX tiles where the CPU has them (the
      // probabilities rounded to bf16 before the values' product, as torch's bf16 attention
      // rounds them), else widens them for the f32 kernels. Its output may be bf16 there too
      // (graph::fold_casts): computed in f32, rounded once.
      if (q_dtype != DType::f32) {
        const DType out_dtype = n.dtype;
        return [=] {
          Scratch wq;
          std::vector<float> narrowed;
          if (out_dtype != DType::f32) narrowed.resize(static_cast<size_t>(shape_numel(q)));
          float* dst = narrowed.empty() ? buf.out_f32() : narrowed.data();
          attention(f32_operand(buf.ptr(a.q), q_dtype, shape_numel(q), wq), buf.ptr(a.k),
                    buf.ptr(a.v), kv_dtype, buf.i32(a.mask), buf.i32(a.slots), q[0], q[1], k[1],
                    q[2], k[2], q[3], scale, dst, window);
          if (!narrowed.empty()) cast(dst, DType::f32, buf.out(), out_dtype, narrowed.size());
        };
      }
      check_f32(n, "attention");
      return [=] {
        attention(buf.f(a.q), buf.ptr(a.k), buf.ptr(a.v), kv_dtype, buf.i32(a.mask),
                  buf.i32(a.slots), q[0], q[1], k[1], q[2], k[2], q[3], scale, buf.out_f32(),
                  window);
      };
    }
    case Op::kSliceSeq: {
      const graph::ValueId x_id = graph::operand(n);
      const Shape x = node(x_id).shape;
      const int64_t inner = shape_numel(x) / (x[0] * x[1]), start = n.start, length = n.shape[1];
      return [=] { slice_seq(buf.f(x_id), x[0], x[1], inner, start, length, buf.out_f32()); };
    }
    case Op::kReshape:
    case Op::kCopyToGroup: {
      const graph::ValueId x = graph::operand(n);
      return [=] { buf.out() = buf.ptr(x); };
    }
    case Op::kElementwise: {
      const graph::ElementwiseProgram program = n.program;
      const std::vector<graph::ValueId> operands = n.inputs;
      std::vector<Floats> inputs;
      for (graph::ValueId v : operands) inputs.push_back({nullptr, node(v).dtype});
      const DType dtype = n.dtype;
      const int64_t count = shape_numel(n.shape);
      const int64_t second =
          n.program.results == 2 ? fusion::second_result_bytes(n, kArenaAlignment) : -1;
      // bf16 operands (autocast's) are widened, and a bf16 result rounded, a block at a time
      // inside the chain.
      return [=]() mutable {
        for (size_t i = 0; i < operands.size(); ++i) inputs[i].data = buf.ptr(operands[i]);
        char* out = static_cast<char*>(buf.out());
        elementwise(program, inputs.data(), count, out, dtype,
                    second >= 0 ? out + second : nullptr);
      };
    }
    case Op::kCast: {
      const graph::ValueId x = graph::operand(n);
      const DType from = node(x).dtype, to = n.dtype;
      const auto count = static_cast<size_t>(shape_numel(n.shape));
      return [=] { cast(buf.ptr(x), from, buf.out(), to, count); };
    }
    case Op::kView: {
      const graph::ViewArgs a = graph::view_args(n);
      const size_t byte_offset = static_cast<size_t>(n.start) * dtype_size(n.dtype);
      return [=] { buf.out() = static_cast<char*>(buf.ptr(a.x)) + byte_offset; };
    }
    case Op::kPad: {
      const graph::ValueId x = graph::operand(n);
      const size_t elem = dtype_size(n.dtype), offset = static_cast<size_t>(n.start) * elem,
                   bytes = static_cast<size_t>(shape_numel(node(x).shape)) * elem,
                   total = static_cast<size_t>(shape_numel(n.shape)) * elem;
      return [=] {
        auto* dst = static_cast<char*>(buf.out());
        std::memset(dst, 0, total);
        std::memcpy(dst + offset, buf.ptr(x), bytes);
      };
    }
    case Op::kConcatRows: {
      const std::vector<graph::ValueId> parts = n.inputs;
      std::vector<size_t> bytes;
      for (graph::ValueId p : parts) {
        bytes.push_back(static_cast<size_t>(shape_numel(node(p).shape)) * dtype_size(n.dtype));
      }
      return [=] {
        auto* dst = static_cast<char*>(buf.out());
        for (size_t i = 0; i < parts.size(); ++i) {
          std::memcpy(dst, buf.ptr(parts[i]), bytes[i]);
          dst += bytes[i];
        }
      };
    }
    case Op::kReduceRows: {
      const graph::ValueId x = graph::operand(n);
      const int64_t rows = rows_of(node(x).shape), cols = n.shape[0];
      return [=] { reduce_rows(buf.f(x), rows, cols, buf.out_f32()); };
    }
    case Op::kArgmax: {
      const graph::ValueId x = graph::operand(n);
      const int64_t rows = rows_of(node(x).shape), cols = node(x).shape.back();
      return [=] { argmax_rows(buf.f(x), rows, cols, static_cast<int32_t*>(buf.out())); };
    }
    case Op::kCrossEntropy: {
      const graph::CrossEntropyArgs a = graph::cross_entropy_args(n);
      const int64_t rows = rows_of(node(a.logits).shape), vocab = node(a.logits).shape.back();
      const DType logits_dtype = node(a.logits).dtype;
      if (a.d_loss >= 0) {  // and the gradient over the logits (graph::fold_losses_into_gradients)
        return [=] {
          cross_entropy_and_grad(buf.ptr(a.logits), logits_dtype, vocab, buf.i32(a.targets),
                                 buf.f(a.d_loss), rows, buf.out_f32(), shard.get());
        };
      }
      return [=] {
        cross_entropy({buf.ptr(a.logits), logits_dtype, vocab}, buf.i32(a.targets), rows,
                      buf.out_f32(), shard.get());
      };
    }
    case Op::kCrossEntropyGrad: {
      const graph::CrossEntropyGradArgs a = graph::cross_entropy_grad_args(n);
      const int64_t rows = rows_of(node(a.logits).shape), vocab = node(a.logits).shape.back();
      const bool in_place = n.in_place;
      const DType dtype = n.dtype, logits_dtype = node(a.logits).dtype;
      return [=] {
        if (in_place) buf.out() = buf.ptr(a.logits);
        cross_entropy_grad({buf.ptr(a.logits), logits_dtype, vocab}, buf.i32(a.targets),
                           buf.f(a.d_loss), rows, buf.out(), dtype, shard.get());
      };
    }
    case Op::kEmbeddingGrad: {
      // In place, the rows add into `acc` (graph::fold_summed_accumulations).
      const graph::EmbeddingGradArgs a = graph::embedding_grad_args(n);
      const int64_t count = shape_numel(node(a.ids).shape), vocab = n.shape[0], hidden = n.shape[1];
      return [=] {
        if (a.acc >= 0) buf.out() = buf.ptr(a.acc);
        embedding_grad(buf.f(a.dy), buf.i32(a.ids), count, vocab, hidden, buf.out_f32(),
                       shard.get(), a.acc >= 0);
      };
    }
    case Op::kRmsNormGradInput: {
      const graph::RmsNormGradInputArgs a = graph::rms_norm_grad_input_args(n);
      const int64_t hidden = n.shape.back();
      const float eps = n.eps;
      // dy in bf16 too: attention's gradients under autocast, through RoPE's gradient inside.
      const DType x_dtype = node(a.x).dtype, dy_dtype = node(a.dy).dtype;
      if (a.weight_grad >= 0) {
        const int64_t rows = rows_of(n.shape);
        const DType dtype = n.dtype;
        // RoPE's gradient runs inside where graph::fuse_rope_grads_into_norm_grads put it.
        const Shape s = n.shape;
        const float scaling = n.scale;
        // Its bf16 copy (graph::fold_narrow_copies) after the f32 result, rounded from it.
        const int64_t copy_at =
            n.narrow_copy ? fusion::second_result_bytes(n, kArenaAlignment) : -1;
        return [=] {
          const bool rotated = a.positions >= 0;
          const RopeGradRows rope{rotated ? buf.i32(a.positions) : nullptr,
                                  rotated ? buf.f(a.inv_freq) : nullptr,
                                  s[0],
                                  s[1],
                                  s.size() == 4 ? s[2] : 1,
                                  scaling};
          auto* copy = copy_at >= 0
                           ? reinterpret_cast<uint16_t*>(static_cast<char*>(buf.out()) + copy_at)
                           : nullptr;
          rms_norm_grads({buf.ptr(a.x), x_dtype}, buf.f(a.w), {buf.ptr(a.dy), dy_dtype},
                         a.residual >= 0 ? buf.f(a.residual) : nullptr, rows, hidden, eps,
                         buf.out(), dtype, buf.f(a.weight_grad), rotated ? &rope : nullptr, copy);
        };
      }
      if (a.positions >= 0 || n.narrow_copy) {
        throw Error(
            "[rms_norm_grad_input] RoPE's gradient runs inside, and a bf16 copy is written, only "
            "where the weight's gradient is added");
      }
      return with_output(
          graph, n, buf, hidden,
          [=, widened = Scratch(), widened_dy = Scratch()](int64_t first, int64_t count,
                                                           float* dst) mutable {
            const int64_t offset = first * hidden;
            rms_norm_grad_input(
                f32_range(buf.ptr(a.x), x_dtype, offset, count * hidden, widened), buf.f(a.w),
                f32_range(buf.ptr(a.dy), dy_dtype, offset, count * hidden, widened_dy), count,
                hidden, eps, dst);
            if (a.residual >= 0) add_into(dst, buf.f(a.residual) + offset, count * hidden);
          });
    }
    case Op::kRmsNormGradWeight: {
      // In place, the sums add into `acc` (graph::fold_accumulations).
      const graph::RmsNormGradWeightArgs a = graph::rms_norm_grad_weight_args(n);
      const int64_t rows = rows_of(node(a.x).shape), hidden = n.shape[0];
      const float eps = n.eps;
      const DType x_dtype = node(a.x).dtype, dy_dtype = node(a.dy).dtype;
      return [=] {
        if (a.acc >= 0) buf.out() = buf.ptr(a.acc);
        Scratch widened, widened_dy;
        rms_norm_grad_weight(f32_operand(buf.ptr(a.x), x_dtype, rows * hidden, widened),
                             f32_operand(buf.ptr(a.dy), dy_dtype, rows * hidden, widened_dy), rows,
                             hidden, eps, buf.out_f32(), a.acc >= 0);
      };
    }
    case Op::kAttentionGrad: {
      const graph::AttentionGradArgs a = graph::attention_grad_args(n);
      const Shape q = node(a.q).shape, k = node(a.k).shape;
      const float scale = n.scale;
      const int64_t window = n.window;
      // dy in bf16 too: attention's output gradient under autocast (ops::is_attention_output),
      // and then the gradients too (computed in f32, rounded once).
      const DType q_dtype = node(a.q).dtype, kv_dtype = node(a.k).dtype,
                  dy_dtype = node(a.dy).dtype, out_dtype = n.dtype;
      const int64_t grads = shape_numel(n.shape);
      return [=] {
        // attention_grad writes every gradient (dk and dv zeroed first).
        Scratch wq, wk, wv, wdy, narrowed;
        if (out_dtype != DType::f32) narrowed.resize(static_cast<size_t>(grads));
        float* dst = narrowed.empty() ? buf.out_f32() : narrowed.data();
        attention_grad(f32_operand(buf.ptr(a.q), q_dtype, shape_numel(q), wq),
                       f32_operand(buf.ptr(a.k), kv_dtype, shape_numel(k), wk),
                       f32_operand(buf.ptr(a.v), kv_dtype, shape_numel(k), wv), buf.i32(a.mask),
                       buf.i32(a.slots), f32_operand(buf.ptr(a.dy), dy_dtype, shape_numel(q), wdy),
                       q[0], q[1], k[1], q[2], k[2], q[3], scale, dst, window);
        if (!narrowed.empty()) cast(dst, DType::f32, buf.out(), out_dtype, narrowed.size());
      };
    }
    case Op::kAdamW: {
      const graph::AdamWArgs a = graph::adamw_args(n);
      const int64_t count = shape_numel(n.shape);
      const bool decays = n.decays;
      return [=] {
        buf.out() = buf.ptr(a.param);
        const ops::AdamWScalars s = ops::unpack_adamw_scalars(buf.f(a.scalars));
        adamw_update(s, decays ? s.decay : 1.0f, buf.f(a.param), buf.f(a.grad), buf.f(a.exp_avg),
                     buf.f(a.exp_avg_sq), count);
      };
    }
    case Op::kSumSquares: {
      const graph::ValueId x = graph::operand(n);
      const int64_t count = shape_numel(node(x).shape);
      return [=] { *buf.out_f32() = static_cast<float>(sum_squares(buf.f(x), count)); };
    }
    case Op::kMoeRoute:
    case Op::kMoeExperts:
    case Op::kRouterLoss:
    case Op::kMoeDispatch:
    case Op::kMoeSlots:
    case Op::kMoeCombine:
    case Op::kMoeRouteGrad:
    case Op::kMoeExpertsGrad:
    case Op::kRouterLossGrad:
    case Op::kMoeDispatchGrad:
    case Op::kMoeCombineGrad:
      return make_moe_step(graph, id, ptrs);
    case Op::kAllReduce:
    case Op::kAllGather:
    case Op::kGatherShards:
    case Op::kSumOverReplicas:
    case Op::kReduceScatter:
    case Op::kAllToAll:
      return make_collective_step(graph, id, ptrs);
    case Op::kInput:
    case Op::kWeight:
      break;
  }
  throw Error(std::string("[cpu] no kernel for op ") + graph::op_name(n.op));
}

}  // namespace tfm::cpu
