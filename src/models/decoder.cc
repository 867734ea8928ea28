#include "models/decoder.h"

#include <cmath>

#include "graph/builder.h"

namespace tfm::models {
namespace {

using graph::Builder;
using graph::ValueId;

struct Inputs {
  ValueId positions, slots, mask, inv_freq;
};

ValueId optional_weight(Builder& b, const std::string& name, const Tensor& t) {
  return t.defined() ? b.weight(name, t) : -1;
}

ValueId attention_block(Builder& b, const ModelConfig& c, const DecoderFeatures& f,
                        const LayerWeights& w, const std::string& p, ValueId x, const Inputs& in,
                        float rope_scaling, ValueId k_cache, ValueId v_cache) {
  const Shape& xs = b.shape(x);
  const int64_t batch = xs[0], seq = xs[1], d = c.head_dim;
  const auto project = [&](const Tensor& weight, const Tensor& bias, const std::string& name,
                           int64_t heads) {
    const ValueId y = b.linear(x, b.weight(p + name + ".weight", weight),
                               optional_weight(b, p + name + ".bias", bias));
    return b.reshape(y, {batch, seq, heads, d});
  };
  ValueId q = project(w.q_proj, w.q_proj_bias, "q_proj", c.num_attention_heads);
  ValueId k = project(w.k_proj, w.k_proj_bias, "k_proj", c.num_key_value_heads);
  const ValueId v = project(w.v_proj, w.v_proj_bias, "v_proj", c.num_key_value_heads);
  if (f.qk_norm) {
    const float eps = static_cast<float>(c.rms_norm_eps);
    q = b.rms_norm(q, b.weight(p + "q_norm.weight", w.q_norm), eps);
    k = b.rms_norm(k, b.weight(p + "k_norm.weight", w.k_norm), eps);
  }
  q = b.rope(q, in.positions, in.inv_freq, rope_scaling);
  k = b.rope(k, in.positions, in.inv_freq, rope_scaling);
  const ValueId keys = b.cache_write(k_cache, k, in.slots);
  const ValueId values = b.cache_write(v_cache, v, in.slots);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const ValueId a = b.attention(q, keys, values, in.mask, in.slots, scale);
  const ValueId flat = b.reshape(a, {batch, seq, c.num_attention_heads * d});
  return b.linear(flat, b.weight(p + "o_proj.weight", w.o_proj),
                  optional_weight(b, p + "o_proj.bias", w.o_proj_bias));
}

ValueId mlp_block(Builder& b, const LayerWeights& w, const std::string& p, ValueId x) {
  const auto proj = [&](const Tensor& weight, const Tensor& bias, const std::string& name,
                        ValueId in) {
    return b.linear(in, b.weight(p + name + ".weight", weight),
                    optional_weight(b, p + name + ".bias", bias));
  };
  const ValueId gate = proj(w.gate_proj, w.gate_proj_bias, "gate_proj", x);
  const ValueId up = proj(w.up_proj, w.up_proj_bias, "up_proj", x);
  return proj(w.down_proj, w.down_proj_bias, "down_proj", b.mul(b.silu(gate), up));
}

}  // namespace

graph::Graph build_decoder_graph(const ModelConfig& c, const DecoderFeatures& f,
                                 const DecoderWeights& w, const RopeTables& rope,
                                 const graph::Signature& sig, DType cache_dtype) {
  Builder b;
  const int64_t batch = sig.batch, seq = sig.seq, len = sig.cache_len;
  const ValueId ids = b.input("input_ids", {batch, seq}, DType::i32);
  Inputs in;
  in.positions = b.input("position_ids", {batch, seq}, DType::i32);
  in.slots = b.input("cache_slots", {seq}, DType::i32);
  in.mask = b.input("attention_mask", {batch, len}, DType::i32);
  in.inv_freq = b.weight("rope.inv_freq", rope.inv_freq);
  std::vector<ValueId> caches;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const Shape cache_shape{batch, len, c.num_key_value_heads, c.head_dim};
    caches.push_back(b.state("layers." + std::to_string(i) + ".k_cache", cache_shape, cache_dtype));
    caches.push_back(b.state("layers." + std::to_string(i) + ".v_cache", cache_shape, cache_dtype));
  }

  const float eps = static_cast<float>(c.rms_norm_eps);
  ValueId x = b.embedding(b.weight("model.embed_tokens.weight", w.embed_tokens), ids);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const ValueId h = b.rms_norm(x, b.weight(p + "input_layernorm.weight", l.input_layernorm), eps);
    x = b.add(x, attention_block(b, c, f, l, p + "self_attn.", h, in, rope.attention_scaling,
                                 caches[static_cast<size_t>(2 * i)],
                                 caches[static_cast<size_t>(2 * i + 1)]));
    const ValueId h2 = b.rms_norm(
        x, b.weight(p + "post_attention_layernorm.weight", l.post_attention_layernorm), eps);
    x = b.add(x, mlp_block(b, l, p + "mlp.", h2));
  }
  // Only the last position's logits are needed to pick the next token; skipping the others
  // saves the largest matrix product of a prefill.
  if (!sig.all_logits) x = b.slice_seq(x, seq - 1, 1);
  x = b.rms_norm(x, b.weight("model.norm.weight", w.norm), eps);
  const Tensor& head = w.lm_head.defined() ? w.lm_head : w.embed_tokens;
  b.output(b.linear(x, b.weight("lm_head.weight", head)));
  return b.finish();
}

}  // namespace tfm::models
