#include "python/arrays.h"

#include <vector>

namespace py = pybind11;

namespace tfm::python {

Tensor id_matrix(const py::handle& values, const char* what) {
  py::array_t<int64_t, py::array::c_style | py::array::forcecast> a;
  try {
    a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(values);
  } catch (const py::error_already_set&) {
    a = {};
  }
  if (!a || a.ndim() != 2) {
    throw py::value_error(std::string(what) +
                          " must be a 2-D array of token ids [batch, sequence length]");
  }
  const int64_t rows = a.shape(0), cols = a.shape(1);
  std::vector<int64_t> ids(a.data(), a.data() + rows * cols);
  return Tensor::from_vector(ids, {rows, cols});
}

std::optional<Tensor> optional_id_matrix(const py::handle& values, const char* what) {
  if (values.is_none()) return std::nullopt;
  return id_matrix(values, what);
}

py::array to_numpy(const Tensor& t) {
  const Tensor host = t.device() == kCpu && t.is_contiguous() ? t : t.to(kCpu).clone();
  std::vector<py::ssize_t> shape(host.shape().begin(), host.shape().end());
  // The capsule owns a copy of the tensor handle: its storage lives as long as the array.
  auto* keep = new Tensor(host);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  switch (host.dtype()) {
    case DType::f32:
      return py::array_t<float>(shape, host.data_as<float>(), owner);
    case DType::i32:
      return py::array_t<int32_t>(shape, host.data_as<int32_t>(), owner);
    case DType::i64:
      return py::array_t<int64_t>(shape, host.data_as<int64_t>(), owner);
    default:
      return to_numpy(host.to(DType::f32));
  }
}

}  // namespace tfm::python
