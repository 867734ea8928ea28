// Writes StableHLO ops as MLIR text, in the generic form (`"stablehlo.add"(%1, %2) : (...) ->
// ...`), which every StableHLO version parses the same. Values carry their shape and dtype, so
// each op's types are written from its operands.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tfm/dtype.h"
#include "tfm/tensor.h"

namespace tfm::pjrt {

// Element types as MLIR names them: "f32", "bf16", "i32", "i1" (a comparison's result).
std::string element_type(DType dtype);

struct Value {
  std::string name;  // "%12", "%arg3"
  Shape shape;
  std::string element = "f32";
};

std::string tensor_type(const Shape& shape, const std::string& element);  // "tensor<2x16xf32>"
std::string tensor_type(const Value& value);
std::string i64_array(const std::vector<int64_t>& values);  // "array<i64: 0, 1>"
std::string int_list(const std::vector<int64_t>& values);   // "[0, 1]"

class MlirWriter {
 public:
  // An op of any name: `attributes` is written as given ("{dimension = 1 : i64}" or "").
  Value op(const std::string& name, const std::vector<Value>& operands, const Shape& shape,
           const std::string& element, const std::string& attributes = "");

  // Elementwise, operands of one shape: "add", "multiply", "subtract", "divide", "maximum",
  // "and"; unary: "negate", "exponential", "rsqrt", "sqrt", "cosine", "sine".
  Value binary(const std::string& name, const Value& a, const Value& b);
  Value unary(const std::string& name, const Value& a);
  Value convert(const Value& x, const std::string& element);  // x itself when already so
  Value constant(double value, const std::string& element);   // a scalar
  Value infinity(bool negative);                              // f32 +-inf, a scalar
  // x's dims placed at `dims` of `shape`.
  Value broadcast(const Value& x, const Shape& shape, const std::vector<int64_t>& dims);
  Value splat(double value, const Shape& shape, const std::string& element);
  Value reshape(const Value& x, const Shape& shape);
  Value transpose(const Value& x, const std::vector<int64_t>& permutation);
  Value slice(const Value& x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit);
  Value concatenate(const std::vector<Value>& parts, int64_t dimension);
  // x with `update` written over it from `start` (constant indices: i32, i64 past its range).
  Value update_slice(const Value& x, const Value& update, const std::vector<int64_t>& start);
  Value iota(const Shape& shape, int64_t dimension);  // i32
  // "EQ", "NE", "LT", "LE", "GT", "GE"; a pred (i1) result.
  Value compare(const std::string& direction, const Value& a, const Value& b);
  Value select(const Value& pred, const Value& on_true, const Value& on_false);
  // Reduces `dims` of x with `reducer` ("add", "maximum", "minimum") from `init` (a scalar).
  Value reduce(const Value& x, const Value& init, const std::string& reducer,
               const std::vector<int64_t>& dims);
  Value dot_general(const Value& lhs, const Value& rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                    const std::vector<int64_t>& rhs_contract);

  // `line` written into the body as it is (regions, multi-line ops).
  void raw(const std::string& line) { body_ << line; }
  std::string fresh() { return "%" + std::to_string(next_++); }
  std::string body() const { return body_.str(); }

 private:
  std::ostringstream body_;
  int next_ = 0;
};

}  // namespace tfm::pjrt
