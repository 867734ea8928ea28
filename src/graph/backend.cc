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

std::vector<Tensor> state_inputs(const Graph& graph, const std::vector<ValueId>& ids,
                                 const std::vector<Tensor>& inputs) {
  std::vector<Tensor> state;
  for (size_t i = 0; i < ids.size() && i < inputs.size(); ++i) {
    if (graph.nodes[static_cast<size_t>(ids[i])].is_state) state.push_back(inputs[i]);
  }
  return state;
}

void register_backend(const std::string& kind, Backend* backend) { backends()[kind] = backend; }

Backend& backend_for(const Device& device) {
  const auto it = backends().find(device.type);
  if (it == backends().end()) {
    throw Error("no backend for device " + device.str() + " in this build of tfm");
  }
  return *it->second;
}

}  // namespace tfm::graph
