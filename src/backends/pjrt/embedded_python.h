// CPython inside tfm, for a PJRT plugin that calls back into Python: Neuron's plugin runs
// neuronx-cc through its libneuronxla package, as it does under JAX. Loaded only for such a
// device, from the system's shared libpython (Debian's libpython3.X package), never linked.
#pragma once

#include <string>

namespace tfm::pjrt {

// Loads libpython`version`.so.1.0 (any libpython3.N.so.1.0 present when `version` is "") with
// its symbols global, so that a plugin opened after it binds its references to Python there;
// starts the interpreter once (no signal handlers: tfm keeps its own), adds `site_packages` as a
// site folder (its .pth files read), imports `module`, and releases the interpreter's lock for
// the plugin's threads to take. Throws naming the library or the module (Python's traceback goes
// to stderr) when either fails. Later calls with the interpreter running only import `module`.
void start_embedded_python(const std::string& version, const std::string& site_packages,
                           const std::string& module);

}  // namespace tfm::pjrt
