// The training progress line: steps done, loss, tokens/s and time left, redrawn in place on a
// terminal (and quiet otherwise: the logs carry the same figures).
#pragma once

#include <chrono>
#include <cstdint>

namespace tfm::training {

class ProgressBar {
 public:
  ProgressBar(int64_t first_step, int64_t total_steps, bool enabled);
  void update(int64_t step, double loss, double tokens_per_s);
  void finish();

 private:
  int64_t first_step_, total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tfm::training
