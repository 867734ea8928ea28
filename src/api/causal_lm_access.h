// The model behind a CausalLM, for the layers above the public API (training) that drive it
// directly.
#pragma once

#include "models/causal_lm.h"
#include "tfm/model.h"

namespace tfm {

struct CausalLMAccess {
  static CausalLMImpl& impl(CausalLM& model);
};

}  // namespace tfm
