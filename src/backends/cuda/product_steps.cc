#include "backends/cuda/product_steps.h"

#include <array>
#include <memory>

#include "backends/cuda/kernels.h"
#include "backends/cuda/matmul.h"
#include "fusion/plan.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Node;
using graph::Op;

// Which kernel runs a product: the GEMV for few rows, the tensor-core tiles for a few more (f32
// activations, bf16 weights whose shapes and alignment fit), cuBLASLt otherwise. The last two
// read bf16 activations when the weights are bf16.
enum class ProductPath { kGemv, kSkinny, kMatmul };

// What the three products share: the rows they read, their weights and the input norm's weight
// (-1: none), from their inputs (graph/op_args.h).
struct ProductOperands {
  graph::ValueId x;
  std::vector<graph::ValueId> w;
  graph::ValueId norm = -1;
};

ProductOperands product_operands(const Node& n) {
  switch (n.op) {
    case Op::kLinear:
      return {graph::linear_args(n).x, graph::product_weights(n)};
    case Op::kGatedLinear: {
      const graph::GatedLinearArgs a = graph::gated_linear_args(n);
      return {a.x, graph::product_weights(n), a.norm};
    }
    default: {
      const graph::QkvLinearArgs a = graph::qkv_linear_args(n);
      return {a.x, graph::product_weights(n), a.norm};
    }
  }
}

ProductPath product_path(const graph::Graph& graph, const Node& n) {
  const ProductOperands p = product_operands(n);
  const Node& x = node_of(graph, p.x);
  const int64_t m = rows_of(x.shape);
  if (n.dtype != DType::f32) return ProductPath::kMatmul;  // only cuBLASLt writes bf16
  if (m <= kGemvMaxRows) return ProductPath::kGemv;
  if (m > kSkinnyMaxRows || x.dtype != DType::f32) return ProductPath::kMatmul;
  bool fit = true;
  for (graph::ValueId id : p.w) {
    const Node& w = node_of(graph, id);
    fit = fit && w.dtype == DType::bf16 && skinny_shapes_fit(w.shape[1], {w.shape[0]}) &&
          matmul_operand(graph, id, true).alignment >= 16;
  }
  return fit ? ProductPath::kSkinny : ProductPath::kMatmul;
}

// Whether a product's weights are graph constants, views and reshapes of them included: what no
// step writes, which the decode products may read before they wait for the kernel before
// (overlapped_launch.h). Not weights gathered (FSDP) or cast (autocast) by a step.
WeightReads weight_reads(const graph::Graph& graph, const Node& n) {
  for (graph::ValueId id : product_operands(n).w) {
    const Node* w = &node_of(graph, id);
    while (w->op == Op::kView || w->op == Op::kReshape) w = &node_of(graph, graph::operand(*w));
    if (w->op != Op::kWeight) return WeightReads::kAfterWait;
  }
  return WeightReads::kEarly;
}

size_t arena_aligned(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Scratch a product needs to bring its activations to what its kernel reads: for cuBLASLt, rows of
// the weights' dtype (f32 rows cast to bf16 for bf16 weights, or RMS-normed straight into that
// dtype when the node has an input norm); for the GEMV and the tensor-core tiles, which read f32
// rows and norm them as they read, autocast's bf16 activations widened.
size_t linear_scratch_bytes(const graph::Graph& graph, const Node& n) {
  const ProductOperands p = product_operands(n);
  const Node& x = node_of(graph, p.x);
  const DType w = node_of(graph, p.w[0]).dtype;
  const auto count = static_cast<size_t>(shape_numel(x.shape));
  if (product_path(graph, n) != ProductPath::kMatmul) {
    return x.dtype == DType::f32 ? 0 : count * sizeof(float);
  }
  return p.norm >= 0 || (w != DType::f32 && x.dtype == DType::f32) ? count * dtype_size(w) : 0;
}

// A product's activations (input 0) as its kernel reads them (see linear_scratch_bytes).
struct ProductRows {
  size_t x = 0;
  DType x_dtype = DType::f32, w_dtype = DType::f32;
  int64_t count = 0, hidden = 0;
  ProductPath path = ProductPath::kMatmul;
  MatmulOperand operand;  // the rows as the cuBLASLt product reads them
  bool normed = false;    // `norm` is the input norm's weight
  size_t norm = 0;
  float eps = 0.f;

  bool gemv() const { return path == ProductPath::kGemv; }
  // The GEMV and the tensor-core tiles read f32 rows and apply the input norm themselves.
  bool reads_f32() const { return path != ProductPath::kMatmul; }

  const void* prepare(StepContext& c) const {
    const void* rows = c.ptrs[x];
    if (normed && !reads_f32()) {  // x is f32 (graph::Builder's rule)
      rms_norm(rows, DType::f32, f32_at(c, norm), count / hidden, hidden, eps, c.scratch, w_dtype,
               c.stream);
      return c.scratch;
    }
    const DType want = reads_f32() ? DType::f32 : w_dtype;
    if (x_dtype == want) return rows;
    cast(rows, x_dtype, c.scratch, want, count, c.stream);
    return c.scratch;
  }
  // The norm the GEMV or the tiles apply as they read the rows.
  InputNorm input_norm(StepContext& c) const {
    return normed && reads_f32() ? InputNorm{f32_at(c, norm), eps} : InputNorm{};
  }
};

ProductRows product_rows(const graph::Graph& graph, const Node& n, const char* op) {
  const ProductOperands p = product_operands(n);
  const Node& x = node_of(graph, p.x);
  const DType w_dtype = node_of(graph, p.w[0]).dtype;
  const bool normed = p.norm >= 0;
  if (x.dtype != DType::f32 && (x.dtype != w_dtype || normed)) {
    throw Error(std::string("[cuda ") + op + "] " + std::string(dtype_name(x.dtype)) +
                " activations with " + std::string(dtype_name(w_dtype)) +
                " weights are not supported" + (normed ? " under an input norm" : ""));
  }
  const int64_t k = x.shape.back();
  const ProductPath path = product_path(graph, n);
  // Rows normed or cast into scratch start 256-aligned.
  const MatmulOperand operand =
      x.dtype != w_dtype || normed
          ? matmul_operand(256, static_cast<uint64_t>(k) * dtype_size(w_dtype), false)
          : matmul_operand(graph, p.x, false);
  return {slot(p.x), x.dtype, w_dtype, shape_numel(x.shape),      k,
          path,      operand, normed,  normed ? slot(p.norm) : 0, n.eps};
}

// Where the gated product keeps the gate half on the cuBLASLt path: after the activations' cast.
size_t gate_scratch_offset(const graph::Graph& graph, const Node& n) {
  return arena_aligned(linear_scratch_bytes(graph, n));
}

size_t gated_linear_scratch_bytes(const graph::Graph& graph, const Node& n) {
  if (product_path(graph, n) != ProductPath::kMatmul) return linear_scratch_bytes(graph, n);
  return gate_scratch_offset(graph, n) + static_cast<size_t>(shape_numel(n.shape)) * sizeof(float);
}

}  // namespace

size_t product_scratch_bytes(const graph::Graph& graph, const Node& n) {
  return n.op == Op::kGatedLinear ? gated_linear_scratch_bytes(graph, n)
                                  : linear_scratch_bytes(graph, n);
}

// The output never shares memory with an input (the planner keeps inputs alive through the step
// that reads them), so the residual is read whole before any of the output is written.
Step linear_step(const graph::Graph& graph, const Node& n, size_t out) {
  const graph::LinearArgs a = graph::linear_args(n);
  const Node& w = node_of(graph, a.w);
  const DType dt = w.dtype;
  const int64_t m = rows_of(node_of(graph, a.x).shape), nn = w.shape[0], k = w.shape[1];
  const size_t wi = slot(a.w);
  const bool has_bias = a.bias >= 0, has_residual = a.residual >= 0;
  const size_t bias = has_bias ? slot(a.bias) : 0;
  const size_t residual = has_residual ? slot(a.residual) : 0;
  const ProductRows rows = product_rows(graph, n, "linear");
  const WeightReads reads = weight_reads(graph, n);
  if (rows.gemv()) {
    return [=](StepContext& c) {
      gemv(static_cast<const float*>(rows.prepare(c)), c.ptrs[wi], dt,
           has_bias ? static_cast<const float*>(c.ptrs[bias]) : nullptr,
           has_residual ? static_cast<const float*>(c.ptrs[residual]) : nullptr, m, nn, k,
           static_cast<float*>(c.ptrs[out]), reads, c.stream);
    };
  }
  if (rows.path == ProductPath::kSkinny) {
    return [=](StepContext& c) {
      skinny_linear(static_cast<const float*>(rows.prepare(c)), c.ptrs[wi], rows.input_norm(c),
                    has_bias ? static_cast<const float*>(c.ptrs[bias]) : nullptr,
                    has_residual ? static_cast<const float*>(c.ptrs[residual]) : nullptr, m, nn, k,
                    static_cast<float*>(c.ptrs[out]), reads, c.stream);
    };
  }
  // The residual enters as the product's addend (C, read where it lies); y is arena-aligned.
  // A bf16 y (graph::Builder::autocast_linear) has neither residual nor bias.
  MatmulOperand y_operand =
      has_residual ? matmul_operand(graph, a.residual, false) : MatmulOperand{};
  y_operand.dtype = n.dtype;
  if (n.dtype != DType::f32 && (has_residual || has_bias)) {
    throw Error("[cuda linear] a " + std::string(dtype_name(n.dtype)) +
                " product takes no residual or bias");
  }
  auto product = std::make_shared<const Matmul>(m, nn, k, dt, rows.operand,
                                                matmul_operand(graph, a.w, true), y_operand);
  return [=](StepContext& c) {
    const void* lhs = rows.prepare(c);
    product->run(lhs, c.ptrs[wi], c.ptrs[out], c.workspace, c.stream,
                 has_residual ? static_cast<const float*>(c.ptrs[residual]) : nullptr);
    if (has_bias)
      add_bias(f32_at(c, out), static_cast<const float*>(c.ptrs[bias]), m, nn, c.stream);
  };
}

// q, k and v's products into the three blocks of one value: one GEMV launch over the three weights
// for few rows; for many, three cuBLASLt products, each writing its block.
Step qkv_linear_step(const graph::Graph& graph, const Node& n, size_t out) {
  const graph::QkvLinearArgs a = graph::qkv_linear_args(n);
  const DType dt = node_of(graph, a.w[0]).dtype;
  const int64_t m = rows_of(node_of(graph, a.x).shape), k = node_of(graph, a.x).shape.back();
  const bool has_bias = a.bias[0] >= 0;
  std::array<size_t, 3> weight{}, bias{};
  std::array<int64_t, 3> cols{}, offset{};
  for (size_t i = 0; i < 3; ++i) {
    weight[i] = slot(a.w[i]);
    bias[i] = has_bias ? slot(a.bias[i]) : 0;
    cols[i] = node_of(graph, a.w[i]).shape[0];
    offset[i] = i == 0 ? 0 : offset[i - 1] + m * cols[i - 1];
  }
  const auto bind = [=](StepContext& c) {
    QkvProducts p{};
    for (size_t i = 0; i < 3; ++i) {
      p.w[i] = c.ptrs[weight[i]];
      p.bias[i] = has_bias ? static_cast<const float*>(c.ptrs[bias[i]]) : nullptr;
      p.n[i] = cols[i];
      p.y[i] = f32_at(c, out) + offset[i];
    }
    return p;
  };
  const ProductRows rows = product_rows(graph, n, "qkv_linear");
  const WeightReads reads = weight_reads(graph, n);
  if (rows.gemv()) {
    return [=](StepContext& c) {
      qkv_gemv(static_cast<const float*>(rows.prepare(c)), bind(c), dt, rows.input_norm(c), m, k,
               reads, c.stream);
    };
  }
  if (rows.path == ProductPath::kSkinny) {
    return [=](StepContext& c) {
      skinny_qkv(static_cast<const float*>(rows.prepare(c)), bind(c), rows.input_norm(c), m, k,
                 reads, c.stream);
    };
  }
  std::array<std::shared_ptr<const Matmul>, 3> products;
  for (size_t i = 0; i < 3; ++i) {
    // Each block starts offset[i] floats into the value's arena-aligned buffer.
    const uint32_t start =
        matmul_operand(kArenaAlignment, static_cast<uint64_t>(offset[i]) * sizeof(float), false)
            .alignment;
    const uint32_t y_alignment =
        matmul_operand(start, static_cast<uint64_t>(cols[i]) * sizeof(float), false).alignment;
    products[i] = std::make_shared<const Matmul>(m, cols[i], k, dt, rows.operand,
                                                 matmul_operand(graph, a.w[i], true),
                                                 MatmulOperand{.alignment = y_alignment});
  }
  return [=](StepContext& c) {
    const void* lhs = rows.prepare(c);
    const QkvProducts p = bind(c);
    for (size_t i = 0; i < 3; ++i) {
      products[i]->run(lhs, p.w[i], p.y[i], c.workspace, c.stream);
      if (has_bias) add_bias(p.y[i], p.bias[i], m, cols[i], c.stream);
    }
  };
}

// silu(x w_gate^T + b_gate) * (x w_up^T + b_up): one GEMV over both weights for few rows; for many,
// the two cuBLASLt products (the gate into scratch, the up into the output) and the gating pass.
Step gated_linear_step(const graph::Graph& graph, const Node& n, size_t out) {
  const graph::GatedLinearArgs a = graph::gated_linear_args(n);
  const Node& w = node_of(graph, a.w_gate);
  const DType dt = w.dtype;
  const int64_t m = rows_of(node_of(graph, a.x).shape), nn = w.shape[0], k = w.shape[1];
  const size_t wg = slot(a.w_gate), wu = slot(a.w_up);
  const bool has_bias = a.bias_gate >= 0;
  const size_t bg = has_bias ? slot(a.bias_gate) : 0, bu = has_bias ? slot(a.bias_up) : 0;
  const auto bias = [=](StepContext& c, size_t i) {
    return has_bias ? static_cast<const float*>(c.ptrs[i]) : nullptr;
  };
  const ProductRows rows = product_rows(graph, n, "gated_linear");
  const WeightReads reads = weight_reads(graph, n);
  if (rows.gemv()) {
    return [=](StepContext& c) {
      gated_gemv(static_cast<const float*>(rows.prepare(c)), c.ptrs[wg], c.ptrs[wu], dt,
                 rows.input_norm(c), bias(c, bg), bias(c, bu), m, nn, k,
                 static_cast<float*>(c.ptrs[out]), reads, c.stream);
    };
  }
  if (rows.path == ProductPath::kSkinny) {
    return [=](StepContext& c) {
      skinny_gated(static_cast<const float*>(rows.prepare(c)), c.ptrs[wg], c.ptrs[wu],
                   rows.input_norm(c), bias(c, bg), bias(c, bu), m, nn, k,
                   static_cast<float*>(c.ptrs[out]), reads, c.stream);
    };
  }
  // The two weights are separate allocations, each with its own alignment.
  auto gate = std::make_shared<const Matmul>(m, nn, k, dt, rows.operand,
                                             matmul_operand(graph, a.w_gate, true));
  auto up = std::make_shared<const Matmul>(m, nn, k, dt, rows.operand,
                                           matmul_operand(graph, a.w_up, true));
  const size_t gate_offset = gate_scratch_offset(graph, n);
  graph::ElementwiseProgram gating{{{graph::EwCode::kLoad, 0},
                                    {graph::EwCode::kSilu},
                                    {graph::EwCode::kLoad, 1},
                                    {graph::EwCode::kMul}}};
  const EwKernelProgram program = to_kernel_program(gating, 2);
  return [=](StepContext& c) {
    const void* lhs = rows.prepare(c);
    auto* gate_out = reinterpret_cast<float*>(static_cast<char*>(c.scratch) + gate_offset);
    auto* y = static_cast<float*>(c.ptrs[out]);
    gate->run(lhs, c.ptrs[wg], gate_out, c.workspace, c.stream);
    up->run(lhs, c.ptrs[wu], y, c.workspace, c.stream);
    if (has_bias) {
      add_bias(gate_out, bias(c, bg), m, nn, c.stream);
      add_bias(y, bias(c, bu), m, nn, c.stream);
    }
    EwKernelProgram bound = program;
    bound.inputs[0] = gate_out;
    bound.inputs[1] = y;
    elementwise(bound, m * nn, y, DType::f32, c.stream);
  };
}

}  // namespace tfm::cuda
