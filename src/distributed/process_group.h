// The ranks of a distributed job and the collectives between them: gloo over TCP for host
// tensors, rendezvous through the TcpStore that rank 0 serves. Every collective has the group's
// timeout: a dead peer gives a tfm::Error, never a hang.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tfm/tensor.h"

namespace gloo {
class Context;
}

namespace tfm::distributed {

class TcpStore;

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per collective and rendezvous
};

class ProcessGroup {
 public:
  // RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as tfmrun or torchrun set them; a missing or
  // malformed one is an error naming it.
  static ProcessGroupOptions options_from_environment();

  explicit ProcessGroup(const ProcessGroupOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // f32 host tensors, contiguous. all_reduce sums in place; all_gather concatenates every rank's
  // `in` along axis 0 into `out` (size x in); reduce_scatter sums `in` across ranks and keeps this
  // rank's 1/size slice of axis 0 in `out`; broadcast copies `root`'s tensor to every rank.
  void all_reduce(Tensor& tensor);
  void all_gather(const Tensor& in, Tensor& out);
  void reduce_scatter(const Tensor& in, Tensor& out);
  void broadcast(Tensor& tensor, int root);
  void barrier();

 private:
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace tfm::distributed
