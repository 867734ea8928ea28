// The pieces of the _tfm extension module (python/tfm is the Python face over it): each file binds
// one part of tfm's C++ API; arrays.h moves tensors to and from NumPy.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace tfm::python {

// tfm::Error as RuntimeError, and the classes tfm raises where transformers raises others.
void bind_errors(pybind11::module_& m);
void bind_tokenizer(pybind11::module_& m);
void bind_model(pybind11::module_& m);
void bind_trainer(pybind11::module_& m);

// Runs `call` translating tfm::Error into `type` (ValueError for a bad argument, FileNotFoundError
// for a model that is nowhere), as transformers raises them.
template <typename Call>
auto raising(PyObject* type, Call call) {
  try {
    return call();
  } catch (const std::exception& e) {
    PyErr_SetString(type, e.what());
    throw pybind11::error_already_set();
  }
}

// FileNotFoundError, with the Hugging Face cache's places looked at, for an `id_or_path` that is
// neither a path nor a model in the cache.
void check_findable(const std::string& id_or_path);

}  // namespace tfm::python
