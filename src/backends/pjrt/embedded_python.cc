#include "backends/pjrt/embedded_python.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

// The few entry points of CPython's stable C API used here, looked up in the loaded library.
struct PythonApi {
  void (*initialize)(int install_signal_handlers) = nullptr;
  int (*is_initialized)() = nullptr;
  int (*run_string)(const char* code) = nullptr;
  int (*gil_ensure)() = nullptr;  // PyGILState_STATE is an enum
  void (*gil_release)(int state) = nullptr;
  void* (*save_thread)() = nullptr;
};

template <typename F>
void bind(void* library, const char* name, const std::string& path, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  if (f == nullptr) throw Error("'" + path + "' has no " + name + ": not a CPython library");
}

void* open_libpython(const std::string& version, std::string& path) {
  std::vector<std::string> names;
  if (!version.empty()) {
    names.push_back("libpython" + version + ".so.1.0");
  } else {
    for (int minor = 20; minor >= 8; --minor) {
      names.push_back("libpython3." + std::to_string(minor) + ".so.1.0");
    }
  }
  std::string errors;
  for (const std::string& name : names) {
    // RTLD_GLOBAL: the plugin, opened after, finds Python's symbols in the process.
    if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      path = name;
      return library;
    }
    errors += std::string("\n  ") + dlerror();
  }
  throw Error("device neuron: Neuron's plugin runs neuronx-cc through Python, and no " +
              (version.empty() ? std::string("libpython3.N.so.1.0") : names.front()) +
              " could be loaded (install Debian's libpython" +
              (version.empty() ? std::string("3.N") : version) +
              " package, the Python libneuronxla was installed for):" + errors);
}

// The text as a Python expression, whatever characters it holds.
std::string python_string(const std::string& text) {
  static const char* const kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : text) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return "bytes.fromhex('" + hex + "').decode()";
}

}  // namespace

void start_embedded_python(const std::string& version, const std::string& site_packages,
                           const std::string& module) {
  static std::mutex mutex;
  static PythonApi api;
  std::lock_guard<std::mutex> lock(mutex);
  if (api.initialize == nullptr) {
    std::string path;
    void* library = open_libpython(version, path);
    PythonApi loaded;
    bind(library, "Py_InitializeEx", path, loaded.initialize);
    bind(library, "Py_IsInitialized", path, loaded.is_initialized);
    bind(library, "PyRun_SimpleString", path, loaded.run_string);
    bind(library, "PyGILState_Ensure", path, loaded.gil_ensure);
    bind(library, "PyGILState_Release", path, loaded.gil_release);
    bind(library, "PyEval_SaveThread", path, loaded.save_thread);
    if (!loaded.is_initialized()) {
      loaded.initialize(0);
      loaded.save_thread();  // the lock goes to whichever thread calls into Python next
    }
    api = loaded;
  }
  const int state = api.gil_ensure();
  const std::string code = "import site\nsite.addsitedir(" + python_string(site_packages) +
                           ")\nimport " + module + "\n";
  const int failed = api.run_string(code.c_str());
  api.gil_release(state);
  if (failed != 0) {
    throw Error("device neuron: importing the Python package '" + module + "' from '" +
                site_packages + "' failed (Python's traceback above)");
  }
}

}  // namespace tfm::pjrt
