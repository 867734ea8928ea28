// AdamW as torch.optim.AdamW computes it (decoupled weight decay, bias correction, eps added after
// the square root), over flat f32 buffers: every parameter, gradient and moment lives in one array
// each, so the update is a few runs of one op and sharding the optimizer is offset arithmetic.
// The buffers live on the optimizer's device (where the model trains); the update is a graph
// compiled for that device like the training step (graph::Op::kAdamW over views of the buffers),
// its per-step scalars the one input that moves.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "graph/backend.h"
#include "tfm/tensor.h"

namespace tfm::training {

// One parameter tensor's place in the flat buffer. The Trainer exempts biases and norm weights
// from weight decay; `decay = false` marks those.
struct ParamSegment {
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = true;
};

struct AdamWOptions {
  double lr = 1e-3;  // the base rate; a schedule scales it per step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// The update's graph: one kAdamW a run (segments of one decay setting, in offset order) over views
// of the flat buffers (inputs params, grads, exp_avg, exp_avg_sq, scalars); each written buffer's
// update is itself after every run. Frozen elements, outside every run, are read by no step.
graph::Graph update_graph(const std::vector<ParamSegment>& runs, int64_t total);

// A training step's partitioning (graph::Partitioning) as the graphs over its flat buffers of
// `total` elements (the optimizer's, the gradient norm's) take it: each such buffer split in
// equal runs over every device, as a compiler backend splits the buffer the step's weights are
// parts of, so the buffers stay where the step leaves them; anything else whole.
graph::Partitioning flat_partitioning(const graph::Partitioning& step, int64_t total);

class AdamW {
 public:
  // `segments` may leave gaps: elements outside every segment are frozen (never updated).
  // `partitioning`: that of the training step, whose flat buffers the update partitions alike.
  AdamW(std::vector<ParamSegment> segments, int64_t total, AdamWOptions options = {},
        Device device = kCpu, const graph::Partitioning& partitioning = {});

  // One update of `params` from `grads` (f32 [total] each, on the optimizer's device) at learning
  // rate `lr`, which is options().lr times the schedule's multiplier for steps_taken(). Each
  // gradient is read times `grad_scale`: clipping's coefficient (clip_coefficient), applied as the
  // update reads the gradients instead of in a pass over them of its own. `params` becomes the
  // buffer the run returns (graph::RunResult::state): the same one where the backend updates in
  // place.
  void step(Tensor& params, const Tensor& grads, double lr, float grad_scale = 1.f);
  // The same over host memory, for an optimizer on the cpu.
  void step(std::span<float> params, std::span<const float> grads, double lr,
            float grad_scale = 1.f);
  void step(std::span<float> params, std::span<const float> grads) {
    step(params, grads, options_.lr);
  }

  int64_t steps_taken() const { return steps_; }
  int64_t total() const { return total_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamSegment>& segments() const { return segments_; }
  // The moments, copied to the host.
  std::vector<float> exp_avg() const { return exp_avg_.to_f32_vector(); }
  std::vector<float> exp_avg_sq() const { return exp_avg_sq_.to_f32_vector(); }

  // The moments and the step count (which is also the schedule's position), so a resumed run
  // continues bit for bit. load() throws tfm::Error naming the file and what does not fit.
  void save(const std::filesystem::path& file) const;
  void load(const std::filesystem::path& file);

 private:
  std::vector<ParamSegment> segments_;
  std::vector<ParamSegment> runs_;  // the segments, neighbours with one decay setting merged
  int64_t total_;
  AdamWOptions options_;
  Device device_;
  int64_t steps_ = 0;
  Tensor exp_avg_;                             // f32 [total] on device_
  Tensor exp_avg_sq_;                          // f32 [total] on device_
  std::unique_ptr<graph::Executable> update_;  // one step over the runs
};

}  // namespace tfm::training
