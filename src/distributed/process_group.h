// The ranks of a distributed job and the collectives between them: gloo over TCP for host
// tensors, rendezvous through the TcpStore that rank 0 serves. Every collective has the group's
// timeout: a dead peer gives a tfm::Error, never a hang.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "graph/communicator.h"
#include "tfm/tensor.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace tfm::distributed {

class TcpStore;

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per collective and rendezvous
};

class ProcessGroup : public graph::Communicator {
 public:
  // RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as tfmrun or torchrun set them; a missing or
  // malformed one is an error naming it.
  static ProcessGroupOptions options_from_environment();

  explicit ProcessGroup(const ProcessGroupOptions& options);
  ~ProcessGroup() override;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // A group of some of this group's ranks (in the given order), for the tensor-parallel and FSDP
  // dimensions. Only its members call it, each with the same `ranks` and a `name` unique in the
  // job; its rendezvous goes through this group's store.
  std::unique_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks, const std::string& name);

  // f32 host tensors, contiguous. all_reduce sums in place; all_gather concatenates every rank's
  // `in` along axis 0 into `out` (size x in); reduce_scatter sums `in` across ranks and keeps this
  // rank's 1/size slice of axis 0 in `out`; broadcast copies `root`'s tensor to every rank.
  void all_reduce(Tensor& tensor);
  void all_gather(const Tensor& in, Tensor& out);
  void reduce_scatter(const Tensor& in, Tensor& out);
  void broadcast(Tensor& tensor, int root);
  void barrier();

  void all_reduce_sum(float* data, size_t count) override;
  void all_gather(const float* in, size_t count, float* out) override;
  void reduce_scatter_sum(const float* in, size_t count, float* out) override;
  void all_to_all(const float* in, size_t count, float* out) override;
  void broadcast_bytes(void* data, size_t bytes, int root) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout,
               std::shared_ptr<TcpStore> store, std::string host);
  void connect(gloo::rendezvous::Store& store);

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<TcpStore> store_;  // shared with the subgroups
  std::string host_;                 // the address gloo binds to
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace tfm::distributed
