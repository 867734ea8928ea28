#include "training/distributed_training.h"

#include <cmath>

#include "distributed/parallel_groups.h"
#include "models/tensor_parallel.h"

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

DistributedTraining::DistributedTraining(const CausalLMImpl& model, const FlatParameters& params) {
  const DistributedConfig& config = model.distributed();
  if (model.partitioning().devices() > 1) {
    // One process runs the partitioned program: its global batch holds every FSDP rank's rows.
    partitioned_data_ranks_ = config.fsdp_size;
  } else {
    const distributed::ParallelGroups& groups = distributed::parallel_groups(config);
    if (config.tp_size > 1) tp_ = groups.tp;
    if (config.fsdp_size > 1) fsdp_ = groups.fsdp;
    world_rank_ = groups.world ? groups.world->rank() : 0;
  }
  writes_files_ = world_rank_ == 0;
  std::vector<ParamSegment> counted;
  for (const FlatParameters::Entry& e : params.entries()) {
    if (!models::holds_first_copy(e.name, model.parallelism())) continue;
    // Neighbours merged: one sum a run of them.
    if (!counted.empty() && counted.back().offset + counted.back().numel == e.offset) {
      counted.back().numel += shape_numel(e.shape);
    } else {
      counted.push_back({e.offset, shape_numel(e.shape), true});
    }
  }
  squares_ = std::make_unique<GradSquares>(std::move(counted), params.size(), params.device(),
                                           model.partitioning());
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

void DistributedTraining::barrier() const {
  if (tp_) tp_->barrier();
  if (fsdp_) fsdp_->barrier();
}

double DistributedTraining::sum_over_data(double value) const {
  if (!fsdp_) return value;
  Tensor t = Tensor::from_vector(std::vector<float>{static_cast<float>(value)}, {1});
  fsdp_->all_reduce(t);
  return t.to_f32_vector()[0];
}

double DistributedTraining::grad_norm(const Tensor& grads) const {
  float total = (*squares_)(grads);
  if (tp_) tp_->all_reduce_sum(&total, 1);
  if (fsdp_) fsdp_->all_reduce_sum(&total, 1);
  return std::sqrt(static_cast<double>(total));
}

}  // namespace tfm::training
