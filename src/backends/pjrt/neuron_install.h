// Where AWS Neuron's PJRT plugin is installed and what it reads from the environment: what
// `--device neuron` needs before the plugin is opened (docs/ARCHITECTURE.md, "Neuron").
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tfm::pjrt {

struct NeuronInstall {
  std::string plugin;  // libneuronpjrt.so
  // The Python packages folder holding libneuronxla (whose Python code the plugin calls to run
  // neuronx-cc), and that Python's version ("3.10"; "" where its path does not say); "" when no
  // libneuronxla was found.
  std::string site_packages;
  std::string python_version;
};

using GetEnv = std::function<const char*(const char* name)>;

// `plugin_path` where given (--pjrt-plugin); else NEURON_LIBRARY_PATH (the plugin's file, or a
// folder holding libneuronpjrt.so); else libneuronxla/libneuronpjrt.so in the Python
// environments searched, in order: $VIRTUAL_ENV, ~/.local, /opt/aws_neuronx_venv_* (AWS's Deep
// Learning AMIs), /usr/local/lib and /usr/lib. Throws, naming every place looked at, when none
// holds it.
NeuronInstall find_neuron_install(const std::string& plugin_path, const GetEnv& getenv);

// What the plugin reads and tfm sets where the user has not: NEURON_INTERNAL_PJRT_C_API_VERSION
// (the C API version of the header tfm was built with), and under a launcher (tfmrun, torchrun)
// NEURON_RT_VISIBLE_CORES (the process's LOCAL_RANK: one NeuronCore a process) and
// NEURON_RT_ROOT_COMM_ID (MASTER_ADDR, port MASTER_PORT + 1: the Neuron runtime's own
// rendezvous beside tfm's store).
std::vector<std::pair<std::string, std::string>> neuron_environment(const GetEnv& getenv);

}  // namespace tfm::pjrt
