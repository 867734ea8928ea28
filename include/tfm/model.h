// Causal language models loaded as published, run as compiled graphs (one per input shape).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tfm/config.h"
#include "tfm/generation.h"
#include "tfm/graph_stats.h"
#include "tfm/load_options.h"
#include "tfm/tensor.h"

namespace tfm {

class CausalLMImpl;
struct CausalLMAccess;

class CausalLM {
 public:
  explicit CausalLM(std::unique_ptr<CausalLMImpl> impl);
  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;
  ~CausalLM();

  const ModelConfig& config() const;
  Device device() const;
  DType dtype() const;

  // Logits for input_ids [batch, seq] (i32 or i64, on the host) with an optional attention
  // mask [batch, seq] (1 = token, 0 = padding); returns f32 [batch, seq, vocab] on the host, or
  // [batch, 1, vocab] for the last position only.
  Tensor forward(const Tensor& input_ids, const Tensor* attention_mask = nullptr,
                 bool all_positions = true, bool disable_compile = false);

  // transformers' generate(): input_ids [batch, seq] (left-padded where attention_mask says so),
  // returns the prompt followed by the new tokens, i64 [batch, seq + new] on the host.
  Tensor generate(const Tensor& input_ids, const Tensor* attention_mask,
                  const GenerationConfig& config, GenerationStats* stats = nullptr);
  // Prompts of any lengths; they are left-padded into one batch.
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const GenerationConfig& config,
                                             GenerationStats* stats = nullptr);

  // config.json + model.safetensors in `dir`, loadable by transformers' from_pretrained; weights
  // in `dtype` (default: the model's).
  void save_pretrained(const std::string& dir, std::optional<DType> dtype = std::nullopt);

  GraphCacheStats graph_stats() const;
  size_t weight_bytes() const;

 private:
  friend struct CausalLMAccess;  // the layers above the API (training) reach the model through it
  std::unique_ptr<CausalLMImpl> impl_;
};

class AutoModelForCausalLM {
 public:
  // A local folder, a .safetensors checkpoint folder, or an Org/Name id in the Hugging Face cache.
  static CausalLM from_pretrained(const std::string& id_or_path, const LoadOptions& options = {});
  // Fresh weights (transformers' initialization: N(0, initializer_range), norms 1, biases 0) for
  // the architecture a config.json describes.
  static CausalLM from_config(const std::string& config_json, const LoadOptions& options = {},
                              uint64_t seed = 0);
};

}  // namespace tfm
