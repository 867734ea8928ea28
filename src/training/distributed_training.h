// What the Trainer does differently under the model's DistributedConfig: each FSDP rank trains on
// its share of every global batch (per_device_train_batch_size rows, as torch's
// DistributedSampler deals them), tensor-parallel ranks on the same rows; losses are summed over
// the FSDP ranks (the gradients already are: the step's graph reduce-scatters them onto each
// rank's shard); the gradient norm is the whole model's; rank 0 alone writes the shared files.
// Without a DistributedConfig every call is the single-process answer; so it is on a device that
// runs the config as one partitioned program, whose global batch holds every FSDP rank's rows.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "distributed/process_group.h"
#include "training/adamw.h"
#include "training/dataset_loader.h"
#include "training/flat_parameters.h"
#include "training/grad_clip.h"

namespace tfm::training {

class DistributedTraining {
 public:
  DistributedTraining(const CausalLMImpl& model, const FlatParameters& params);

  int data_ranks() const { return fsdp_ ? fsdp_->size() : partitioned_data_ranks_; }
  bool writes_files() const { return writes_files_; }
  bool active() const { return tp_ != nullptr || fsdp_ != nullptr; }
  int tp_rank() const { return tp_ ? tp_->rank() : 0; }
  int data_rank() const { return fsdp_ ? fsdp_->rank() : 0; }
  int world_rank() const { return world_rank_; }

  // This rank's `per_rank` rows of a global batch. A short last batch leaves some ranks rows
  // short: those are filled with rows that carry no target, so every rank runs the same graph.
  Batch local_rows(const Batch& global, int64_t per_rank) const;
  double sum_over_data(double value) const;
  // Every rank of the job waits for all the others (its tensor-parallel group, then its FSDP
  // group: over the grid, that is everyone).
  void barrier() const;
  // The L2 norm of the whole model's gradient from this rank's shard of it (the flat gradients):
  // squares summed over every rank, values that several tensor-parallel ranks hold (norms,
  // replicated KV heads) counted once.
  double grad_norm(const Tensor& grads) const;

 private:
  std::shared_ptr<distributed::ProcessGroup> tp_, fsdp_;  // null where that dimension is 1
  int partitioned_data_ranks_ = 1;  // the FSDP size of a partitioned program
  bool writes_files_ = true;
  int world_rank_ = 0;
  std::unique_ptr<GradSquares> squares_;  // over the gradient ranges this rank's norm counts
};

}  // namespace tfm::training
