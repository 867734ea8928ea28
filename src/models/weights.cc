#include <algorithm>

#include "models/decoder.h"

namespace tfm::models {

bool is_moe_layer(const ModelConfig& c, int64_t layer) {
  if (!c.moe) return false;
  const std::vector<int64_t>& dense = c.moe->mlp_only_layers;
  return std::find(dense.begin(), dense.end(), layer) == dense.end() &&
         (layer + 1) % c.moe->decoder_sparse_step == 0;
}

void for_each_weight(const ModelConfig& c, const DecoderFeatures& f, DecoderWeights& w,
                     const WeightVisitor& visit) {
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  visit("model.embed_tokens.weight", w.embed_tokens, {c.vocab_size, hidden});
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    visit(p + "input_layernorm.weight", l.input_layernorm, {hidden});
    visit(p + "self_attn.q_proj.weight", l.q_proj, {q_dim, hidden});
    visit(p + "self_attn.k_proj.weight", l.k_proj, {kv_dim, hidden});
    visit(p + "self_attn.v_proj.weight", l.v_proj, {kv_dim, hidden});
    if (f.qkv_bias) {
      visit(p + "self_attn.q_proj.bias", l.q_proj_bias, {q_dim});
      visit(p + "self_attn.k_proj.bias", l.k_proj_bias, {kv_dim});
      visit(p + "self_attn.v_proj.bias", l.v_proj_bias, {kv_dim});
    }
    if (f.qk_norm) {
      visit(p + "self_attn.q_norm.weight", l.q_norm, {c.head_dim});
      visit(p + "self_attn.k_norm.weight", l.k_norm, {c.head_dim});
    }
    visit(p + "self_attn.o_proj.weight", l.o_proj, {hidden, q_dim});
    if (f.o_bias) visit(p + "self_attn.o_proj.bias", l.o_proj_bias, {hidden});
    visit(p + "post_attention_layernorm.weight", l.post_attention_layernorm, {hidden});
    if (is_moe_layer(c, i)) {
      const int64_t expert_inter = c.moe->moe_intermediate_size;
      const std::string block = p + f.moe_block;
      visit(block + "gate.weight", l.router, {c.moe->num_experts, hidden});
      l.experts.resize(static_cast<size_t>(3 * f.experts.count));
      for (int64_t e = 0; e < f.experts.count; ++e) {
        const std::string expert = block + "experts." + std::to_string(f.experts.first + e) + ".";
        for (size_t k = 0; k < 3; ++k) {
          const Shape shape = k < 2 ? Shape{expert_inter, hidden} : Shape{hidden, expert_inter};
          visit(expert + f.expert_projections[k] + ".weight",
                l.experts[static_cast<size_t>(3 * e) + k], shape);
        }
      }
      continue;
    }
    visit(p + "mlp.gate_proj.weight", l.gate_proj, {inter, hidden});
    visit(p + "mlp.up_proj.weight", l.up_proj, {inter, hidden});
    visit(p + "mlp.down_proj.weight", l.down_proj, {hidden, inter});
    if (f.mlp_bias) {
      visit(p + "mlp.gate_proj.bias", l.gate_proj_bias, {inter});
      visit(p + "mlp.up_proj.bias", l.up_proj_bias, {inter});
      visit(p + "mlp.down_proj.bias", l.down_proj_bias, {hidden});
    }
  }
  visit("model.norm.weight", w.norm, {hidden});
  if (!c.tie_word_embeddings) visit("lm_head.weight", w.lm_head, {c.vocab_size, hidden});
}

}  // namespace tfm::models
