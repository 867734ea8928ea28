// The decoder-only transformer that Llama, Qwen2, Qwen3, Mistral, Mixtral and Qwen3-MoE share:
// RMSNorm, grouped-query attention with RoPE (within a sliding window where the config sets one),
// a SiLU-gated MLP or a mixture of such experts. Architectures differ only in the features below.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "graph/cache.h"
#include "graph/graph.h"
#include "io/model_config.h"
#include "models/tensor_parallel.h"
#include "tfm/tensor.h"

namespace tfm::models {

struct DecoderFeatures {
  bool qk_norm = false;   // Qwen3: RMSNorm on each head of q and k before RoPE
  bool qkv_bias = false;  // Qwen2 (and Llama with attention_bias): biases on q, k, v
  bool o_bias = false;    // Llama with attention_bias
  bool mlp_bias = false;  // Llama with mlp_bias
  // Mixture-of-experts layers (config.moe): the block their router ("gate") and experts sit in,
  // and each expert's gate, up and down projections' names.
  std::string moe_block;
  std::array<const char*, 3> expert_projections{};
  ExpertRange experts;  // the experts this process holds (all, or its expert-parallel share)
};

// Does layer `layer` hold experts (config.moe, decoder_sparse_step, mlp_only_layers)?
bool is_moe_layer(const ModelConfig& config, int64_t layer);

// Field names are the checkpoint's (model.layers.N.<field>.weight).
struct LayerWeights {
  Tensor input_layernorm;            // [hidden]
  Tensor q_proj, q_proj_bias;        // [heads * head_dim, hidden], [heads * head_dim]
  Tensor k_proj, k_proj_bias;        // [kv_heads * head_dim, hidden], [kv_heads * head_dim]
  Tensor v_proj, v_proj_bias;        // [kv_heads * head_dim, hidden], [kv_heads * head_dim]
  Tensor q_norm, k_norm;             // [head_dim]
  Tensor o_proj, o_proj_bias;        // [hidden, heads * head_dim], [hidden]
  Tensor post_attention_layernorm;   // [hidden]
  Tensor gate_proj, gate_proj_bias;  // [intermediate, hidden], [intermediate]
  Tensor up_proj, up_proj_bias;      // [intermediate, hidden], [intermediate]
  Tensor down_proj, down_proj_bias;  // [hidden, intermediate], [hidden]
  Tensor router;                     // a mixture-of-experts layer's [experts, hidden]
  // Each expert held's gate, up [inter, hidden] and down [hidden, inter]
  // (DecoderFeatures::experts).
  std::vector<Tensor> experts;
};

struct DecoderWeights {
  Tensor embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor norm;     // [hidden]
  Tensor lm_head;  // [vocab, hidden]; the embedding itself when tied
};

// The one listing of every weight, used by loading, saving and device upload: calls `visit` with
// the checkpoint name, the field and its expected shape, for the weights these features use.
// A tied lm_head is not listed (it is the embedding).
using WeightVisitor =
    std::function<void(const std::string& name, Tensor& field, const Shape& shape)>;
void for_each_weight(const ModelConfig& config, const DecoderFeatures& features,
                     DecoderWeights& weights, const WeightVisitor& visit);

// RoPE inverse frequencies and attention scaling for the config's rope_scaling, for sequences up
// to `seq_len` (dynamic scaling depends on it).
struct RopeTables {
  Tensor inv_freq;  // [head_dim / 2] f32
  float attention_scaling = 1.f;
};
RopeTables rope_tables(const ModelConfig& config, int64_t seq_len);

// Graph inputs, in order: input_ids [B, S], position_ids [B, S], slots [S] (cache slots the
// tokens are written to), attention_mask [B, L] (all i32), then k and v caches per layer
// [B, L, kv_heads, head_dim] of `cache_dtype`. Output: logits [B, S or 1, vocab] f32 (or, with
// signature.argmax, the greedy ids). Under tensor parallelism `config` is the rank's local one
// (models::local_config) and `weights` its shards.
graph::Graph build_decoder_graph(const ModelConfig& config, const DecoderFeatures& features,
                                 const DecoderWeights& weights, const RopeTables& rope,
                                 const graph::Signature& signature, DType cache_dtype,
                                 const Parallelism& tp = {});

// The training step for [batch, seq] token rows: inputs input_ids, position_ids, cache_slots
// (0..seq-1), attention_mask [B, S], targets [B, S] (the labels shifted left by one, kIgnoreIndex
// where no loss is taken) and loss_scale [1] (the gradient of the loss sum: 1 / number of
// targets). Output: the summed cross-entropy [1]. With grads, the gradient of each weight is
// added into the state input "grad.NAME" that follows those six (one per weight, for_each_weight
// order, f32 of the weight's shape), where the caller keeps it, and the output layer and the loss
// run over `loss_chunk_rows` token rows at a time (0: the fewest chunks whose logits each stay
// within kLossChunkBytes, rows split evenly).
// `autocast` bf16: matrix products read bf16 copies of the f32 weights and of their inputs
// (Builder::autocast). Under tensor parallelism (`config` the rank's local one) the gradients are
// of this rank's shards, and every rank gets the whole loss. `grad_buffers`: the tensors each run
// will be given for the gradients, where the caller knows them (graph::Builder::state's `bound`).
inline constexpr int64_t kLossChunkBytes = int64_t{3} << 30;
graph::Graph build_decoder_training_graph(const ModelConfig& config,
                                          const DecoderFeatures& features, DecoderWeights& weights,
                                          const RopeTables& rope, int64_t batch, int64_t seq,
                                          bool with_grads = true, DType autocast = DType::f32,
                                          const Parallelism& tp = {}, int64_t loss_chunk_rows = 0,
                                          const std::vector<Tensor>& grad_buffers = {});

}  // namespace tfm::models
