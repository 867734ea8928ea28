// AutoModelForCausalLM: a DistributedConfig needs its process groups (src/distributed) made before
// the weights are sliced as they load.
#include "distributed/parallel_groups.h"
#include "models/causal_lm.h"
#include "tfm/model.h"

namespace tfm {

CausalLM AutoModelForCausalLM::from_config(const std::string& config_json,
                                           const LoadOptions& options, uint64_t seed) {
  return CausalLM(
      init_causal_lm(config_json, options, seed, distributed::parallelism(options.distributed)));
}

CausalLM AutoModelForCausalLM::from_pretrained(const std::string& id_or_path,
                                               const LoadOptions& options) {
  return CausalLM(
      load_causal_lm(id_or_path, options, distributed::parallelism(options.distributed)));
}

}  // namespace tfm
