#include "backends/pjrt/neuron_install.h"

#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <regex>

#include "pjrt_c_api.h"
#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPlugin = "libneuronpjrt.so";
constexpr const char* kPackage = "libneuronxla";

std::vector<std::string> expand(const std::string& pattern) {
  glob_t found{};
  std::vector<std::string> paths;
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  }
  ::globfree(&found);
  return paths;
}

// The Python packages folders searched, as glob patterns, in the order of the header.
std::vector<std::string> package_folder_patterns(const GetEnv& getenv) {
  std::vector<std::string> patterns;
  if (const char* venv = getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    patterns.push_back(std::string(venv) + "/lib/python3*/site-packages");
  }
  if (const char* home = getenv("HOME"); home != nullptr && *home != '\0') {
    patterns.push_back(std::string(home) + "/.local/lib/python3*/site-packages");
  }
  for (const char* p :
       {"/opt/aws_neuronx_venv_*/lib/python3*/site-packages",
        "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages"}) {
    patterns.emplace_back(p);
  }
  return patterns;
}

// The first package folder (of `patterns`, each glob's matches newest Python first) holding
// libneuronxla/`file`.
std::string first_holding(const std::vector<std::string>& patterns, const std::string& file) {
  for (const std::string& pattern : patterns) {
    std::vector<std::string> folders = expand(pattern);
    std::sort(folders.rbegin(), folders.rend());
    for (const std::string& folder : folders) {
      if (fs::exists(fs::path(folder) / kPackage / file)) return folder;
    }
  }
  return "";
}

std::string python_version_of(const std::string& site_packages) {
  static const std::regex version(R"(/python(3\.[0-9]+)/)");
  std::smatch m;
  return std::regex_search(site_packages, m, version) ? m[1].str() : "";
}

std::string plugin_named_by(const char* value) {
  const fs::path path(value);
  if (fs::is_directory(path)) {
    if (fs::exists(path / kPlugin)) return (path / kPlugin).string();
    throw Error("NEURON_LIBRARY_PATH names the folder '" + path.string() + "', which holds no " +
                kPlugin);
  }
  if (!fs::exists(path)) {
    throw Error("NEURON_LIBRARY_PATH names '" + path.string() + "', which does not exist");
  }
  return path.string();
}

}  // namespace

NeuronInstall find_neuron_install(const std::string& plugin_path, const GetEnv& getenv) {
  const std::vector<std::string> patterns = package_folder_patterns(getenv);
  NeuronInstall install;
  if (!plugin_path.empty()) {
    if (!fs::exists(plugin_path)) {
      throw Error("--pjrt-plugin names '" + plugin_path + "', which does not exist");
    }
    install.plugin = plugin_path;
  } else if (const char* named = getenv("NEURON_LIBRARY_PATH"); named != nullptr && *named) {
    install.plugin = plugin_named_by(named);
  } else {
    const std::string folder = first_holding(patterns, kPlugin);
    if (folder.empty()) {
      std::string looked;
      for (const std::string& p : patterns) looked += "\n  " + p + "/" + kPackage + "/" + kPlugin;
      throw Error(std::string("device neuron: AWS Neuron's PJRT plugin (") + kPlugin +
                  ") was not found. NEURON_LIBRARY_PATH is unset, and none of these exist:" +
                  looked +
                  "\nInstall the libneuronxla package (pip install libneuronxla, from AWS's "
                  "Neuron repository) into one of them, or name the plugin with "
                  "NEURON_LIBRARY_PATH or --pjrt-plugin.");
    }
    install.plugin = (fs::path(folder) / kPackage / kPlugin).string();
  }
  // The package beside the plugin when it lies in one, else the first found.
  const fs::path beside = fs::path(install.plugin).parent_path();
  install.site_packages = beside.filename() == kPackage && fs::exists(beside / "__init__.py")
                              ? beside.parent_path().string()
                              : first_holding(patterns, "__init__.py");
  install.python_version = python_version_of(install.site_packages + "/");
  return install;
}

std::vector<std::pair<std::string, std::string>> neuron_environment(const GetEnv& getenv) {
  std::vector<std::pair<std::string, std::string>> set;
  const auto unset = [&](const char* name) {
    const char* v = getenv(name);
    return v == nullptr || *v == '\0';
  };
  if (unset("NEURON_INTERNAL_PJRT_C_API_VERSION")) {
    set.emplace_back("NEURON_INTERNAL_PJRT_C_API_VERSION",
                     std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR));
  }
  if (!unset("LOCAL_RANK") && unset("NEURON_RT_VISIBLE_CORES")) {
    set.emplace_back("NEURON_RT_VISIBLE_CORES", getenv("LOCAL_RANK"));
  }
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (addr != nullptr && *addr && port != nullptr && unset("NEURON_RT_ROOT_COMM_ID")) {
    int p = 0;
    const char* last = port + std::strlen(port);
    auto [end, ec] = std::from_chars(port, last, p);
    if (ec != std::errc() || end != last || p < 1 || p > 65534) {
      throw Error("MASTER_PORT '" + std::string(port) + "' is not a port number");
    }
    set.emplace_back("NEURON_RT_ROOT_COMM_ID", std::string(addr) + ":" + std::to_string(p + 1));
  }
  return set;
}

}  // namespace tfm::pjrt
