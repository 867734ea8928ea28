#include "backends/cpu/steps.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "graph/plan.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

using graph::Node;
using graph::Op;

int64_t rows_of(const Shape& shape) { return shape_numel(shape) / shape.back(); }

void check_f32(const Node& n, const char* op) {
  if (n.dtype != DType::f32) {
    throw Error(std::string("[") + op + "] needs f32 operands on cpu, got " +
                std::string(dtype_name(n.dtype)) + " for '" + n.name + "'");
  }
}

// A product's rows as it reads them: x, or rms_norm(x, norm, eps) into `normed` when the node has
// an input norm (graph::Node::normed; x is f32 then).
const float* product_rows(const float* x, const float* norm, float eps, int64_t m, int64_t k,
                          std::vector<float>& normed) {
  if (norm == nullptr) return x;
  normed.resize(static_cast<size_t>(m * k));
  rms_norm(x, norm, m, k, eps, normed.data());
  return normed.data();
}

// An operand of a matrix product as f32: itself, or (bf16 under autocast) widened into `widened`.
// The products of bf16 values are exact in f32, so this matches a bf16 product accumulated in f32.
const float* f32_operand(const void* data, DType dtype, int64_t count, std::vector<float>& widened) {
  if (dtype == DType::f32) return static_cast<const float*>(data);
  widened.resize(static_cast<size_t>(count));
  cast(data, dtype, widened.data(), DType::f32, static_cast<size_t>(count));
  return widened.data();
}

// Elements first .. first + count - 1 of `data` as f32, as f32_operand gives them.
const float* f32_range(const void* data, DType dtype, int64_t first, int64_t count,
                       std::vector<float>& widened) {
  return f32_operand(
      static_cast<const char*>(data) + first * static_cast<int64_t>(dtype_size(dtype)), dtype,
      count, widened);
}

// A step of an op that graph::fold_casts may have made write bf16. compute(first, count, dst,
// second) writes units first .. first + count - 1 of the result (rows, tokens or elements: `unit`
// floats each) as f32 to dst: the node's own buffer, or for bf16 a block of kNarrowedBlock floats
// narrowed into it after each call, so no f32 copy of the whole result is ever held. A paired
// elementwise step (graph::pair_elementwise_siblings) writes its second result to `second` alike;
// any other step gets null there.
constexpr int64_t kNarrowedBlock = int64_t{1} << 16;

template <typename Compute>
std::function<void()> with_outputs(const Node& n, size_t out, std::vector<void*>& ptrs,
                                   int64_t unit, Compute compute) {
  const int64_t units = shape_numel(n.shape) / unit;
  const DType dtype = n.dtype;
  const bool paired = n.op == Op::kElementwise && n.program.results == 2;
  const int64_t second = paired ? graph::second_result_bytes(n) : 0;
  // Element `element` of result `r` in the node's buffer.
  const auto at = [=, &ptrs](int r, int64_t element) {
    return static_cast<char*>(ptrs[out]) + r * second +
           element * static_cast<int64_t>(dtype_size(dtype));
  };
  if (dtype == DType::f32) {
    return [=]() mutable {
      compute(0, units, reinterpret_cast<float*>(at(0, 0)),
              paired ? reinterpret_cast<float*>(at(1, 0)) : nullptr);
    };
  }
  const int64_t block = std::max<int64_t>(1, kNarrowedBlock / unit);
  return [=, rows = std::vector<float>(), second_rows = std::vector<float>()]() mutable {
    rows.resize(static_cast<size_t>(block * unit));
    if (paired) second_rows.resize(rows.size());
    for (int64_t first = 0; first < units; first += block) {
      const int64_t count = std::min(block, units - first);
      compute(first, count, rows.data(), paired ? second_rows.data() : nullptr);
      for (int r = 0; r < (paired ? 2 : 1); ++r) {
        cast((r == 0 ? rows : second_rows).data(), DType::f32, at(r, first * unit), dtype,
             static_cast<size_t>(count * unit));
      }
    }
  };
}

// The same for a step of one result: compute(first, count, dst).
template <typename Compute>
std::function<void()> with_output(const Node& n, size_t out, std::vector<void*>& ptrs, int64_t unit,
                                  Compute compute) {
  return with_outputs(n, out, ptrs, unit,
                      [compute](int64_t first, int64_t count, float* dst, float*) mutable {
                        compute(first, count, dst);
                      });
}

}  // namespace

std::function<void()> make_step(const graph::Graph& graph, graph::ValueId id,
                                std::vector<void*>& ptrs) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  const auto in = [&graph, &n](size_t i) -> const Node& {
    return graph.nodes[static_cast<size_t>(n.inputs[i])];
  };
  std::vector<size_t> args(n.inputs.begin(), n.inputs.end());
  const auto out = static_cast<size_t>(id);
  const auto f = [&ptrs](size_t i) { return static_cast<float*>(ptrs[i]); };
  const auto i32 = [&ptrs](size_t i) { return static_cast<const int32_t*>(ptrs[i]); };
  // The node's vocabulary shard; its group lives as long as the graph that holds the node.
  const std::shared_ptr<const VocabShard> shard =
      n.shard ? std::make_shared<const VocabShard>(VocabShard{n.start, n.group.get()}) : nullptr;

  switch (n.op) {
    case Op::kEmbedding: {
      const Node& table = in(0);
      const DType dt = table.dtype;
      const int64_t vocab = table.shape[0], hidden = table.shape[1],
                    count = shape_numel(in(1).shape), first_id = n.start;
      if (n.shard) {
        return [=, &ptrs] {
          embedding_shard(ptrs[args[0]], dt, vocab, hidden, first_id, i32(args[1]), count, f(out));
        };
      }
      return
          [=, &ptrs] { embedding(ptrs[args[0]], dt, vocab, hidden, i32(args[1]), count, f(out)); };
    }
    case Op::kLinear: {
      const Node& w = in(1);
      const DType dt = w.dtype;
      const int64_t m = rows_of(in(0).shape), nn = w.shape[0], k = w.shape[1];
      const bool has_bias = graph::has_bias(n), has_residual = n.residual;
      const DType x_dtype = in(0).dtype;
      if (n.dtype == DType::f32) {
        return [=, &ptrs] {
          std::vector<float> widened;
          const float* x = f32_operand(ptrs[args[0]], x_dtype, m * k, widened);
          linear(x, ptrs[args[1]], dt, has_bias ? f(args[2]) : nullptr, m, nn, k, f(out));
          if (has_residual) add_into(f(out), f(args.back()), m * nn);
        };
      }
      // A narrowed output (graph::Builder::autocast_linear: no bias, no residual) is computed a
      // block of columns at a time, so each weight row is read (and widened) once and no f32 copy
      // of the whole output is held; each block is narrowed into its place in the rows.
      if (has_bias || has_residual) {
        throw Error("[linear] a " + std::string(dtype_name(n.dtype)) +
                    " product takes no residual or bias");
      }
      const DType out_dtype = n.dtype;
      const size_t w_row_bytes = static_cast<size_t>(k) * dtype_size(dt),
                   out_size = dtype_size(out_dtype);
      constexpr int64_t kBlockFloats = int64_t{1} << 22;
      const int64_t cols =
          std::clamp<int64_t>(kBlockFloats / std::max<int64_t>(m, 1), 1, std::max<int64_t>(nn, 1));
      return [=, &ptrs] {
        std::vector<float> widened, block(static_cast<size_t>(m * cols));
        const float* x = f32_operand(ptrs[args[0]], x_dtype, m * k, widened);
        for (int64_t first = 0; first < nn; first += cols) {
          const int64_t width = std::min(cols, nn - first);
          linear(x, static_cast<const char*>(ptrs[args[1]]) + first * w_row_bytes, dt, nullptr, m,
                 width, k, block.data());
          auto* dst = static_cast<char*>(ptrs[out]) + static_cast<size_t>(first) * out_size;
#pragma omp parallel for schedule(static) if (m * width > kParallelMinElements)
          for (int64_t r = 0; r < m; ++r) {
            convert_elements(block.data() + r * width, DType::f32,
                             dst + static_cast<size_t>(r * nn) * out_size, out_dtype,
                             static_cast<size_t>(width));
          }
        }
      };
    }
    case Op::kGatedLinear: {
      const DType dt = in(1).dtype, x_dtype = in(0).dtype;
      const int64_t m = rows_of(in(0).shape), nn = in(1).shape[0], k = in(1).shape[1];
      const bool normed = n.normed, has_bias = graph::has_bias(n);
      const float eps = n.eps;
      // silu(gate) * up, as the fused elementwise chain of the unfused graph computes it.
      const graph::ElementwiseProgram gating{{{graph::EwCode::kLoad, 0},
                                              {graph::EwCode::kSilu},
                                              {graph::EwCode::kLoad, 1},
                                              {graph::EwCode::kMul}}};
      return [=, &ptrs] {
        std::vector<float> widened, normed_rows, gate(static_cast<size_t>(m * nn));
        const float* x = product_rows(f32_operand(ptrs[args[0]], x_dtype, m * k, widened),
                                      normed ? f(args.back()) : nullptr, eps, m, k, normed_rows);
        linear(x, ptrs[args[1]], dt, has_bias ? f(args[3]) : nullptr, m, nn, k, gate.data());
        linear(x, ptrs[args[2]], dt, has_bias ? f(args[4]) : nullptr, m, nn, k, f(out));
        const float* operands[2] = {gate.data(), f(out)};
        elementwise(gating, operands, m * nn, f(out));
      };
    }
    case Op::kQkvLinear: {
      const DType dt = in(1).dtype, x_dtype = in(0).dtype;
      const int64_t m = rows_of(in(0).shape), k = in(0).shape.back();
      const std::array<int64_t, 3> nn{in(1).shape[0], in(2).shape[0], in(3).shape[0]};
      const bool normed = n.normed, has_bias = graph::has_bias(n);
      const float eps = n.eps;
      return [=, &ptrs] {
        std::vector<float> widened, normed_rows;
        const float* x = product_rows(f32_operand(ptrs[args[0]], x_dtype, m * k, widened),
                                      normed ? f(args.back()) : nullptr, eps, m, k, normed_rows);
        float* y = f(out);
        for (size_t i = 0; i < 3; ++i) {
          linear(x, ptrs[args[1 + i]], dt, has_bias ? f(args[4 + i]) : nullptr, m, nn[i], k, y);
          y += m * nn[i];
        }
      };
    }
    case Op::kPrepareAttention: {
      const Shape q = in(0).shape, k = in(1).shape, cache = in(6).shape;
      const DType cache_dtype = in(6).dtype;
      const bool norms = args.size() > 8;
      const float eps = n.eps, scaling = n.scale;
      return [=, &ptrs] {
        std::vector<float> k_rotated(static_cast<size_t>(shape_numel(k)));
        const float* q_in = f(args[0]);
        const float* k_in = f(args[1]);
        if (norms) {
          rms_norm(q_in, f(args[8]), shape_numel(q) / q[3], q[3], eps, f(out));
          rms_norm(k_in, f(args[9]), shape_numel(k) / k[3], k[3], eps, k_rotated.data());
          q_in = f(out);
          k_in = k_rotated.data();
        }
        const int32_t* positions = i32(args[3]);
        const float* inv_freq = f(args[4]);
        rope(q_in, positions, inv_freq, q[0], q[1], q[2], q[3], scaling, f(out));
        rope(k_in, positions, inv_freq, k[0], k[1], k[2], k[3], scaling, k_rotated.data());
        const int32_t* slots = i32(args[5]);
        cache_write(ptrs[args[6]], cache_dtype, k_rotated.data(), slots, k[0], cache[1], k[1],
                    k[2] * k[3]);
        cache_write(ptrs[args[7]], cache_dtype, f(args[2]), slots, k[0], cache[1], k[1],
                    k[2] * k[3]);
      };
    }
    // x may be a bf16 product's output (autocast), widened a block of rows at a time, as for
    // RoPE and the norm's gradients below.
    case Op::kRmsNorm: {
      const int64_t hidden = n.shape.back();
      const float eps = n.eps;
      const DType x_dtype = in(0).dtype;
      return with_output(
          n, out, ptrs, hidden,
          [=, &ptrs, widened = std::vector<float>()](int64_t first, int64_t count,
                                                     float* dst) mutable {
            rms_norm(f32_range(ptrs[args[0]], x_dtype, first * hidden, count * hidden, widened),
                     f(args[1]), count, hidden, eps, dst);
          });
    }
    case Op::kRope:
    case Op::kRopeGrad: {
      const Shape s = n.shape;
      const float scaling = n.scale, eps = n.eps;
      const bool normed = n.normed;
      const auto rotate = n.op == Op::kRope ? rope : rope_grad;
      // Tokens are the rows: one position each, so a block of them is a batch of one. Each head
      // is normed first where graph::fuse_norms_into_rope folded its norm in; RoPE rotates the
      // normed rows where they are (in place), and its gradient rotates dy back.
      const int64_t row = s[2] * s[3];
      const DType x_dtype = in(0).dtype;
      return with_output(
          n, out, ptrs, row,
          [=, &ptrs, widened = std::vector<float>()](int64_t first, int64_t count,
                                                     float* dst) mutable {
            const float* x = f32_range(ptrs[args[0]], x_dtype, first * row, count * row, widened);
            if (normed) {
              rms_norm(x, f(args[3]), count * s[2], s[3], eps, dst);
              x = dst;
            }
            rotate(x, i32(args[1]) + first, f(args[2]), 1, count, s[2], s[3], scaling, dst);
          });
    }
    case Op::kAccumulate: {
      const int64_t count = shape_numel(n.shape);
      return [=, &ptrs] {
        ptrs[out] = ptrs[args[0]];
        add_into(f(args[0]), f(args[1]), count);
      };
    }
    case Op::kAttention: {
      const Shape q = in(0).shape, k = in(1).shape;
      const float scale = n.scale;
      const DType q_dtype = in(0).dtype, kv_dtype = in(1).dtype;
      // A bf16 KV cache (with f32 q) is read as it is; under autocast (bf16 q, k and v) every
      // operand is widened exactly for the f32 kernels, whose long-sequence path is the fast one.
      // Its output may be bf16 there too (graph::fold_casts): computed in f32, rounded once.
      if (q_dtype != DType::f32) {
        const DType out_dtype = n.dtype;
        return [=, &ptrs] {
          std::vector<float> wq, wk, wv, narrowed;
          if (out_dtype != DType::f32) narrowed.resize(static_cast<size_t>(shape_numel(q)));
          float* dst = narrowed.empty() ? f(out) : narrowed.data();
          attention(f32_operand(ptrs[args[0]], q_dtype, shape_numel(q), wq),
                    f32_operand(ptrs[args[1]], kv_dtype, shape_numel(k), wk),
                    f32_operand(ptrs[args[2]], kv_dtype, shape_numel(k), wv), DType::f32,
                    i32(args[3]), i32(args[4]), q[0], q[1], k[1], q[2], k[2], q[3], scale, dst);
          if (!narrowed.empty()) cast(dst, DType::f32, ptrs[out], out_dtype, narrowed.size());
        };
      }
      check_f32(n, "attention");
      return [=, &ptrs] {
        attention(f(args[0]), ptrs[args[1]], ptrs[args[2]], kv_dtype, i32(args[3]), i32(args[4]),
                  q[0], q[1], k[1], q[2], k[2], q[3], scale, f(out));
      };
    }
    case Op::kSliceSeq: {
      const Shape x = in(0).shape;
      const int64_t inner = shape_numel(x) / (x[0] * x[1]), start = n.start, length = n.shape[1];
      return [=] { slice_seq(f(args[0]), x[0], x[1], inner, start, length, f(out)); };
    }
    case Op::kReshape:
      return [=, &ptrs] { ptrs[out] = ptrs[args[0]]; };
    case Op::kElementwise: {
      const graph::ElementwiseProgram program = n.program;
      std::vector<DType> dtypes;
      for (size_t i = 0; i < args.size(); ++i) dtypes.push_back(in(i).dtype);
      // Inputs in bf16 (autocast's products) are widened a block at a time as they are read;
      // f32 inputs are read where they lie, in one call.
      const bool narrow_inputs =
          std::any_of(dtypes.begin(), dtypes.end(), [](DType d) { return d != DType::f32; });
      return with_outputs(
          n, out, ptrs, 1,
          [=, &ptrs, inputs = std::vector<const float*>(args.size()),
           widened = std::vector<std::vector<float>>(args.size())](
              int64_t first, int64_t length, float* dst, float* second) mutable {
            const int64_t block = narrow_inputs ? kNarrowedBlock : std::max<int64_t>(length, 1);
            for (int64_t begin = first; begin < first + length; begin += block) {
              const int64_t count = std::min(block, first + length - begin);
              for (size_t i = 0; i < args.size(); ++i) {
                inputs[i] = f32_range(ptrs[args[i]], dtypes[i], begin, count, widened[i]);
              }
              elementwise(program, inputs.data(), count, dst + (begin - first),
                          second != nullptr ? second + (begin - first) : nullptr);
            }
          });
    }
    case Op::kCast: {
      const DType from = in(0).dtype, to = n.dtype;
      const auto count = static_cast<size_t>(shape_numel(n.shape));
      return [=, &ptrs] { cast(ptrs[args[0]], from, ptrs[out], to, count); };
    }
    case Op::kView: {
      const size_t byte_offset = static_cast<size_t>(n.start) * dtype_size(n.dtype);
      return [=, &ptrs] { ptrs[out] = static_cast<char*>(ptrs[args[0]]) + byte_offset; };
    }
    case Op::kPad: {
      const size_t elem = dtype_size(n.dtype), offset = static_cast<size_t>(n.start) * elem,
                   bytes = static_cast<size_t>(shape_numel(in(0).shape)) * elem,
                   total = static_cast<size_t>(shape_numel(n.shape)) * elem;
      return [=, &ptrs] {
        auto* dst = static_cast<char*>(ptrs[out]);
        std::memset(dst, 0, total);
        std::memcpy(dst + offset, ptrs[args[0]], bytes);
      };
    }
    case Op::kConcatRows: {
      std::vector<size_t> bytes;
      for (size_t i = 0; i < args.size(); ++i) {
        bytes.push_back(static_cast<size_t>(shape_numel(in(i).shape)) * dtype_size(n.dtype));
      }
      return [=, &ptrs] {
        auto* dst = static_cast<char*>(ptrs[out]);
        for (size_t i = 0; i < args.size(); ++i) {
          std::memcpy(dst, ptrs[args[i]], bytes[i]);
          dst += bytes[i];
        }
      };
    }
    case Op::kReduceRows: {
      const int64_t rows = rows_of(in(0).shape), cols = n.shape[0];
      return [=] { reduce_rows(f(args[0]), rows, cols, f(out)); };
    }
    case Op::kArgmax: {
      const int64_t rows = rows_of(in(0).shape), cols = in(0).shape.back();
      return [=, &ptrs] {
        argmax_rows(f(args[0]), rows, cols, static_cast<int32_t*>(ptrs[out]));
      };
    }
    case Op::kAllReduce: {
      const auto count = static_cast<size_t>(shape_numel(n.shape));
      const std::shared_ptr<graph::Communicator> group = n.group;
      return [=] {
        std::memcpy(f(out), f(args[0]), count * sizeof(float));
        group->all_reduce_sum(f(out), count);
      };
    }
    case Op::kAllGather: {
      const int64_t rows = rows_of(in(0).shape), cols = in(0).shape.back();
      const std::shared_ptr<graph::Communicator> group = n.group;
      return [=] {
        std::vector<float> gathered(static_cast<size_t>(rows * cols * group->size()));
        group->all_gather(f(args[0]), static_cast<size_t>(rows * cols), gathered.data());
        interleave_gathered(gathered.data(), rows, cols, group->size(), f(out));
      };
    }
    case Op::kCrossEntropy: {
      const int64_t rows = rows_of(in(0).shape), vocab = in(0).shape.back();
      const DType logits_dtype = in(0).dtype;
      if (n.in_place) {  // and the gradient over the logits (graph::fold_losses_into_gradients)
        return [=, &ptrs] {
          cross_entropy_and_grad(ptrs[args[0]], logits_dtype, vocab, i32(args[1]), f(args[2]), rows,
                                 f(out), shard.get());
        };
      }
      return [=, &ptrs] {
        cross_entropy({ptrs[args[0]], logits_dtype, vocab}, i32(args[1]), rows, f(out),
                      shard.get());
      };
    }
    case Op::kCrossEntropyGrad: {
      const int64_t rows = rows_of(in(0).shape), vocab = in(0).shape.back();
      const bool in_place = n.in_place;
      const DType dtype = n.dtype, logits_dtype = in(0).dtype;
      return [=, &ptrs] {
        if (in_place) ptrs[out] = ptrs[args[0]];
        cross_entropy_grad({ptrs[args[0]], logits_dtype, vocab}, i32(args[1]), f(args[2]), rows,
                           ptrs[out], dtype, shard.get());
      };
    }
    case Op::kEmbeddingGrad: {
      // In place, input 0 is the sum the rows add into (graph::fold_summed_accumulations).
      const bool in_place = n.in_place;
      const size_t first = graph::first_operand(n);
      const int64_t count = shape_numel(in(first + 1).shape), vocab = n.shape[0],
                    hidden = n.shape[1];
      return [=, &ptrs] {
        if (in_place) ptrs[out] = ptrs[args[0]];
        embedding_grad(f(args[first]), i32(args[first + 1]), count, vocab, hidden, f(out),
                       shard.get(), in_place);
      };
    }
    case Op::kCopyToGroup:
      return [=, &ptrs] { ptrs[out] = ptrs[args[0]]; };
    case Op::kGatherShards: {
      check_f32(n, "gather_shards");
      const auto count = static_cast<size_t>(shape_numel(in(0).shape));
      graph::Communicator* group = n.group.get();
      return [=] { group->all_gather(f(args[0]), count, f(out)); };
    }
    case Op::kSumOverReplicas: {
      const auto count = static_cast<size_t>(shape_numel(n.shape));
      const int64_t block = n.start;
      graph::Communicator* group = n.group.get();
      return [=] {
        std::vector<float> all(count * static_cast<size_t>(group->size()));
        group->all_gather(f(args[0]), count, all.data());
        sum_replica_block(all.data(), count, group->rank() / block * block, block, f(out));
      };
    }
    case Op::kReduceScatter: {
      const auto count = static_cast<size_t>(shape_numel(n.shape));
      graph::Communicator* group = n.group.get();
      return [=] { group->reduce_scatter_sum(f(args[0]), count, f(out)); };
    }
    case Op::kLinearGradInput: {
      // In place, input 0 is a sum the product adds into (graph::fold_gradient_sums).
      const bool in_place = n.in_place;
      const size_t first = graph::first_operand(n);
      const Node& w = in(first + 1);
      const DType dt = w.dtype;
      const int64_t m = rows_of(in(first).shape), nn = w.shape[0], k = w.shape[1];
      const DType dy_dtype = in(first).dtype;
      const DType dx_dtype = n.dtype;
      return [=, &ptrs] {
        if (in_place) ptrs[out] = ptrs[args[0]];
        std::vector<float> widened, narrowed;
        const float* dy = f32_operand(ptrs[args[first]], dy_dtype, m * nn, widened);
        // A bf16 dx (ops::linear_backward) is computed whole in f32, then rounded once.
        if (dx_dtype != DType::f32) narrowed.resize(static_cast<size_t>(m * k));
        float* dx = narrowed.empty() ? f(out) : narrowed.data();
        linear_grad_input(dy, ptrs[args[first + 1]], dt, m, nn, k, dx, in_place);
        if (!narrowed.empty()) cast(dx, DType::f32, ptrs[out], dx_dtype, narrowed.size());
      };
    }
    case Op::kLinearGradWeight: {
      // In place, input 0 is the accumulator the product adds into (graph::fold_accumulations).
      const bool in_place = n.in_place;
      const size_t first = graph::first_operand(n);
      const int64_t m = rows_of(in(first).shape), nn = n.shape[0], k = n.shape[1];
      const DType dy_dtype = in(first).dtype, x_dtype = in(first + 1).dtype;
      return [=, &ptrs] {
        if (in_place) ptrs[out] = ptrs[args[0]];
        std::vector<float> dy_widened, x_widened;
        const float* dy = f32_operand(ptrs[args[first]], dy_dtype, m * nn, dy_widened);
        const float* x = f32_operand(ptrs[args[first + 1]], x_dtype, m * k, x_widened);
        linear_grad_weight(dy, x, m, nn, k, f(out), in_place);
      };
    }
    case Op::kRmsNormGradInput: {
      const int64_t hidden = n.shape.back();
      const float eps = n.eps;
      const bool residual = n.residual;
      // dy in bf16 too: attention's gradients under autocast, through RoPE's gradient inside.
      const DType x_dtype = in(0).dtype, dy_dtype = in(2).dtype;
      if (n.adds_weight_grad) {
        const int64_t rows = rows_of(n.shape);
        const DType dtype = n.dtype;
        // Where RoPE's gradient runs inside (graph::fuse_rope_grads_into_norm_grads), its
        // positions and frequencies follow the residual.
        const bool rotated = n.rotated;
        const size_t rope_args = residual ? 4 : 3;
        const Shape s = n.shape;
        const float scaling = n.scale;
        // Its bf16 copy (graph::fold_narrow_copies) after the f32 result, rounded from it.
        const int64_t copy_at = n.narrow_copy ? graph::second_result_bytes(n) : -1;
        return [=, &ptrs] {
          std::vector<float> widened, widened_dy;
          const RopeGradRows rope{rotated ? i32(args[rope_args]) : nullptr,
                                  rotated ? f(args[rope_args + 1]) : nullptr,
                                  s[0],
                                  s[1],
                                  s.size() == 4 ? s[2] : 1,
                                  scaling};
          rms_norm_grads(f32_operand(ptrs[args[0]], x_dtype, rows * hidden, widened), f(args[1]),
                         f32_operand(ptrs[args[2]], dy_dtype, rows * hidden, widened_dy),
                         residual ? f(args[3]) : nullptr, rows, hidden, eps, ptrs[out], dtype,
                         f(args.back()), rotated ? &rope : nullptr);
          if (copy_at >= 0) {
            cast(ptrs[out], dtype, static_cast<char*>(ptrs[out]) + copy_at, DType::bf16,
                 static_cast<size_t>(rows * hidden));
          }
        };
      }
      if (n.rotated || n.narrow_copy) {
        throw Error(
            "[rms_norm_grad_input] RoPE's gradient runs inside, and a bf16 copy is written, only "
            "where the weight's gradient is added");
      }
      return with_output(
          n, out, ptrs, hidden,
          [=, &ptrs, widened = std::vector<float>(), widened_dy = std::vector<float>()](
              int64_t first, int64_t count, float* dst) mutable {
            const int64_t offset = first * hidden;
            rms_norm_grad_input(
                f32_range(ptrs[args[0]], x_dtype, offset, count * hidden, widened), f(args[1]),
                f32_range(ptrs[args[2]], dy_dtype, offset, count * hidden, widened_dy), count,
                hidden, eps, dst);
            if (residual) add_into(dst, f(args[3]) + offset, count * hidden);
          });
    }
    case Op::kRmsNormGradWeight: {
      // In place, input 0 is the accumulator the sums add into (graph::fold_accumulations).
      const bool in_place = n.in_place;
      const size_t first = graph::first_operand(n);
      const int64_t rows = rows_of(in(first).shape), hidden = n.shape[0];
      const float eps = n.eps;
      const DType x_dtype = in(first).dtype, dy_dtype = in(first + 1).dtype;
      return [=, &ptrs] {
        if (in_place) ptrs[out] = ptrs[args[0]];
        std::vector<float> widened, widened_dy;
        rms_norm_grad_weight(
            f32_operand(ptrs[args[first]], x_dtype, rows * hidden, widened),
            f32_operand(ptrs[args[first + 1]], dy_dtype, rows * hidden, widened_dy), rows, hidden,
            eps, f(out), in_place);
      };
    }
    case Op::kAttentionGrad: {
      const Shape q = in(0).shape, k = in(1).shape;
      const float scale = n.scale;
      // dy in bf16 too: attention's output gradient under autocast (ops::is_attention_output),
      // and then the gradients too (computed in f32, rounded once).
      const DType q_dtype = in(0).dtype, kv_dtype = in(1).dtype, dy_dtype = in(5).dtype,
                  out_dtype = n.dtype;
      const int64_t grads = shape_numel(n.shape);
      return [=, &ptrs] {
        std::vector<float> wq, wk, wv, wdy, narrowed;
        if (out_dtype != DType::f32) narrowed.resize(static_cast<size_t>(grads));
        float* dst = narrowed.empty() ? f(out) : narrowed.data();
        attention_grad(f32_operand(ptrs[args[0]], q_dtype, shape_numel(q), wq),
                       f32_operand(ptrs[args[1]], kv_dtype, shape_numel(k), wk),
                       f32_operand(ptrs[args[2]], kv_dtype, shape_numel(k), wv), i32(args[3]),
                       i32(args[4]), f32_operand(ptrs[args[5]], dy_dtype, shape_numel(q), wdy),
                       q[0], q[1], k[1], q[2], k[2], q[3], scale, dst);
        if (!narrowed.empty()) cast(dst, DType::f32, ptrs[out], out_dtype, narrowed.size());
      };
    }
    case Op::kInput:
    case Op::kWeight:
      break;
  }
  throw Error(std::string("[cpu] no kernel for op ") + graph::op_name(n.op));
}

}  // namespace tfm::cpu
