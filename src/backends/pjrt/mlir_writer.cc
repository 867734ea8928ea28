#include "backends/pjrt/mlir_writer.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out;
}

std::string operand_types(const std::vector<Value>& operands) {
  std::string out;
  for (size_t i = 0; i < operands.size(); ++i) out += (i ? ", " : "") + tensor_type(operands[i]);
  return out;
}

bool is_float(const std::string& element) { return element[0] == 'f' || element == "bf16"; }

// A scalar as a dense attribute: floats by their f32 bits (exact, and -inf/nan have no decimal).
std::string scalar_literal(double value, const std::string& element) {
  if (element == "i1") return value != 0 ? "true" : "false";
  if (!is_float(element)) return std::to_string(static_cast<int64_t>(value));
  const float f = static_cast<float>(value);
  if (element != "f32") {
    char text[64];
    std::snprintf(text, sizeof text, "%.9e", static_cast<double>(f));
    if (std::isfinite(f)) return text;
    throw Error("StableHLO writer: non-finite " + element + " constant");
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08X", std::bit_cast<uint32_t>(f));
  return hex;
}

}  // namespace

// MLIR spells every element type tfm has as tfm names it (f32, bf16, f16, i32, i64).
std::string element_type(DType dtype) { return std::string(dtype_name(dtype)); }

std::string tensor_type(const Shape& shape, const std::string& element) {
  std::string out = "tensor<";
  for (int64_t d : shape) out += std::to_string(d) + "x";
  return out + element + ">";
}
std::string tensor_type(const Value& value) { return tensor_type(value.shape, value.element); }
std::string i64_array(const std::vector<int64_t>& values) {
  return values.empty() ? "array<i64>" : "array<i64: " + join(values) + ">";
}
std::string int_list(const std::vector<int64_t>& values) { return "[" + join(values) + "]"; }

Value MlirWriter::op(const std::string& name, const std::vector<Value>& operands,
                     const Shape& shape, const std::string& element,
                     const std::string& attributes) {
  Value result{fresh(), shape, element};
  std::string args;
  for (size_t i = 0; i < operands.size(); ++i) args += (i ? ", " : "") + operands[i].name;
  body_ << "    " << result.name << " = \"stablehlo." << name << "\"(" << args << ")"
        << (attributes.empty() ? "" : " " + attributes) << " : (" << operand_types(operands)
        << ") -> " << tensor_type(result) << "\n";
  return result;
}

Value MlirWriter::binary(const std::string& name, const Value& a, const Value& b) {
  TFM_CHECK(a.shape == b.shape && a.element == b.element, "StableHLO " + name + " operands");
  return op(name, {a, b}, a.shape, a.element);
}

Value MlirWriter::unary(const std::string& name, const Value& a) {
  return op(name, {a}, a.shape, a.element);
}

Value MlirWriter::convert(const Value& x, const std::string& element) {
  if (x.element == element) return x;
  return op("convert", {x}, x.shape, element);
}

Value MlirWriter::constant(double value, const std::string& element) {
  Value result{fresh(), {}, element};
  body_ << "    " << result.name << " = \"stablehlo.constant\"() {value = dense<"
        << scalar_literal(value, element) << "> : " << tensor_type(result) << "} : () -> "
        << tensor_type(result) << "\n";
  return result;
}

Value MlirWriter::infinity(bool negative) {
  const double inf = std::numeric_limits<double>::infinity();
  return constant(negative ? -inf : inf, "f32");
}

Value MlirWriter::broadcast(const Value& x, const Shape& shape, const std::vector<int64_t>& dims) {
  TFM_CHECK(dims.size() == x.shape.size(), "StableHLO broadcast dims");
  if (x.shape == shape) return x;
  return op("broadcast_in_dim", {x}, shape, x.element,
            "{broadcast_dimensions = " + i64_array(dims) + "}");
}

Value MlirWriter::splat(double value, const Shape& shape, const std::string& element) {
  return broadcast(constant(value, element), shape, {});
}

Value MlirWriter::reshape(const Value& x, const Shape& shape) {
  if (x.shape == shape) return x;
  TFM_CHECK(shape_numel(x.shape) == shape_numel(shape), "StableHLO reshape keeps the elements");
  return op("reshape", {x}, shape, x.element);
}

Value MlirWriter::transpose(const Value& x, const std::vector<int64_t>& permutation) {
  Shape shape;
  for (int64_t p : permutation) shape.push_back(x.shape[static_cast<size_t>(p)]);
  return op("transpose", {x}, shape, x.element, "{permutation = " + i64_array(permutation) + "}");
}

Value MlirWriter::slice(const Value& x, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& limit) {
  Shape shape;
  for (size_t i = 0; i < start.size(); ++i) shape.push_back(limit[i] - start[i]);
  if (shape == x.shape) return x;
  return op("slice", {x}, shape, x.element,
            "{start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                ", strides = " + i64_array(std::vector<int64_t>(start.size(), 1)) + "}");
}

Value MlirWriter::update_slice(const Value& x, const Value& update,
                               const std::vector<int64_t>& start) {
  TFM_CHECK(start.size() == x.shape.size() && update.element == x.element,
            "StableHLO dynamic_update_slice operands");
  bool wide = false;
  for (int64_t s : start) wide = wide || s > std::numeric_limits<int32_t>::max();
  std::vector<Value> operands{x, update};
  for (int64_t s : start)
    operands.push_back(constant(static_cast<double>(s), wide ? "i64" : "i32"));
  return op("dynamic_update_slice", operands, x.shape, x.element);
}

Value MlirWriter::concatenate(const std::vector<Value>& parts, int64_t dimension) {
  Shape shape = parts[0].shape;
  shape[static_cast<size_t>(dimension)] = 0;
  for (const Value& p : parts) shape[static_cast<size_t>(dimension)] += p.shape[dimension];
  return op("concatenate", parts, shape, parts[0].element,
            "{dimension = " + std::to_string(dimension) + " : i64}");
}

Value MlirWriter::iota(const Shape& shape, int64_t dimension) {
  return op("iota", {}, shape, "i32", "{iota_dimension = " + std::to_string(dimension) + " : i64}");
}

Value MlirWriter::compare(const std::string& direction, const Value& a, const Value& b) {
  TFM_CHECK(a.shape == b.shape && a.element == b.element, "StableHLO compare operands");
  const std::string type = is_float(a.element) ? "FLOAT" : "SIGNED";
  return op("compare", {a, b}, a.shape, "i1",
            "{comparison_direction = #stablehlo<comparison_direction " + direction +
                ">, compare_type = #stablehlo<comparison_type " + type + ">}");
}

Value MlirWriter::select(const Value& pred, const Value& on_true, const Value& on_false) {
  return op("select", {pred, on_true, on_false}, on_true.shape, on_true.element);
}

Value MlirWriter::reduce(const Value& x, const Value& init, const std::string& reducer,
                         const std::vector<int64_t>& dims) {
  Shape shape;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == static_cast<int64_t>(i);
    if (!reduced) shape.push_back(x.shape[i]);
  }
  const std::string scalar = tensor_type({}, x.element);
  Value result{fresh(), shape, x.element};
  const std::string a = fresh(), b = fresh(), r = fresh();
  body_ << "    " << result.name << " = \"stablehlo.reduce\"(" << x.name << ", " << init.name
        << ") ({\n    ^bb0(" << a << ": " << scalar << ", " << b << ": " << scalar << "):\n      "
        << r << " = \"stablehlo." << reducer << "\"(" << a << ", " << b << ") : (" << scalar << ", "
        << scalar << ") -> " << scalar << "\n      \"stablehlo.return\"(" << r << ") : (" << scalar
        << ") -> ()\n    }) {dimensions = " << i64_array(dims) << "} : (" << tensor_type(x) << ", "
        << scalar << ") -> " << tensor_type(result) << "\n";
  return result;
}

Value MlirWriter::dot_general(const Value& lhs, const Value& rhs,
                              const std::vector<int64_t>& lhs_batch,
                              const std::vector<int64_t>& rhs_batch,
                              const std::vector<int64_t>& lhs_contract,
                              const std::vector<int64_t>& rhs_contract) {
  auto contains = [](const std::vector<int64_t>& v, size_t i) {
    for (int64_t d : v) {
      if (d == static_cast<int64_t>(i)) return true;
    }
    return false;
  };
  // The result: batch dims, then lhs's free dims, then rhs's.
  Shape shape;
  for (int64_t d : lhs_batch) shape.push_back(lhs.shape[static_cast<size_t>(d)]);
  for (size_t i = 0; i < lhs.shape.size(); ++i) {
    if (!contains(lhs_batch, i) && !contains(lhs_contract, i)) shape.push_back(lhs.shape[i]);
  }
  for (size_t i = 0; i < rhs.shape.size(); ++i) {
    if (!contains(rhs_batch, i) && !contains(rhs_contract, i)) shape.push_back(rhs.shape[i]);
  }
  return op("dot_general", {lhs, rhs}, shape, lhs.element,
            "{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " +
                int_list(lhs_batch) + ", rhs_batching_dimensions = " + int_list(rhs_batch) +
                ", lhs_contracting_dimensions = " + int_list(lhs_contract) +
                ", rhs_contracting_dimensions = " + int_list(rhs_contract) + ">}");
}

}  // namespace tfm::pjrt
