#include "models/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "tfm/error.h"

namespace tfm::models {
namespace {

// kExpert: whole, on the one rank that holds the expert.
enum class Split { kReplicated, kRows, kColumns, kFirstRank, kExpert };

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A mixture-of-experts layer's router ("mlp.gate" in Qwen3-MoE, "block_sparse_moe.gate" in
// Mixtral): whole on every rank, each of which routes to all experts but runs only its own.
bool is_router(const std::string& name) {
  return ends_with(name, ".mlp.gate.weight") || ends_with(name, ".block_sparse_moe.gate.weight");
}

Split split_of(const std::string& name) {
  if (is_expert_weight(name)) return Split::kExpert;
  for (const char* column : {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."}) {
    if (name.find(column) != std::string::npos) return Split::kRows;
  }
  if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight")) {
    return Split::kColumns;
  }
  // A row-parallel layer's bias is added once, after the all_reduce: rank 0 carries it.
  if (ends_with(name, "o_proj.bias") || ends_with(name, "down_proj.bias")) return Split::kFirstRank;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return Split::kRows;
  return Split::kReplicated;
}

bool is_vocabulary(const std::string& name) {
  return name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

bool is_kv(const std::string& name) {
  return name.find("k_proj.") != std::string::npos || name.find("v_proj.") != std::string::npos;
}

void check_split(int64_t count, const char* what, const Parallelism& tp,
                 const std::string& source) {
  if (count % tp.size != 0) {
    throw Error(source + ": tp_size=" + std::to_string(tp.size) + " does not divide " + what + "=" +
                std::to_string(count));
  }
}

Tensor columns(const Tensor& full, int64_t begin, int64_t end) {
  const int64_t rows = full.dim(0), cols = full.dim(1), width = end - begin;
  Tensor out = Tensor::empty({rows, width}, full.dtype());
  const size_t elem = dtype_size(full.dtype());
  const auto* src = static_cast<const char*>(full.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r * width) * elem,
                src + static_cast<size_t>(r * cols + begin) * elem,
                static_cast<size_t>(width) * elem);
  }
  return out;
}

// Rows [first, first + count) of `full`, those past its end zero rows: a view where all exist.
Tensor padded_rows(const Tensor& full, int64_t first, int64_t count) {
  const int64_t rows = full.dim(0);
  const int64_t begin = std::min(rows, first), end = std::min(rows, first + count);
  if (end - begin == count) return full.slice(begin, end);
  Shape shape = full.shape();
  shape[0] = count;
  Tensor padded = Tensor::zeros(shape, full.dtype());
  if (end > begin) {
    const Tensor mine = full.slice(begin, end);
    std::memcpy(padded.data(), mine.data(), mine.nbytes());
  }
  return padded;
}

// Expert `e`'s position in `name` ("...experts.<e>."), as [begin, end) of its digits.
std::pair<size_t, size_t> expert_index_at(const std::string& name) {
  const size_t begin = name.find(".experts.") + 9;
  return {begin, name.find('.', begin)};
}

}  // namespace

bool is_expert_weight(const std::string& name) {
  return name.find(".experts.") != std::string::npos;
}

bool held_whole(const std::string& name, const Parallelism& p) {
  return p.experts_exchanged && is_expert_weight(name);
}

ExpertRange local_experts(const ModelConfig& c, const Parallelism& tp) {
  if (!c.moe) return {};
  if (tp.experts_exchanged) {
    const int64_t count = c.moe->num_experts / tp.fsdp_size;
    return {tp.fsdp_rank * count, count};
  }
  if (!tp.expert_parallel) return {0, c.moe->num_experts};
  const int64_t count = c.moe->num_experts / tp.size;
  return {tp.rank * count, count};
}

std::string expert_weight_on_rank(const std::string& name, int rank, const ModelConfig& c,
                                  const Parallelism& tp) {
  const auto [begin, end] = expert_index_at(name);
  const ExpertRange mine = local_experts(c, tp);
  const int64_t expert = std::stoll(name.substr(begin, end - begin));
  // `rank` counts within the group the experts are split over.
  const int64_t theirs = rank * mine.count + (expert - mine.first);
  return name.substr(0, begin) + std::to_string(theirs) + name.substr(end);
}

void check_tensor_parallel(const ModelConfig& c, const Parallelism& tp, const std::string& source) {
  const int ep_size = tp.experts_exchanged ? tp.fsdp_size : tp.size;
  if ((tp.expert_parallel || tp.experts_exchanged) && !c.moe) {
    throw Error(source + ": ep_size=" + std::to_string(ep_size) + " needs a mixture-of-experts " +
                "model; " + c.architecture + " has no experts");
  }
  if (tp.experts_exchanged && c.moe->num_experts % ep_size != 0) {
    throw Error(source + ": ep_size=" + std::to_string(ep_size) +
                " does not divide num_experts=" + std::to_string(c.moe->num_experts));
  }
  if (tp.size == 1) return;
  if (c.moe && !tp.expert_parallel) {
    throw Error(source + ": tp_size=" + std::to_string(tp.size) +
                " on a mixture-of-experts model splits its experts too: set ep_size=" +
                std::to_string(tp.size));
  }
  if (c.moe && c.moe->num_experts % tp.size != 0) {
    throw Error(source + ": ep_size=" + std::to_string(tp.size) +
                " does not divide num_experts=" + std::to_string(c.moe->num_experts));
  }
  check_split(c.num_attention_heads, "num_attention_heads", tp, source);
  if (c.num_key_value_heads % tp.size != 0 && tp.size % c.num_key_value_heads != 0) {
    throw Error(source + ": tp_size=" + std::to_string(tp.size) +
                " and num_key_value_heads=" + std::to_string(c.num_key_value_heads) +
                ": one must divide the other (KV heads are split, or replicated when fewer)");
  }
  const bool dense_mlp =
      !c.moe || !c.moe->mlp_only_layers.empty() || c.moe->decoder_sparse_step > 1;
  if (dense_mlp) check_split(c.intermediate_size, "intermediate_size", tp, source);
}

int64_t vocabulary_shard_rows(int64_t vocab_size, const Parallelism& tp) {
  return (vocab_size + tp.size - 1) / tp.size;
}

Parallelism with_kv_replicas(Parallelism tp, const ModelConfig& config) {
  tp.kv_replicas = static_cast<int>(std::max<int64_t>(1, tp.size / config.num_key_value_heads));
  return tp;
}

ModelConfig local_config(const ModelConfig& config, const Parallelism& tp) {
  ModelConfig local = config;
  local.num_attention_heads = config.num_attention_heads / tp.size;
  local.num_key_value_heads = std::max<int64_t>(1, config.num_key_value_heads / tp.size);
  return local;
}

Tensor tensor_parallel_unshard(const std::string& name, const Tensor& gathered,
                               const Shape& shard_shape, const ModelConfig& c,
                               const Parallelism& tp) {
  const int64_t per_rank = shape_numel(shard_shape);
  const auto shard = [&](int64_t r) { return gathered.slice(r * per_rank, (r + 1) * per_rank); };
  const Split split = split_of(name);
  if (split == Split::kReplicated || split == Split::kFirstRank || split == Split::kExpert) {
    return shard(0).clone().view(shard_shape);
  }
  // The ranks whose shards are distinct: all, or one per KV head where heads are replicated.
  const int64_t step =
      is_kv(name) && c.num_key_value_heads < tp.size ? tp.size / c.num_key_value_heads : 1;
  const int64_t parts = tp.size / step;
  if (split == Split::kRows) {
    Shape full = shard_shape;
    full[0] *= parts;
    Tensor out = Tensor::empty(full, gathered.dtype());
    const size_t bytes = static_cast<size_t>(per_rank) * dtype_size(gathered.dtype());
    for (int64_t p = 0; p < parts; ++p) {
      std::memcpy(static_cast<char*>(out.data()) + p * bytes, shard(p * step).data(), bytes);
    }
    // The last shards' padding rows go (tensor_parallel_shard).
    return is_vocabulary(name) ? out.slice(0, c.vocab_size).clone() : out;
  }
  const int64_t rows = shard_shape[0], width = shard_shape[1];
  Tensor out = Tensor::empty({rows, width * tp.size}, gathered.dtype());
  const size_t elem = dtype_size(gathered.dtype());
  for (int64_t p = 0; p < tp.size; ++p) {
    const auto* src = static_cast<const char*>(shard(p).data());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(out.data()) +
                      static_cast<size_t>(r * width * tp.size + p * width) * elem,
                  src + static_cast<size_t>(r * width) * elem, static_cast<size_t>(width) * elem);
    }
  }
  return out;
}

Tensor fsdp_shard(const std::string& name, const Tensor& slice, const Parallelism& p) {
  if (p.fsdp_size == 1) return slice;
  TFM_CHECK(slice.ndim() >= 1, "fsdp_shard: '" + name + "' has no rows");
  const int64_t block = (slice.dim(0) + p.fsdp_size - 1) / p.fsdp_size;
  return padded_rows(slice, p.fsdp_rank * block, block);
}

Tensor rank_slice(const std::string& name, const Tensor& full, const ModelConfig& config,
                  const Parallelism& p) {
  if (held_whole(name, p)) return full;
  // A row-parallel weight keeps every row on each tensor-parallel rank: taking the FSDP block
  // first copies only that block's columns.
  if (p.size > 1 && split_of(name) == Split::kColumns) {
    return tensor_parallel_shard(name, fsdp_shard(name, full, p), config, p);
  }
  return fsdp_shard(name, tensor_parallel_shard(name, full, config, p), p);
}

Tensor fsdp_unshard(const std::string& name, const Tensor& gathered, const Shape& block_shape,
                    const Parallelism& p) {
  Shape whole = block_shape;
  whole[0] *= p.fsdp_size;
  const auto unpadded = p.unpadded_rows.find(name);
  const Tensor all = gathered.view(whole);
  return unpadded == p.unpadded_rows.end() ? all : all.slice(0, unpadded->second);
}

bool holds_first_copy(const std::string& name, const Parallelism& tp) {
  if (split_of(name) == Split::kReplicated) return tp.rank == 0;
  if (is_kv(name)) return tp.rank % tp.kv_replicas == 0;
  return true;
}

graph::ValueId tensor_parallel_grad(graph::Builder& b, graph::ValueId grad, const std::string& name,
                                    const Parallelism& tp) {
  if (tp.size == 1) return grad;
  // A KV head held by several ranks: each saw only its own query heads' share of the gradient.
  if (is_kv(name) && tp.kv_replicas > 1) return b.sum_over_replicas(grad, tp.kv_replicas, tp.group);
  // q and k norms serve only this rank's heads; a router's gradient reaches it from this rank's
  // experts only.
  if (ends_with(name, "q_norm.weight") || ends_with(name, "k_norm.weight") || is_router(name)) {
    return b.all_reduce(grad, tp.group);
  }
  if (split_of(name) == Split::kFirstRank && tp.rank != 0) return b.scale(grad, 0.f);
  return grad;
}

int64_t tensor_parallel_rows(const std::string& name, const Shape& full, const ModelConfig& c,
                             const Parallelism& tp) {
  if (tp.size == 1 || split_of(name) != Split::kRows) return full.at(0);
  if (is_kv(name) && c.num_key_value_heads < tp.size) return c.head_dim;
  if (is_vocabulary(name)) return vocabulary_shard_rows(full.at(0), tp);
  return full.at(0) / tp.size;
}

Tensor tensor_parallel_shard(const std::string& name, const Tensor& full, const ModelConfig& c,
                             const Parallelism& tp) {
  if (tp.size == 1) return full;
  switch (split_of(name)) {
    case Split::kReplicated:
    case Split::kExpert:
      return full;
    case Split::kFirstRank:
      return tp.rank == 0 ? full : Tensor::zeros(full.shape(), full.dtype());
    case Split::kColumns: {
      const int64_t width = full.dim(1) / tp.size;
      return columns(full, tp.rank * width, (tp.rank + 1) * width);
    }
    case Split::kRows:
      break;
  }
  if (is_kv(name) && c.num_key_value_heads < tp.size) {
    const int64_t ranks_per_head = tp.size / c.num_key_value_heads;
    const int64_t head = tp.rank / ranks_per_head;
    return full.slice(head * c.head_dim, (head + 1) * c.head_dim);
  }
  if (is_vocabulary(name)) {
    const int64_t rows = vocabulary_shard_rows(full.dim(0), tp);
    return padded_rows(full, tp.rank * rows, rows);
  }
  const int64_t rows = full.dim(0) / tp.size;
  return full.slice(tp.rank * rows, (tp.rank + 1) * rows);
}

graph::Partitioning partitioning(int tp_size, int fsdp_size) {
  graph::Partitioning p;
  p.axes = {{"fsdp", fsdp_size}, {"tp", tp_size}};
  p.split = [](const graph::Node& n) -> std::vector<std::vector<std::string>> {
    const bool matrix = n.shape.size() == 2;
    if (n.op == graph::Op::kWeight) {
      switch (split_of(n.name)) {
        case Split::kRows:
          return matrix ? std::vector<std::vector<std::string>>{{"tp"}, {"fsdp"}}
                        : std::vector<std::vector<std::string>>{{"tp"}};
        case Split::kColumns:
          return {{"fsdp"}, {"tp"}};
        default:
          return {};  // norms, a row-parallel layer's bias, RoPE's frequencies: small, whole
      }
    }
    if (n.is_state && ends_with(n.name, "_cache")) return {{"fsdp"}, {}, {"tp"}};  // [B, L, H, D]
    if (n.name == "input_ids" || n.name == "position_ids" || n.name == "attention_mask" ||
        n.name == "targets") {
      return {{"fsdp"}};
    }
    return {};
  };
  return p;
}

graph::Mesh device_mesh(const Parallelism& p, const Device& device) {
  graph::Mesh mesh;
  const int world = p.size * p.fsdp_size;
  if (world == 1) return mesh;
  mesh.rank = p.fsdp_rank * p.size + p.rank;
  for (int r = 0; r < world; ++r) {
    mesh.devices.push_back(device.type == "cpu" ? kCpu
                                                : Device{device.type, r % p.local_world_size});
  }
  return mesh;
}

}  // namespace tfm::models
