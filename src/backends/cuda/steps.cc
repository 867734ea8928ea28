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

namespace {

using graph::Node;
using graph::Op;

// Device memory on the current device, zeroed before any step runs.
std::shared_ptr<void> zeroed_device_buffer(size_t bytes) {
  int device = 0;
  TFM_CUDA(cudaGetDevice(&device));
  std::shared_ptr<void> buffer = device_allocate(device, bytes);
  device_fill_zero(buffer.get(), bytes, device);
  return buffer;
}

// Throws when the program is longer or reads more inputs than the kernel holds.
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

// Which kernel runs a product: the GEMV for few rows, the tensor-core tiles for a few more (f32
// activations, bf16 weights whose shapes and alignment fit), cuBLASLt otherwise. The last two
// read bf16 activations when the weights are bf16.
enum class ProductPath { kGemv, kSkinny, kMatmul };

ProductPath product_path(const graph::Graph& graph, const Node& n) {
  const Node& x = input(graph, n, 0);
  const int64_t m = rows_of(x.shape);
  if (n.dtype != DType::f32) return ProductPath::kMatmul;  // only cuBLASLt writes bf16
  if (m <= kGemvMaxRows) return ProductPath::kGemv;
  if (m > kSkinnyMaxRows || x.dtype != DType::f32) return ProductPath::kMatmul;
  // The weights: inputs 1 .. 3 of q, k and v's products, 1 .. 2 of the gated one, 1 otherwise.
  const size_t weights = n.op == Op::kQkvLinear ? 3 : n.op == Op::kGatedLinear ? 2 : 1;
  bool fit = true;
  for (size_t i = 1; i <= weights; ++i) {
    const Node& w = input(graph, n, i);
    fit = fit && w.dtype == DType::bf16 && skinny_shapes_fit(w.shape[1], {w.shape[0]}) &&
          matmul_operand(graph, n.inputs[i], true).alignment >= 16;
  }
  return fit ? ProductPath::kSkinny : ProductPath::kMatmul;
}

// Whether a product's weights (inputs first .. last) are graph constants, views and reshapes of
// them included: what no step writes, which the decode products may read before they wait for the
// kernel before (overlapped_launch.h). Not weights gathered (FSDP) or cast (autocast) by a step.
WeightReads weight_reads(const graph::Graph& graph, const Node& n, size_t first, size_t last) {
  for (size_t i = first; i <= last; ++i) {
    const Node* w = &input(graph, n, i);
    while (w->op == Op::kView || w->op == Op::kReshape) w = &input(graph, *w, 0);
    if (w->op != Op::kWeight) return WeightReads::kAfterWait;
  }
  return WeightReads::kEarly;
}

size_t arena_aligned(size_t bytes) {
  return (bytes + graph::kArenaAlignment - 1) / graph::kArenaAlignment * graph::kArenaAlignment;
}

// Scratch a product needs to bring its activations to what its kernel reads: for cuBLASLt, rows of
// the weights' dtype (f32 rows cast to bf16 for bf16 weights, or RMS-normed straight into that
// dtype when the node has an input norm); for the GEMV and the tensor-core tiles, which read f32
// rows and norm them as they read, autocast's bf16 activations widened.
size_t linear_scratch_bytes(const graph::Graph& graph, const Node& n) {
  const Node& x = input(graph, n, 0);
  const DType w = input(graph, n, 1).dtype;
  const auto count = static_cast<size_t>(shape_numel(x.shape));
  if (product_path(graph, n) != ProductPath::kMatmul) {
    return x.dtype == DType::f32 ? 0 : count * sizeof(float);
  }
  return n.normed || (w != DType::f32 && x.dtype == DType::f32) ? count * dtype_size(w) : 0;
}

// A product's activations (input 0) as its kernel reads them (see linear_scratch_bytes).
struct ProductRows {
  size_t x = 0;
  DType x_dtype = DType::f32, w_dtype = DType::f32;
  int64_t count = 0, hidden = 0;
  ProductPath path = ProductPath::kMatmul;
  MatmulOperand operand;  // the rows as the cuBLASLt product reads them
  bool normed = false;    // graph::Node::normed: `norm` is the input norm's weight
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
  const Node& x = input(graph, n, 0);
  const DType w_dtype = input(graph, n, 1).dtype;
  if (x.dtype != DType::f32 && (x.dtype != w_dtype || n.normed)) {
    throw Error(std::string("[cuda ") + op + "] " + std::string(dtype_name(x.dtype)) +
                " activations with " + std::string(dtype_name(w_dtype)) +
                " weights are not supported" + (n.normed ? " under an input norm" : ""));
  }
  const int64_t k = x.shape.back();
  const ProductPath path = product_path(graph, n);
  // Rows normed or cast into scratch start 256-aligned.
  const MatmulOperand operand =
      x.dtype != w_dtype || n.normed
          ? matmul_operand(256, static_cast<uint64_t>(k) * dtype_size(w_dtype), false)
          : matmul_operand(graph, n.inputs[0], false);
  return {static_cast<size_t>(n.inputs[0]),
          x.dtype,
          w_dtype,
          shape_numel(x.shape),
          k,
          path,
          operand,
          n.normed,
          n.normed ? static_cast<size_t>(n.inputs.back()) : 0,
          n.eps};
}

// The output never shares memory with an input (the planner keeps inputs alive through the step
// that reads them), so the residual is read whole before any of the output is written.
Step linear_step(const graph::Graph& graph, const Node& n, size_t out) {
  const Node& w = input(graph, n, 1);
  const DType dt = w.dtype;
  const int64_t m = rows_of(input(graph, n, 0).shape), nn = w.shape[0], k = w.shape[1];
  const size_t wi = static_cast<size_t>(n.inputs[1]);
  const bool has_bias = graph::has_bias(n), has_residual = n.residual;
  const size_t bias = has_bias ? static_cast<size_t>(n.inputs[2]) : 0;
  const size_t residual = has_residual ? static_cast<size_t>(n.inputs.back()) : 0;
  const ProductRows rows = product_rows(graph, n, "linear");
  const WeightReads reads = weight_reads(graph, n, 1, 1);
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
      has_residual ? matmul_operand(graph, n.inputs.back(), false) : MatmulOperand{};
  y_operand.dtype = n.dtype;
  if (n.dtype != DType::f32 && (has_residual || has_bias)) {
    throw Error("[cuda linear] a " + std::string(dtype_name(n.dtype)) +
                " product takes no residual or bias");
  }
  auto product = std::make_shared<const Matmul>(
      m, nn, k, dt, rows.operand, matmul_operand(graph, n.inputs[1], true), y_operand);
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
  const DType dt = input(graph, n, 1).dtype;
  const int64_t m = rows_of(input(graph, n, 0).shape), k = input(graph, n, 0).shape.back();
  const bool has_bias = graph::has_bias(n);
  std::array<size_t, 3> weight{}, bias{};
  std::array<int64_t, 3> cols{}, offset{};
  for (size_t i = 0; i < 3; ++i) {
    weight[i] = static_cast<size_t>(n.inputs[1 + i]);
    bias[i] = has_bias ? static_cast<size_t>(n.inputs[4 + i]) : 0;
    cols[i] = input(graph, n, 1 + i).shape[0];
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
  const WeightReads reads = weight_reads(graph, n, 1, 3);
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
    const uint32_t start = matmul_operand(graph::kArenaAlignment,
                                          static_cast<uint64_t>(offset[i]) * sizeof(float), false)
                               .alignment;
    const uint32_t y_alignment =
        matmul_operand(start, static_cast<uint64_t>(cols[i]) * sizeof(float), false).alignment;
    products[i] = std::make_shared<const Matmul>(m, cols[i], k, dt, rows.operand,
                                                 matmul_operand(graph, n.inputs[1 + i], true),
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

// Where the gated product keeps the gate half on the cuBLASLt path: after the activations' cast.
size_t gate_scratch_offset(const graph::Graph& graph, const Node& n) {
  return arena_aligned(linear_scratch_bytes(graph, n));
}

size_t gated_linear_scratch_bytes(const graph::Graph& graph, const Node& n) {
  if (product_path(graph, n) != ProductPath::kMatmul) return linear_scratch_bytes(graph, n);
  return gate_scratch_offset(graph, n) + static_cast<size_t>(shape_numel(n.shape)) * sizeof(float);
}

// silu(x w_gate^T + b_gate) * (x w_up^T + b_up): one GEMV over both weights for few rows; for many,
// the two cuBLASLt products (the gate into scratch, the up into the output) and the gating pass.
Step gated_linear_step(const graph::Graph& graph, const Node& n, size_t out) {
  const Node& w = input(graph, n, 1);
  const DType dt = w.dtype;
  const int64_t m = rows_of(input(graph, n, 0).shape), nn = w.shape[0], k = w.shape[1];
  const size_t wg = static_cast<size_t>(n.inputs[1]), wu = static_cast<size_t>(n.inputs[2]);
  const bool has_bias = graph::has_bias(n);
  const size_t bg = has_bias ? static_cast<size_t>(n.inputs[3]) : 0,
               bu = has_bias ? static_cast<size_t>(n.inputs[4]) : 0;
  const auto bias = [=](StepContext& c, size_t i) {
    return has_bias ? static_cast<const float*>(c.ptrs[i]) : nullptr;
  };
  const ProductRows rows = product_rows(graph, n, "gated_linear");
  const WeightReads reads = weight_reads(graph, n, 1, 2);
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
                                             matmul_operand(graph, n.inputs[1], true));
  auto up = std::make_shared<const Matmul>(m, nn, k, dt, rows.operand,
                                           matmul_operand(graph, n.inputs[2], true));
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
  if (n.op == Op::kLinear) return linear_scratch_bytes(graph, n);
  if (n.op == Op::kGatedLinear) return gated_linear_scratch_bytes(graph, n);
  if (n.op == Op::kQkvLinear) return linear_scratch_bytes(graph, n);
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
        return [=](StepContext& c) {
          const FreshToken fresh{attention_inputs(c, prepare_args), eps, scaling};
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
