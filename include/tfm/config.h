// config.json of a causal LM, typed (src/io reads and writes it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tfm/dtype.h"

namespace tfm {

struct RopeScaling {
  std::string rope_type = "default";  // default, linear, dynamic, llama3, yarn, longrope
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // llama3/yarn/longrope: the context length of pre-training; max_position_embeddings if absent.
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;   // yarn
  std::optional<double> attention_factor;     // yarn/longrope; derived from factor if absent
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn
  bool truncate = true;                       // yarn
  bool operator==(const RopeScaling&) const = default;
};

// The mixture-of-experts layers of Qwen3-MoE and Mixtral (transformers' Qwen3MoeConfig and
// MixtralConfig fields of the same names).
struct MoeConfig {
  int64_t num_experts = 0;  // "num_experts" (qwen3_moe) or "num_local_experts"
  int64_t num_experts_per_tok = 0;
  // Each expert's intermediate size: "moe_intermediate_size" (qwen3_moe) or intermediate_size.
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;  // the chosen experts' weights renormalized (mixtral: always)
  // Training adds router_aux_loss_coef x the load-balancing loss to the loss.
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  double router_jitter_noise = 0.0;  // mixtral, training only
  // qwen3_moe: layer i has experts unless listed in mlp_only_layers or (i + 1) is not a multiple
  // of decoder_sparse_step; its dense MLP then has intermediate_size.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "qwen3", "llama", "qwen2", "mistral", "mixtral", "qwen3_moe"
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0.0, rope_theta = 0.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // Llama and Qwen3: q/k/v/o projections carry a bias. Qwen2 always has q/k/v biases and never an
  // o_proj bias (hard-wired in transformers), so for qwen2 this is true and means q/k/v only.
  bool attention_bias = false;
  bool mlp_bias = false;  // llama only
  std::string hidden_act;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id may be an int or a list
  // generation_config.json's eos_token_id beside config.json, which generate() prefers, as
  // transformers' GenerationConfig does (Llama 3 instruct checkpoints list several there).
  std::optional<std::vector<int64_t>> generation_eos_token_ids;
  std::optional<DType> dtype;  // "dtype" (transformers 5) or "torch_dtype" (4.x)
  // qwen2/qwen3/qwen3_moe: as in transformers, sliding_window is nullopt unless
  // use_sliding_window; layers from max_window_layers on then use it. mistral/mixtral: every
  // layer attends within sliding_window where it is set.
  bool use_sliding_window = false;
  std::optional<int64_t> sliding_window;
  int64_t max_window_layers = 0;
  std::optional<MoeConfig> moe;     // mixture-of-experts models only
  double initializer_range = 0.02;  // the stddev of fresh weights (from_config)
  std::string raw;  // the whole file's JSON text, kept so save_pretrained can write it back
};

}  // namespace tfm
