#include "backends/cpu/product_steps.h"

#include <algorithm>
#include <array>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/step_operands.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::cpu {
namespace {

using graph::Node;
using graph::Op;

// A product's rows as it reads them: x, or rms_norm(x, norm, eps) into `normed` when the node has
// an input norm (graph::Node::normed; x is f32 then).
const float* product_rows(const float* x, const float* norm, float eps, int64_t m, int64_t k,
                          Scratch& normed) {
  if (norm == nullptr) return x;
  normed.resize(static_cast<size_t>(m * k));
  rms_norm(x, norm, m, k, eps, normed.data());
  return normed.data();
}

}  // namespace

std::function<void()> make_product_step(const graph::Graph& graph, graph::ValueId id,
                                        std::vector<void*>& ptrs) {
  const Node& n = node_of(graph, id);
  const auto node = [&graph](graph::ValueId v) -> const Node& { return node_of(graph, v); };
  const StepBuffers buf(ptrs, id);
  switch (n.op) {
    case Op::kLinear: {
      const graph::LinearArgs a = graph::linear_args(n);
      const Node& w = node(a.w);
      const DType dt = w.dtype;
      const int64_t m = rows_of(node(a.x).shape), nn = w.shape[0], k = w.shape[1];
      const DType x_dtype = node(a.x).dtype;
      // bf16 x (autocast) with bf16 weights goes to the bf16 products as it is; any other x is
      // read as f32 (`x_f32`, widened once by the step).
      const bool bf16_rows = x_dtype == DType::bf16 && dt == DType::bf16 && bf16_rows_path(m);
      const auto multiply = [=](const float* x_f32, const void* w_rows, int64_t width,
                                const float* bias, float* dst) {
        if (bf16_rows) {
          linear_bf16_rows(static_cast<const uint16_t*>(buf.ptr(a.x)),
                           static_cast<const uint16_t*>(w_rows), bias, m, width, k, dst);
        } else {
          linear(x_f32, w_rows, dt, bias, m, width, k, dst);
        }
      };
      const auto x_f32 = [=](Scratch& widened) {
        return bf16_rows ? nullptr : f32_operand(buf.ptr(a.x), x_dtype, m * k, widened);
      };
      if (n.dtype == DType::f32) {
        return [=] {
          Scratch widened;
          multiply(x_f32(widened), buf.ptr(a.w), nn, a.bias >= 0 ? buf.f(a.bias) : nullptr,
                   buf.out_f32());
          if (a.residual >= 0) add_into(buf.out_f32(), buf.f(a.residual), m * nn);
        };
      }
      // A narrowed output (graph::Builder::autocast_linear: no bias, no residual) of bf16 rows is
      // rounded by the products themselves; of others it is computed a block of columns at a time,
      // so each weight row is read (and widened) once and no f32 copy of the whole output is held;
      // each block is narrowed into its place in the rows.
      if (a.bias >= 0 || a.residual >= 0) {
        throw Error("[linear] a " + std::string(dtype_name(n.dtype)) +
                    " product takes no residual or bias");
      }
      const DType out_dtype = n.dtype;
      if (bf16_rows && out_dtype == DType::bf16) {
        return [=] {
          linear_bf16_rows_rounded(static_cast<const uint16_t*>(buf.ptr(a.x)),
                                   static_cast<const uint16_t*>(buf.ptr(a.w)), m, nn, k,
                                   static_cast<uint16_t*>(buf.out()));
        };
      }
      const size_t w_row_bytes = static_cast<size_t>(k) * dtype_size(dt),
                   out_size = dtype_size(out_dtype);
      constexpr int64_t kBlockFloats = int64_t{1} << 22;
      const int64_t cols =
          std::clamp<int64_t>(kBlockFloats / std::max<int64_t>(m, 1), 1, std::max<int64_t>(nn, 1));
      return [=] {
        Scratch widened, block(static_cast<size_t>(m * cols));
        const float* x = x_f32(widened);
        for (int64_t first = 0; first < nn; first += cols) {
          const int64_t width = std::min(cols, nn - first);
          multiply(x, static_cast<const char*>(buf.ptr(a.w)) + first * w_row_bytes, width, nullptr,
                   block.data());
          auto* dst = static_cast<char*>(buf.out()) + static_cast<size_t>(first) * out_size;
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
      const graph::GatedLinearArgs a = graph::gated_linear_args(n);
      const DType dt = node(a.w_gate).dtype, x_dtype = node(a.x).dtype;
      const int64_t m = rows_of(node(a.x).shape), nn = node(a.w_gate).shape[0],
                    k = node(a.w_gate).shape[1];
      const float eps = n.eps;
      // silu(gate) * up, as the fused elementwise chain of the unfused graph computes it.
      const graph::ElementwiseProgram gating{{{graph::EwCode::kLoad, 0},
                                              {graph::EwCode::kSilu},
                                              {graph::EwCode::kLoad, 1},
                                              {graph::EwCode::kMul}}};
      return [=] {
        Scratch widened, normed_rows, gate(static_cast<size_t>(m * nn));
        const float* x =
            product_rows(f32_operand(buf.ptr(a.x), x_dtype, m * k, widened),
                         a.norm >= 0 ? buf.f(a.norm) : nullptr, eps, m, k, normed_rows);
        const SharedXProduct products[2] = {
            {buf.ptr(a.w_gate), nn, a.bias_gate >= 0 ? buf.f(a.bias_gate) : nullptr, gate.data()},
            {buf.ptr(a.w_up), nn, a.bias_up >= 0 ? buf.f(a.bias_up) : nullptr, buf.out_f32()}};
        linear_shared_x(x, products, 2, dt, m, k);
        const Floats operands[2] = {{gate.data(), DType::f32}, {buf.out(), DType::f32}};
        elementwise(gating, operands, m * nn, buf.out(), DType::f32);
      };
    }
    case Op::kQkvLinear: {
      const graph::QkvLinearArgs a = graph::qkv_linear_args(n);
      const DType dt = node(a.w[0]).dtype, x_dtype = node(a.x).dtype;
      const int64_t m = rows_of(node(a.x).shape), k = node(a.x).shape.back();
      const std::array<int64_t, 3> nn{node(a.w[0]).shape[0], node(a.w[1]).shape[0],
                                      node(a.w[2]).shape[0]};
      const float eps = n.eps;
      return [=] {
        Scratch widened, normed_rows;
        const float* x =
            product_rows(f32_operand(buf.ptr(a.x), x_dtype, m * k, widened),
                         a.norm >= 0 ? buf.f(a.norm) : nullptr, eps, m, k, normed_rows);
        SharedXProduct products[3];
        float* y = buf.out_f32();
        for (size_t i = 0; i < 3; ++i) {
          products[i] = {buf.ptr(a.w[i]), nn[i], a.bias[i] >= 0 ? buf.f(a.bias[i]) : nullptr, y};
          y += m * nn[i];
        }
        linear_shared_x(x, products, 3, dt, m, k);
      };
    }
    case Op::kLinearGradInput: {
      // In place, the product adds into `sum` (graph::fold_gradient_sums).
      const graph::LinearGradInputArgs a = graph::linear_grad_input_args(n);
      const Node& w = node(a.w);
      const DType dt = w.dtype;
      const int64_t m = rows_of(node(a.dy).shape), nn = w.shape[0], k = w.shape[1];
      const DType dy_dtype = node(a.dy).dtype;
      const DType dx_dtype = n.dtype;
      const bool bf16_products = dt == DType::bf16 && dy_dtype == DType::bf16 && bf16_rows_path(m);
      return [=] {
        if (a.sum >= 0) buf.out() = buf.ptr(a.sum);
        Scratch widened, narrowed;
        // A bf16 dx (ops::linear_backward) is computed whole in f32, then rounded once; it is
        // written over the sum, so only an f32 dx adds into it.
        if (dx_dtype != DType::f32) narrowed.resize(static_cast<size_t>(m * k));
        float* dx = narrowed.empty() ? buf.out_f32() : narrowed.data();
        const bool accumulate = a.sum >= 0 && narrowed.empty();
        if (bf16_products) {
          linear_grad_input_bf16(static_cast<const uint16_t*>(buf.ptr(a.dy)),
                                 static_cast<const uint16_t*>(buf.ptr(a.w)), m, nn, k, dx,
                                 accumulate);
        } else {
          const float* dy = f32_operand(buf.ptr(a.dy), dy_dtype, m * nn, widened);
          linear_grad_input(dy, buf.ptr(a.w), dt, m, nn, k, dx, accumulate);
        }
        if (!narrowed.empty()) cast(dx, DType::f32, buf.out(), dx_dtype, narrowed.size());
      };
    }
    case Op::kLinearGradWeight: {
      // In place, the product adds into `acc` (graph::fold_accumulations).
      const graph::LinearGradWeightArgs a = graph::linear_grad_weight_args(n);
      const int64_t m = rows_of(node(a.dy).shape), nn = n.shape[0], k = n.shape[1];
      const DType dy_dtype = node(a.dy).dtype, x_dtype = node(a.x).dtype;
      const bool bf16_products =
          dy_dtype == DType::bf16 && x_dtype == DType::bf16 && bf16_rows_path(m);
      return [=] {
        if (a.acc >= 0) buf.out() = buf.ptr(a.acc);
        if (bf16_products) {
          linear_grad_weight_bf16(static_cast<const uint16_t*>(buf.ptr(a.dy)),
                                  static_cast<const uint16_t*>(buf.ptr(a.x)), m, nn, k,
                                  buf.out_f32(), a.acc >= 0);
          return;
        }
        Scratch dy_widened, x_widened;
        const float* dy = f32_operand(buf.ptr(a.dy), dy_dtype, m * nn, dy_widened);
        const float* x = f32_operand(buf.ptr(a.x), x_dtype, m * k, x_widened);
        linear_grad_weight(dy, x, m, nn, k, buf.out_f32(), a.acc >= 0);
      };
    }
    default:
      break;
  }
  throw Error(std::string("[cpu] make_product_step was given op ") + graph::op_name(n.op));
}

}  // namespace tfm::cpu
