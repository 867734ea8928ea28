#include "training/distributed_training.h"

#include <cmath>

#include "distributed/parallel_groups.h"
#include "graph/backend.h"
#include "models/tensor_parallel.h"
#include "training/grad_clip.h"

namespace tfm::training {
namespace {

Tensor rows_padded(const Tensor& t, int64_t first, int64_t count, int64_t rows, int32_t fill) {
  const int64_t cols = t.dim(1);
  std::vector<int32_t> values(static_cast<size_t>(rows * cols), fill);
  const int32_t* src = t.data_as<int32_t>();
  std::copy(src + first * cols, src + (first + count) * cols, values.begin());
  return Tensor::from_vector(values, {rows, cols});
}

}  // namespace

DistributedTraining::DistributedTraining(const CausalLMImpl& model, const FlatParameters& params)
    : device_(params.device()) {
  const DistributedConfig& config = model.distributed();
  const distributed::ParallelGroups& groups = distributed::parallel_groups(config);
  if (config.tp_size > 1) tp_ = groups.tp;
  if (config.fsdp_size > 1) fsdp_ = groups.fsdp;
  world_rank_ = groups.world ? groups.world->rank() : 0;
  writes_files_ = world_rank_ == 0;
  for (const FlatParameters::Entry& e : params.entries()) {
    if (!models::holds_first_copy(e.name, model.parallelism())) continue;
    // Neighbours merged: on a GPU each run's sum is one synchronizing call.
    if (!counted_.empty() && counted_.back().offset + counted_.back().numel == e.offset) {
      counted_.back().numel += shape_numel(e.shape);
    } else {
      counted_.push_back({e.offset, shape_numel(e.shape), true});
    }
  }
}

Batch DistributedTraining::local_rows(const Batch& global, int64_t per_rank) const {
  if (!fsdp_) return global;
  const int64_t available = global.input_ids.dim(0);
  const int64_t first = std::min(available, data_rank() * per_rank);
  const int64_t count = std::min(per_rank, available - first);
  Batch local = global;
  local.input_ids = rows_padded(global.input_ids, first, count, per_rank, 0);
  local.attention_mask = rows_padded(global.attention_mask, first, count, per_rank, 1);
  local.labels = rows_padded(global.labels, first, count, per_rank, kIgnoreIndex);
  return local;
}

double DistributedTraining::sum_over_data(double value) const {
  if (!fsdp_) return value;
  Tensor t = Tensor::from_vector(std::vector<float>{static_cast<float>(value)}, {1});
  fsdp_->all_reduce(t);
  return t.to_f32_vector()[0];
}

double DistributedTraining::grad_norm(std::span<const float> grads) const {
  if (!active()) return training::grad_norm(grads, device_);
  graph::Backend& backend = graph::backend_for(device_);
  double sum_sq = 0;
  for (const ParamSegment& s : counted_)
    sum_sq += backend.sum_squares(grads.data() + s.offset, s.numel);
  float total = static_cast<float>(sum_sq);
  if (tp_) tp_->all_reduce_sum(&total, 1);
  if (fsdp_) fsdp_->all_reduce_sum(&total, 1);
  return std::sqrt(static_cast<double>(total));
}

}  // namespace tfm::training
