// The group of processes a collective node runs over. Backends call it when they run the node;
// distributed::ProcessGroup implements it (the graph layer sits below distributed/).
#pragma once

#include <chrono>
#include <cstddef>

namespace tfm::graph {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `data` across the group, in place. A dead or late peer throws tfm::Error.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // `out` holds size() x count floats: rank r's `in` at r * count.
  virtual void all_gather(const float* in, size_t count, float* out) = 0;
  // `in` holds size() x count floats; `out` gets this rank's `count` of their sum over the group.
  virtual void reduce_scatter_sum(const float* in, size_t count, float* out) = 0;
  // `in` and `out` hold size() x count floats: block r of `in` goes to rank r, block r of `out`
  // comes from rank r.
  virtual void all_to_all(const float* in, size_t count, float* out) = 0;
  // Copies `root`'s `bytes` at `data` to every rank (e.g. the NCCL id the CUDA backend's
  // device-side twin of this group starts from).
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;
  // How long a collective may wait for a peer before it is an error.
  virtual std::chrono::milliseconds timeout() const = 0;
};

}  // namespace tfm::graph
