// tfm::CausalLM, the public face of CausalLMImpl (generate() lives in src/generation, and
// AutoModelForCausalLM in src/distributed, which makes the process groups a DistributedConfig needs).
#include "models/causal_lm.h"
#include "models/step_inputs.h"
#include "tfm/error.h"

namespace tfm {

CausalLM::CausalLM(std::unique_ptr<CausalLMImpl> impl) : impl_(std::move(impl)) {}
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;
CausalLM::~CausalLM() = default;

const ModelConfig& CausalLM::config() const { return impl_->config(); }
Device CausalLM::device() const { return impl_->device(); }
DType CausalLM::dtype() const { return impl_->dtype(); }
GraphCacheStats CausalLM::graph_stats() const { return impl_->graph_stats(); }
size_t CausalLM::weight_bytes() const { return impl_->weight_bytes(); }

Tensor CausalLM::forward(const Tensor& input_ids, const Tensor* attention_mask, bool all_positions,
                         bool disable_compile) {
  const Tensor ids = ids_as_i32(input_ids, "input_ids");
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  Tensor mask = attention_mask != nullptr ? ids_as_i32(*attention_mask, "attention_mask")
                                          : filled_i32({batch, seq}, 1);
  if (mask.shape() != ids.shape()) {
    throw Error("attention_mask " + shape_str(mask.shape()) + " does not match input_ids " +
                shape_str(ids.shape()));
  }
  // As in transformers' forward: positions count from 0 whatever the mask says.
  StepInputs in{ids, arange_rows(batch, 0, seq), arange_rows(1, 0, seq).view({seq}), mask};
  KvCache cache = impl_->cache_for(batch, seq);
  return impl_->step(in, cache, all_positions, disable_compile);
}

void CausalLM::save_pretrained(const std::string& dir, std::optional<DType> dtype) {
  save_causal_lm(*impl_, dir, dtype.value_or(impl_->dtype()));
}

}  // namespace tfm
