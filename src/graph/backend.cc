#include "graph/backend.h"

#include <map>

#include "tfm/error.h"

namespace tfm::graph {
namespace {

std::map<std::string, Backend*>& backends() {
  static std::map<std::string, Backend*> all;
  return all;
}

}  // namespace

void register_backend(const std::string& kind, Backend* backend) { backends()[kind] = backend; }

Backend& backend_for(const Device& device) {
  const auto it = backends().find(device.type);
  if (it == backends().end()) {
    throw Error("no backend for device " + device.str() + " in this build of tfm");
  }
  return *it->second;
}

}  // namespace tfm::graph
