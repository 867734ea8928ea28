// The _tfm extension module: tfm's C++ API as python/tfm's __init__.py uses it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>

#include "io/hub.h"
#include "python/bindings.h"
#include "tfm/device.h"
#include "tfm/error.h"
#include "tfm/log.h"

namespace py = pybind11;

namespace tfm::python {

void bind_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.def(
      "set_verbosity",
      [](const std::string& level) {
        if (level == "info") {
          set_log_level(LogLevel::kInfo);
        } else if (level == "warning") {
          set_log_level(LogLevel::kWarn);
        } else {
          throw py::value_error("verbosity '" + level + "' is not 'info' or 'warning'");
        }
      },
      py::arg("level"));
  m.def(
      "resolve_pretrained",
      [](const std::string& id_or_path) {
        return raising(PyExc_FileNotFoundError,
                       [&] { return resolve_pretrained(id_or_path).string(); });
      },
      py::arg("id_or_path"));
  m.def(
      "use_device_plugin",
      [](const std::string& kind, const std::string& path, int device_count,
         std::optional<std::string> compile_cache) {
        use_device_plugin(kind, path,
                          {.device_count = device_count, .compile_cache = compile_cache});
      },
      py::arg("kind"), py::arg("path"), py::arg("device_count") = 0,
      py::arg("compile_cache") = py::none());
}

void check_findable(const std::string& id_or_path) {
  if (std::filesystem::exists(id_or_path)) return;
  raising(PyExc_FileNotFoundError, [&] { resolve_pretrained(id_or_path); });
}

}  // namespace tfm::python

PYBIND11_MODULE(_tfm, m) {
  m.doc() = "tfm: Hugging Face causal language models in C++, compiled per input shape";
  tfm::python::bind_errors(m);
  tfm::python::bind_tokenizer(m);
  tfm::python::bind_model(m);
  tfm::python::bind_trainer(m);
}
