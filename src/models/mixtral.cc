// Mixtral: Mistral with every MLP a mixture of experts (block_sparse_moe: the router "gate" and
// experts whose w1, w3 and w2 are the gate, up and down projections).
#include "models/architectures.h"

namespace tfm::models {

DecoderFeatures mixtral_features(const ModelConfig&) {
  DecoderFeatures f;
  f.moe_block = "block_sparse_moe.";
  f.expert_projections = {"w1", "w3", "w2"};
  return f;
}

}  // namespace tfm::models
