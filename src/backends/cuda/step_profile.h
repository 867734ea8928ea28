// KernelOptions::profile: a compiled graph runs step by step (no CUDA Graph) with an event before
// and after every step, and prints to stderr where the run's GPU time went, by op and output
// shape, largest first. For finding what to speed up on a GPU; off by default.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "graph/graph.h"

namespace tfm::cuda {

class StepProfile {
 public:
  StepProfile(const graph::Graph& graph, const std::vector<graph::ValueId>& schedule);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // Before step i of the schedule (and i = schedule size after the last).
  void mark(size_t i, cudaStream_t stream) const;
  // After the stream has finished the run.
  void report() const;

 private:
  const graph::Graph& graph_;
  const std::vector<graph::ValueId>& schedule_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace tfm::cuda
