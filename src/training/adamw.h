// AdamW as torch.optim.AdamW computes it (decoupled weight decay, bias correction, eps added after
// the square root), over flat f32 buffers: every parameter, gradient and moment lives in one array
// each, so the update is one loop and sharding the optimizer later is offset arithmetic.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

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

class AdamW {
 public:
  // `segments` may leave gaps: elements outside every segment are frozen (never updated).
  AdamW(std::vector<ParamSegment> segments, int64_t total, AdamWOptions options = {});

  // One update of `params` from `grads` (both `total` elements) at learning rate `lr`, which is
  // options().lr times the schedule's multiplier for steps_taken().
  void step(std::span<float> params, std::span<const float> grads, double lr);
  void step(std::span<float> params, std::span<const float> grads) {
    step(params, grads, options_.lr);
  }

  int64_t steps_taken() const { return steps_; }
  int64_t total() const { return total_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamSegment>& segments() const { return segments_; }
  std::span<const float> exp_avg() const { return exp_avg_; }
  std::span<const float> exp_avg_sq() const { return exp_avg_sq_; }

  // The moments and the step count (which is also the schedule's position), so a resumed run
  // continues bit for bit. load() throws tfm::Error naming the file and what does not fit.
  void save(const std::filesystem::path& file) const;
  void load(const std::filesystem::path& file);

 private:
  // A run of elements with one decay setting, at most a fixed size, so one parallel loop over
  // chunks covers every segment however many small ones there are.
  struct Chunk {
    int64_t begin, end;
    bool decay;
  };

  std::vector<ParamSegment> segments_;
  std::vector<Chunk> chunks_;
  int64_t total_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  std::vector<float> exp_avg_;     // [total]
  std::vector<float> exp_avg_sq_;  // [total]
};

}  // namespace tfm::training
