// AutoModelForCausalLM: a DistributedConfig needs its process groups (src/distributed) made before
// the weights are sliced as they load, or, on a device whose backend partitions programs, none:
// the model loads whole and its graphs are partitioned over the devices of this one process.
#include <cstdlib>
#include <string>

#include "distributed/parallel_groups.h"
#include "models/causal_lm.h"
#include "tfm/error.h"
#include "tfm/model.h"

namespace tfm {
namespace {

models::Parallelism parallelism_for(const LoadOptions& options) {
  const DistributedConfig& d = options.distributed;
  if (!partitions_programs(resolve_device(options.device_map), d)) {
    return distributed::parallelism(d);
  }
  if (d.ep_size > 1) {
    throw Error("[distributed] ep_size=" + std::to_string(d.ep_size) + " on device '" +
                options.device_map +
                "', whose compiler partitions one program over its devices: it places the "
                "experts itself; leave ep_size at 1");
  }
  if (std::getenv("WORLD_SIZE") != nullptr) {
    throw Error("[distributed] device '" + options.device_map +
                "' runs tp_size x fsdp_size as one program over its devices from one process: "
                "start it without tfmrun");
  }
  return {};
}

}  // namespace

CausalLM AutoModelForCausalLM::from_config(const std::string& config_json,
                                           const LoadOptions& options, uint64_t seed) {
  return CausalLM(init_causal_lm(config_json, options, seed, parallelism_for(options)));
}

CausalLM AutoModelForCausalLM::from_pretrained(const std::string& id_or_path,
                                               const LoadOptions& options) {
  return CausalLM(load_causal_lm(id_or_path, options, parallelism_for(options)));
}

}  // namespace tfm
