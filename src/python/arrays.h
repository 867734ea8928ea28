// tfm tensors to and from NumPy arrays: integer ids in (any integer dtype, copied to i64 or i32 as
// tfm takes them), results out without a copy (the array keeps the tensor's storage alive).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "tfm/tensor.h"

namespace tfm::python {

// A 2-D integer array (or nested lists) as an i64 tensor [rows, cols]; `what` names the argument
// in the ValueError for anything else.
Tensor id_matrix(const pybind11::handle& values, const char* what);
// The same, or nullopt for None.
std::optional<Tensor> optional_id_matrix(const pybind11::handle& values, const char* what);
// The tensor's values as an array of its shape (f32, i32 or i64), sharing its storage.
pybind11::array to_numpy(const Tensor& t);

}  // namespace tfm::python
