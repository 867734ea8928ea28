#include "models/decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "graph/builder.h"
#include "ops/autodiff.h"
#include "ops/backward.h"
#include "tfm/error.h"

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

// The attention block over h (the normed rows), ending in the output product: over the caches
// (inference: the new tokens' k and v written into them, attention reading them), or over the
// sequence's own keys and values (training). A kernel backend fuses the products, the norms, RoPE
// and the cache writes (src/fusion); its q, k and v fusion needs the three weights made before the
// first product, and every reader of the products after the last.
ValueId attention_block(Builder& b, const ModelConfig& c, const DecoderFeatures& f,
                        const LayerWeights& w, const std::string& p, ValueId h, const Inputs& in,
                        float rope_scaling, ValueId k_cache, ValueId v_cache) {
  const Shape& hs = b.shape(h);
  const int64_t batch = hs[0], seq = hs[1], d = c.head_dim;
  const int64_t q_heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const auto weight = [&](const std::string& name, const Tensor& t) {
    return b.weight(p + name + ".weight", t);
  };
  const auto bias = [&](const std::string& name, const Tensor& t) {
    return optional_weight(b, p + name + ".bias", t);
  };
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const std::array<ValueId, 3> weights{weight("q_proj", w.q_proj), weight("k_proj", w.k_proj),
                                       weight("v_proj", w.v_proj)};
  const std::array<ValueId, 3> biases{bias("q_proj", w.q_proj_bias), bias("k_proj", w.k_proj_bias),
                                      bias("v_proj", w.v_proj_bias)};
  // Under autocast each product comes out in bf16, as torch's do: q and k are normed and rotated
  // in f32 from those values, v goes to attention as it is.
  std::array<ValueId, 3> projected{};
  for (size_t i = 0; i < 3; ++i) projected[i] = b.autocast_linear(h, weights[i], biases[i]);
  ValueId q = b.reshape(projected[0], {batch, seq, q_heads, d});
  ValueId k = b.reshape(projected[1], {batch, seq, kv_heads, d});
  ValueId v = b.reshape(projected[2], {batch, seq, kv_heads, d});
  if (f.qk_norm) {
    q = b.rms_norm(q, weight("q_norm", w.q_norm), eps);
    k = b.rms_norm(k, weight("k_norm", w.k_norm), eps);
  }
  q = b.rope(q, in.positions, in.inv_freq, rope_scaling);
  k = b.rope(k, in.positions, in.inv_freq, rope_scaling);
  if (k_cache >= 0) {
    k = b.cache_write(k_cache, k, in.slots);
    v = b.cache_write(v_cache, v, in.slots);
  }
  // A window as long as the keys hides none of them: left out, for kernels without windows.
  const int64_t window = c.sliding_window.value_or(0);
  const ValueId a =
      b.attention(q, k, v, in.mask, in.slots, scale, window < b.shape(k)[1] ? window : 0);
  const ValueId flat = b.reshape(a, {batch, seq, q_heads * d});
  return b.linear(flat, weight("o_proj", w.o_proj), bias("o_proj", w.o_proj_bias));
}

// silu(h w_gate^T + b_gate) * (h w_up^T + b_up), then the down product. Under autocast gate and up
// come out in bf16, as torch's do: the gating widens them as it reads, and they are kept for the
// backward pass at half the size.
ValueId mlp_block(Builder& b, const LayerWeights& w, const std::string& p, ValueId h) {
  const auto weight = [&](const Tensor& t, const std::string& name) {
    return b.weight(p + name + ".weight", t);
  };
  const auto bias = [&](const Tensor& t, const std::string& name) {
    return optional_weight(b, p + name + ".bias", t);
  };
  const ValueId gate =
      b.autocast_linear(h, weight(w.gate_proj, "gate_proj"), bias(w.gate_proj_bias, "gate_proj"));
  const ValueId up =
      b.autocast_linear(h, weight(w.up_proj, "up_proj"), bias(w.up_proj_bias, "up_proj"));
  return b.linear(b.mul(b.silu(gate), up), weight(w.down_proj, "down_proj"),
                  bias(w.down_proj_bias, "down_proj"));
}

// A mixture of experts over the rows h: the router's logits [tokens, experts] (kept in
// `router_logits` for the load-balancing loss), each row's top-k experts, their weighted sum.
ValueId moe_block(Builder& b, const ModelConfig& c, const DecoderFeatures& f, const LayerWeights& w,
                  const std::string& p, ValueId h, const Parallelism& tp,
                  std::vector<ValueId>& router_logits) {
  const Shape shape = b.shape(h);
  const int64_t hidden = shape.back(), rows = shape_numel(shape) / hidden;
  const std::string block = p + f.moe_block;
  const ValueId flat = b.reshape(h, {rows, hidden});
  const ValueId logits = b.linear(flat, b.weight(block + "gate.weight", w.router));
  router_logits.push_back(logits);
  const ValueId routing = b.moe_route(logits, c.moe->num_experts_per_tok, c.moe->norm_topk_prob);
  std::vector<ValueId> experts;
  for (size_t i = 0; i < w.experts.size(); ++i) {
    const int64_t expert = f.experts.first + static_cast<int64_t>(i / 3);
    experts.push_back(b.weight(
        block + "experts." + std::to_string(expert) + "." + f.expert_projections[i % 3] + ".weight",
        w.experts[i]));
  }
  if (tp.experts_exchanged) {
    // Each (row, expert) pair goes to the rank that holds the expert, which runs its experts
    // over every rank's pairs and sends the results back, to be summed row by row.
    const int64_t k = c.moe->num_experts_per_tok, ranks = tp.fsdp_size;
    const ValueId sent = b.all_to_all(b.moe_dispatch(flat, routing, k, ranks), tp.fsdp_group);
    const ValueId slots = b.all_to_all(b.moe_slots(routing, k, ranks), tp.fsdp_group);
    const ValueId done = b.all_to_all(b.moe_experts(sent, slots, experts), tp.fsdp_group);
    return b.reshape(b.moe_combine(done, routing, k, ranks), shape);
  }
  // Under expert parallelism over the tensor-parallel ranks each adds its experts' share; the
  // all_reduce after the block sums them.
  return b.reshape(b.moe_experts(flat, routing, experts, f.experts.first), shape);
}

// The decoder's output: the final norm's rows, and each mixture-of-experts layer's router logits.
struct Body {
  ValueId x;
  std::vector<ValueId> router_logits;
};

// The decoder from token ids to the final norm's output. `caches` holds k and v per layer, or is
// empty for a forward pass over the sequence alone (training).
Body decoder_body(Builder& b, const ModelConfig& c, const DecoderFeatures& f,
                  const DecoderWeights& w, const RopeTables& rope, ValueId ids, const Inputs& in,
                  const std::vector<ValueId>& caches, ValueId embed, bool all_logits,
                  const Parallelism& tp) {
  std::vector<ValueId> router_logits;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t seq = b.shape(ids)[1];
  // Row-parallel outputs and the vocabulary-split embedding are partial sums across the ranks;
  // what enters a column-parallel layer is every rank's alike, and so gets all their gradients.
  const auto reduce = [&](ValueId v) { return tp.size > 1 ? b.all_reduce(v, tp.group) : v; };
  const auto copy = [&](ValueId v) { return tp.size > 1 ? b.copy_to_group(v, tp.group) : v; };
  ValueId x = tp.size > 1 ? reduce(b.embedding_shard(embed, ids, tp.rank * b.shape(embed)[0]))
                          : b.embedding(embed, ids);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const auto cache = [&](int64_t which) {
      return caches.empty() ? -1 : caches[static_cast<size_t>(2 * i + which)];
    };
    const auto block_input = [&](const std::string& name, const Tensor& t) {
      return copy(b.rms_norm(x, b.weight(p + name + ".weight", t), eps));
    };
    // x + block(h): the residual connections.
    x = b.add(x, reduce(attention_block(b, c, f, l, p + "self_attn.",
                                        block_input("input_layernorm", l.input_layernorm), in,
                                        rope.attention_scaling, cache(0), cache(1))));
    const ValueId h = block_input("post_attention_layernorm", l.post_attention_layernorm);
    x = b.add(x, reduce(is_moe_layer(c, i) ? moe_block(b, c, f, l, p, h, tp, router_logits)
                                           : mlp_block(b, l, p + "mlp.", h)));
  }
  // Only the last position's logits are needed to pick the next token; skipping the others
  // saves the largest matrix product of a prefill.
  if (!all_logits) x = b.slice_seq(x, seq - 1, 1);
  return {copy(b.rms_norm(x, b.weight("model.norm.weight", w.norm), eps)), router_logits};
}

// The whole vocabulary's logits from each rank's slice of them, the padding of the last slices
// dropped.
ValueId gather_vocabulary(Builder& b, ValueId logits, int64_t vocab_size, const Parallelism& tp) {
  const ValueId gathered = b.all_gather(logits, tp.group);
  Shape shape = b.shape(gathered);
  if (shape.back() == vocab_size) return gathered;
  const int64_t padded = shape.back();
  shape.back() = vocab_size;
  // Rows of the padded width, cut as a sequence of one-element positions.
  const ValueId rows = b.reshape(gathered, {shape_numel(shape) / vocab_size, padded});
  return b.reshape(b.slice_seq(rows, 0, vocab_size), shape);
}

// A tied lm_head is the embedding's own node, so its two uses add up in one gradient.
ValueId lm_head(Builder& b, const DecoderWeights& w, ValueId embed) {
  return w.lm_head.defined() ? b.weight("lm_head.weight", w.lm_head) : embed;
}

// Summed cross-entropy of `logits` against `targets`; under tensor parallelism each rank holds a
// slice of the vocabulary's logits (of `vocab_size` ids, the last slices padded) and the loss
// combines them.
ValueId loss_of(Builder& b, ValueId logits, ValueId targets, int64_t vocab_size,
                const Parallelism& tp) {
  return tp.size > 1 ? b.cross_entropy_shard(logits, targets, tp.rank * b.shape(logits).back(),
                                             vocab_size, tp.group)
                     : b.cross_entropy(logits, targets);
}

// The output layer and the loss, with their gradients, in chunks of rows: the logits (tokens x
// vocabulary, the largest value of a step) and their gradient then exist one chunk at a time.
struct LossHead {
  ValueId loss;  // [1], summed over the targets
  ValueId dx;    // the gradient flowing into x
  ValueId dw;    // the gradient flowing into the output layer's weight, as the layer reads it
};

LossHead chunked_loss_head(Builder& b, ValueId x, ValueId head, ValueId targets, ValueId loss_scale,
                           int64_t chunk_rows, int64_t vocab_size, const Parallelism& tp) {
  const Shape shape = b.shape(x);
  const int64_t hidden = shape.back(), rows = shape_numel(shape) / hidden;
  const ValueId flat_x = b.reshape(x, {rows, hidden});
  const ValueId flat_targets = b.reshape(targets, {rows});
  ValueId loss = -1, dw = -1;
  std::vector<ValueId> dx;
  for (int64_t first = 0; first < rows; first += chunk_rows) {
    const int64_t count = std::min(chunk_rows, rows - first);
    // Under autocast the logits come out in bf16, as torch's do; the loss widens them.
    const ValueId logits = b.autocast_linear(b.view(flat_x, first * hidden, {count, hidden}), head);
    const ValueId chunk_loss =
        loss_of(b, logits, b.view(flat_targets, first, {count}), vocab_size, tp);
    // What autodiff does for these two nodes, done while this chunk's logits exist.
    const ops::InputGrads d_logits = ops::backward(b, b.node(chunk_loss), loss_scale);
    const ops::InputGrads d_inputs = ops::backward(b, b.node(logits), d_logits[0]);
    loss = loss < 0 ? chunk_loss : b.add(loss, chunk_loss);
    // Added in place: an elementwise sum would be fused into one node reading every chunk's.
    dw = dw < 0 ? d_inputs[1] : b.accumulate(dw, d_inputs[1]);
    dx.push_back(d_inputs[0]);
  }
  return {loss, b.reshape(dx.size() == 1 ? dx[0] : b.concat_rows(dx), shape), dw};
}

// As few chunks as keep each chunk's logits within kLossChunkBytes, of rows as even as they go:
// each chunk adds into the output layer's weight gradient, a full pass over it, and the largest
// chunk sets the memory the logits take.
int64_t automatic_loss_chunk_rows(int64_t rows, int64_t row_bytes) {
  const int64_t most = std::max<int64_t>(1, kLossChunkBytes / row_bytes);
  const int64_t chunks = (rows + most - 1) / most;
  return (rows + chunks - 1) / chunks;
}

Inputs common_inputs(Builder& b, const RopeTables& rope, int64_t batch, int64_t seq, int64_t len) {
  Inputs in;
  in.positions = b.input("position_ids", {batch, seq}, DType::i32);
  in.slots = b.input("cache_slots", {seq}, DType::i32);
  in.mask = b.input("attention_mask", {batch, len}, DType::i32);
  in.inv_freq = b.weight("rope.inv_freq", rope.inv_freq);
  return in;
}

}  // namespace

graph::Graph build_decoder_graph(const ModelConfig& c, const DecoderFeatures& f,
                                 const DecoderWeights& w, const RopeTables& rope,
                                 const graph::Signature& sig, DType cache_dtype,
                                 const Parallelism& tp) {
  Builder b;
  const int64_t batch = sig.batch, seq = sig.seq, len = sig.cache_len;
  const ValueId ids = b.input("input_ids", {batch, seq}, DType::i32);
  const Inputs in = common_inputs(b, rope, batch, seq, len);
  // Every weight after the RoPE table is sharded.
  if (tp.fsdp_size > 1) {
    b.shard_weights(tp.fsdp_group, tp.unpadded_rows,
                    [&tp](const std::string& name) { return held_whole(name, tp); });
  }
  std::vector<ValueId> caches;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const Shape cache_shape{batch, len, c.num_key_value_heads, c.head_dim};
    caches.push_back(b.state("layers." + std::to_string(i) + ".k_cache", cache_shape, cache_dtype));
    caches.push_back(b.state("layers." + std::to_string(i) + ".v_cache", cache_shape, cache_dtype));
  }
  const ValueId embed = b.weight("model.embed_tokens.weight", w.embed_tokens);
  const ValueId x = decoder_body(b, c, f, w, rope, ids, in, caches, embed, sig.all_logits, tp).x;
  ValueId logits = b.linear(x, lm_head(b, w, embed));
  if (tp.size > 1) logits = gather_vocabulary(b, logits, c.vocab_size, tp);
  b.output(sig.argmax ? b.argmax(logits) : logits);
  return b.finish();
}

graph::Graph build_decoder_training_graph(const ModelConfig& c, const DecoderFeatures& f,
                                          DecoderWeights& w, const RopeTables& rope, int64_t batch,
                                          int64_t seq, bool with_grads, DType autocast,
                                          const Parallelism& tp, int64_t loss_chunk_rows,
                                          const std::vector<Tensor>& grad_buffers) {
  if (with_grads && c.moe && c.moe->router_jitter_noise > 0) {
    throw Error("router_jitter_noise " + std::to_string(c.moe->router_jitter_noise) +
                " (noise on the routers' inputs in training) is not supported: set it to 0");
  }
  Builder b;
  b.autocast(autocast);
  const ValueId ids = b.input("input_ids", {batch, seq}, DType::i32);
  const Inputs in = common_inputs(b, rope, batch, seq, seq);
  // Every weight after the RoPE table is sharded.
  if (tp.fsdp_size > 1) {
    b.shard_weights(tp.fsdp_group, tp.unpadded_rows,
                    [&tp](const std::string& name) { return held_whole(name, tp); });
  }
  const ValueId targets = b.input("targets", {batch, seq}, DType::i32);
  const ValueId loss_scale = b.input("loss_scale", {1}, DType::f32);
  const ValueId embed = b.weight("model.embed_tokens.weight", w.embed_tokens);
  const Body body = decoder_body(b, c, f, w, rope, ids, in, {}, embed, true, tp);
  const ValueId x = body.x;
  const ValueId head = lm_head(b, w, embed);
  // transformers adds the routers' load-balancing loss where the config asks for their logits.
  const ValueId router_loss =
      c.moe && c.moe->output_router_logits
          ? b.router_loss(loss_scale, in.mask, body.router_logits, c.moe->num_experts_per_tok,
                          static_cast<float>(c.moe->router_aux_loss_coef))
          : -1;
  const auto with_router_loss = [&](ValueId loss) {
    return router_loss < 0 ? loss : b.add(loss, router_loss);
  };
  if (!with_grads) {
    b.output(with_router_loss(loss_of(b, b.autocast_linear(x, head), targets, c.vocab_size, tp)));
    return b.finish();
  }
  const int64_t vocab = b.shape(head)[0];
  // The logits come out in the autocast dtype (Builder::autocast_linear).
  const auto logit_bytes = static_cast<int64_t>(dtype_size(autocast));
  const LossHead loss = chunked_loss_head(
      b, x, head, targets, loss_scale,
      loss_chunk_rows > 0 ? loss_chunk_rows
                          : automatic_loss_chunk_rows(batch * seq, vocab * logit_bytes),
      c.vocab_size, tp);
  b.output(with_router_loss(loss.loss));

  std::map<std::string, ValueId> by_name;
  for (size_t i = 0; i < b.graph().nodes.size(); ++i) {
    const graph::Node& n = b.graph().nodes[i];
    if (n.op == graph::Op::kWeight) by_name.emplace(n.name, static_cast<ValueId>(i));
  }
  std::vector<ValueId> params;
  for_each_weight(c, f, w, [&](const std::string& name, Tensor&, const Shape&) {
    params.push_back(by_name.at(name));
  });
  graph::Graph graph = b.finish();
  std::vector<ops::Seed> seeds{{x, loss.dx}, {head, loss.dw}};
  // The router loss is in the summed loss' units: loss_scale is the gradient flowing into it.
  // Every tensor-parallel rank computes it alike, and the routers' gradients are summed over the
  // ranks (tensor_parallel_grad): one rank's share is the whole.
  if (router_loss >= 0 && tp.rank == 0) seeds.push_back({router_loss, loss_scale});
  const std::vector<ValueId> grads = ops::append_backward(graph, seeds, params);
  Builder out(std::move(graph));
  size_t i = 0;
  for_each_weight(c, f, w, [&](const std::string& name, Tensor&, const Shape&) {
    const ValueId grad = tensor_parallel_grad(out, grads[i], name, tp);
    const Tensor bound = i < grad_buffers.size() ? grad_buffers[i] : Tensor{};
    out.accumulate(out.state("grad." + name, out.shape(grad), DType::f32, bound), grad);
    ++i;
  });
  return out.finish();
}

}  // namespace tfm::models
