// tfm::CausalLM, the public face of CausalLMImpl: every method here, each handing the model to
// the layer that does the work (generation, models).
#include "api/causal_lm_access.h"
#include "generation/generate.h"
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
  KvCache& cache = impl_->cache_for(batch, seq);
  return impl_->step(in, cache, all_positions, disable_compile);
}

Tensor CausalLM::generate(const Tensor& input_ids, const Tensor* attention_mask,
                          const GenerationConfig& config, GenerationStats* stats) {
  return generation::generate(*impl_, input_ids, attention_mask, config, stats);
}

std::vector<std::vector<int64_t>> CausalLM::generate(
    const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& config,
    GenerationStats* stats) {
  return generation::generate(*impl_, prompts, config, stats);
}

void CausalLM::save_pretrained(const std::string& dir, std::optional<DType> dtype) {
  save_causal_lm(*impl_, dir, dtype.value_or(impl_->dtype()));
}

CausalLMImpl& CausalLMAccess::impl(CausalLM& model) { return *model.impl_; }

}  // namespace tfm
