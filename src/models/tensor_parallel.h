// Tensor parallelism as Megatron-LM lays it out: q/k/v/gate/up split by output rows (column
// parallel), o/down by input columns (row parallel, an all_reduce after them), the embedding and
// lm_head by vocabulary rows (an all_reduce after the embedding, an all_gather of the logits).
// Each rank holds only its slices. A vocabulary the ranks do not divide is padded as Megatron-LM
// pads it: each rank holds ceil(V / size) rows, the last ones zero rows past id V, which the loss
// leaves out and the gathered logits drop.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "graph/builder.h"
#include "graph/mesh.h"
#include "io/model_config.h"
#include "tfm/tensor.h"

namespace tfm::models {

// How one process holds the model: its tensor-parallel slices (rank, size, group) and, under
// FSDP, only its block of rows of each slice, the rest gathered from the FSDP group where used.
struct Parallelism {
  int rank = 0;
  int size = 1;
  std::shared_ptr<const graph::CollectiveGroup> group;  // null when size == 1
  int fsdp_rank = 0;
  int fsdp_size = 1;
  std::shared_ptr<const graph::CollectiveGroup> fsdp_group;  // null when fsdp_size == 1
  int local_world_size = 1;  // ranks a node (the launcher's LOCAL_WORLD_SIZE)
  bool writes_files = true;  // rank 0 of the whole job saves checkpoints
  int kv_replicas = 1;       // ranks that hold each KV head (more than 1 when KV heads < size)
  // Experts split over the tensor-parallel ranks (DistributedConfig::ep_size == size): rank r
  // holds experts [r x E / size, (r + 1) x E / size) of every mixture-of-experts layer.
  bool expert_parallel = false;
  // Experts split over the FSDP ranks instead (DistributedConfig::ep_size == fsdp_size with
  // tp_size 1), which have their own rows: each rank holds E / fsdp_size experts whole, and every
  // rank's rows go to them and back by all-to-all.
  bool experts_exchanged = false;
  // FSDP blocks all have ceil(rows / fsdp_size) rows, the last ones padded with zero rows; this
  // maps each weight whose slice does not split evenly to its true number of rows.
  std::map<std::string, int64_t> unpadded_rows;
};

// A DistributedConfig as one program partitioned over tp x fsdp devices of a compiler backend
// (graph::Partitioning, mesh axes fsdp then tp): the weights split as the ranks of a job hold
// them (the tensor-parallel axis of each over "tp", the other over "fsdp"), the batch over
// "fsdp", the KV cache's heads over "tp".
graph::Partitioning partitioning(int tp_size, int fsdp_size);

// The device assignment of the job (graph::Mesh): rank r = fsdp_rank x size + rank computes on
// this process's kind of device, accelerator r % local_world_size on its node (tfmrun places
// LOCAL_RANK so); empty without a job.
graph::Mesh device_mesh(const Parallelism& p, const Device& device);

// Throws, naming `source` (config.json), when the heads, KV heads or MLP width do not split
// evenly over tp.size ranks, or the experts over the expert-parallel ones (a mixture-of-experts
// model splits its experts wherever it splits its heads). KV heads fewer than the ranks are
// replicated: each rank keeps the KV head its query heads use.
void check_tensor_parallel(const ModelConfig& config, const Parallelism& tp,
                           const std::string& source);
// The experts this rank holds of each mixture-of-experts layer: [first, first + count).
struct ExpertRange {
  int64_t first = 0, count = 0;
};
ExpertRange local_experts(const ModelConfig& config, const Parallelism& tp);
// Is `name` one expert's weight (held whole by the rank that owns the expert)?
bool is_expert_weight(const std::string& name);
// Does this rank hold `name` whole where FSDP would shard it (an expert split over the FSDP
// ranks)?
bool held_whole(const std::string& name, const Parallelism& p);
// `name`, an expert weight of this rank, as the same weight of the expert rank `rank` holds in
// its place (the one at the same position in its range).
std::string expert_weight_on_rank(const std::string& name, int rank, const ModelConfig& config,
                                  const Parallelism& tp);
// The rows of each rank's shard of the embedding and lm_head: ceil(vocab_size / tp.size).
int64_t vocabulary_shard_rows(int64_t vocab_size, const Parallelism& tp);
// The config as one rank sees it: its share of the attention and KV heads.
ModelConfig local_config(const ModelConfig& config, const Parallelism& tp);
// `tp` with kv_replicas set for `config`.
Parallelism with_kv_replicas(Parallelism tp, const ModelConfig& config);
// The rows of this rank's tensor-parallel slice of `name`, whose whole shape is `full`.
int64_t tensor_parallel_rows(const std::string& name, const Shape& full, const ModelConfig& config,
                             const Parallelism& tp);
// This rank's slice of the checkpoint tensor `name` (its full value `full`); a view of `full`
// where the slice is whole rows, a copy otherwise.
Tensor tensor_parallel_shard(const std::string& name, const Tensor& full, const ModelConfig& config,
                             const Parallelism& tp);
// The whole tensor `name` from every rank's shard of it, `gathered` holding them one after the
// other (rank order), each of shape `shard_shape`: the inverse of tensor_parallel_shard.
Tensor tensor_parallel_unshard(const std::string& name, const Tensor& gathered,
                               const Shape& shard_shape, const ModelConfig& config,
                               const Parallelism& tp);
// FSDP: this rank's block of ceil(rows / fsdp_size) rows of `slice` (its tensor-parallel slice
// of `name`), padded with zero rows where the slice ends inside or before it. Padding rows get
// zero gradients, so they stay zero through AdamW and add nothing to a gradient norm.
Tensor fsdp_shard(const std::string& name, const Tensor& slice, const Parallelism& p);
// What this rank holds of `name`: its FSDP block of its tensor-parallel slice of `full`.
Tensor rank_slice(const std::string& name, const Tensor& full, const ModelConfig& config,
                  const Parallelism& p);
// The tensor-parallel slice of `name` from every FSDP rank's block, `gathered` holding them in
// rank order (padding dropped).
Tensor fsdp_unshard(const std::string& name, const Tensor& gathered, const Shape& block_shape,
                    const Parallelism& p);
// Does this rank hold the first copy of its part of `name`? False where another tensor-parallel
// rank holds the same values: norm weights (whole on every rank) and replicated KV heads. A sum
// over the ranks (a gradient norm) counts each value once by counting first copies.
bool holds_first_copy(const std::string& name, const Parallelism& tp);
// The gradient of `name` as this rank must apply it, from `grad` (what autodiff gives this rank):
// weights used by only this rank's heads but held by others too (q_norm, k_norm; a KV head
// replicated over several ranks) sum over those ranks; a row-parallel bias that rank 0 alone
// carries gets none elsewhere.
graph::ValueId tensor_parallel_grad(graph::Builder& b, graph::ValueId grad, const std::string& name,
                                    const Parallelism& tp);

}  // namespace tfm::models
