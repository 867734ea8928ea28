#include "models/step_inputs.h"

#include <algorithm>
#include <limits>

#include "tfm/error.h"

namespace tfm {

Tensor ids_as_i32(const Tensor& ids, const std::string& what) {
  if (ids.ndim() != 2 || ids.dim(0) == 0 || ids.dim(1) == 0) {
    throw Error(what + " must be [batch, seq] with both > 0, got " + shape_str(ids.shape()));
  }
  if (ids.dtype() == DType::i32) return ids.is_contiguous() ? ids.to(kCpu) : ids.to(kCpu).clone();
  if (ids.dtype() != DType::i64) {
    throw Error(what + " must be i32 or i64, got " + std::string(dtype_name(ids.dtype())));
  }
  const Tensor host = ids.to(kCpu);
  const int64_t* src = host.data_as<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (src[i] < std::numeric_limits<int32_t>::min() ||
        src[i] > std::numeric_limits<int32_t>::max()) {
      throw Error(what + " value " + std::to_string(src[i]) + " does not fit in 32 bits");
    }
  }
  return host.to(DType::i32);
}

Tensor filled_i32(const Shape& shape, int32_t value) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::fill_n(t.data_as<int32_t>(), t.numel(), value);
  return t;
}

Tensor arange_rows(int64_t rows, int64_t start, int64_t count) {
  Tensor t = Tensor::empty({rows, count}, DType::i32);
  int32_t* p = t.data_as<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < count; ++i) p[r * count + i] = static_cast<int32_t>(start + i);
  }
  return t;
}

}  // namespace tfm
