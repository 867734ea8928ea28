// Small host-side helpers for building the i32 inputs of a forward step.
#pragma once

#include <string>

#include "tfm/tensor.h"

namespace tfm {

// input_ids or a mask given as i32 or i64 [batch, seq], as i32; names `what` in errors.
Tensor ids_as_i32(const Tensor& ids, const std::string& what);
Tensor filled_i32(const Shape& shape, int32_t value);
// [rows, count] holding start, start+1, ... in every row.
Tensor arange_rows(int64_t rows, int64_t start, int64_t count);

}  // namespace tfm
