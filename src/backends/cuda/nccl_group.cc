#include "backends/cuda/nccl_group.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_status.h"
#include "core/device_registry.h"
#include "tfm/device.h"
#include "tfm/error.h"

#if TFM_NCCL
#include "backends/cuda/nccl_library.h"
#endif

namespace tfm::cuda {
namespace {

#if TFM_NCCL

void check(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  throw Error(std::string("NCCL call ") + call + " failed: " + nccl().GetErrorString(status) +
              " (" + nccl().GetLastError(nullptr) + ")");
}
#define TFM_NCCL_CALL(call) check((call), #call)

class Nccl final : public NcclGroup {
 public:
  explicit Nccl(graph::Communicator& host) : size_(host.size()), timeout_(host.timeout()) {
    ncclUniqueId id{};
    if (host.rank() == 0) TFM_NCCL_CALL(nccl().GetUniqueId(&id));
    // The host group's rendezvous has a timeout: every rank is alive and here once this returns.
    host.broadcast_bytes(&id, sizeof id, 0);
    // NCCL binds the communicator to the current device: this process's.
    TFM_CUDA(cudaSetDevice(process_accelerator_index()));
    TFM_NCCL_CALL(nccl().CommInitRank(&comm_, host.size(), id, host.rank()));
  }

  void all_reduce_sum(const float* in, float* out, size_t count, cudaStream_t stream) override {
    TFM_NCCL_CALL(nccl().AllReduce(in, out, count, ncclFloat, ncclSum, comm_, stream));
  }
  void all_gather(const float* in, size_t count, float* out, cudaStream_t stream) override {
    TFM_NCCL_CALL(nccl().AllGather(in, out, count, ncclFloat, comm_, stream));
  }
  void reduce_scatter_sum(const float* in, size_t count, float* out, cudaStream_t stream) override {
    TFM_NCCL_CALL(nccl().ReduceScatter(in, out, count, ncclFloat, ncclSum, comm_, stream));
  }
  // NCCL has no all-to-all of its own: a send and a receive with every rank, grouped.
  void all_to_all(const float* in, size_t count, float* out, cudaStream_t stream) override {
    TFM_NCCL_CALL(nccl().GroupStart());
    for (int r = 0; r < size_; ++r) {
      const size_t at = static_cast<size_t>(r) * count;
      TFM_NCCL_CALL(nccl().Send(in + at, count, ncclFloat, r, comm_, stream));
      TFM_NCCL_CALL(nccl().Recv(out + at, count, ncclFloat, r, comm_, stream));
    }
    TFM_NCCL_CALL(nccl().GroupEnd());
  }

  std::chrono::milliseconds timeout() const { return timeout_; }
  // A failure NCCL noticed on its own (a peer's connection dropped), as text; empty when none.
  std::string async_error() const {
    ncclResult_t status = ncclSuccess;
    if (nccl().CommGetAsyncError(comm_, &status) != ncclSuccess || status == ncclSuccess ||
        status == ncclInProgress) {
      return {};
    }
    return nccl().GetErrorString(status);
  }
  // Ends every operation still queued on the communicator, so the stream can drain. The
  // communicator is freed: later calls get a null one (an NCCL error), not freed memory.
  void abort() {
    nccl().CommAbort(comm_);
    comm_ = nullptr;
  }
  int size() const { return size_; }

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
};

// Communicators live for the process: destroying them at exit could wait on peers already gone.
struct Registry {
  std::mutex mutex;
  std::map<const graph::Communicator*, Nccl*> groups;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

std::vector<Nccl*> all_groups() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<Nccl*> groups;
  for (const auto& entry : r.groups) groups.push_back(entry.second);
  return groups;
}

[[noreturn]] void abort_all(const std::vector<Nccl*>& groups, const std::string& why) {
  for (Nccl* g : groups) g->abort();
  throw Error("[nccl] " + why + ": a peer died or stalled; the NCCL communicators were aborted");
}

#endif  // TFM_NCCL

}  // namespace

#if TFM_NCCL

NcclGroup& nccl_group(graph::Communicator& host) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.groups.find(&host);
    if (it != r.groups.end()) return *it->second;
  }
  auto* group = new Nccl(host);
  std::lock_guard<std::mutex> lock(r.mutex);
  r.groups[&host] = group;
  return *group;
}

void synchronize_with_timeout(cudaStream_t stream) {
  const std::vector<Nccl*> groups = all_groups();
  if (groups.empty()) {
    TFM_CUDA(cudaStreamSynchronize(stream));
    return;
  }
  std::chrono::milliseconds limit = groups.front()->timeout();
  for (const Nccl* g : groups) limit = std::min(limit, g->timeout());
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status != cudaErrorNotReady) {
      TFM_CUDA(status);
      return;
    }
    // "Not ready" is recorded as the thread's last error: left there, the next kernel launch's
    // check would report it as that launch's failure.
    cudaGetLastError();
    for (const Nccl* g : groups) {
      const std::string error = g->async_error();
      if (!error.empty())
        abort_all(groups, "a collective over " + std::to_string(g->size()) + " ranks failed (" +
                              error + ")");
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > limit) {
      abort_all(groups, "a collective did not finish within the timeout of " +
                            std::to_string(limit.count()) + " ms");
    }
    // Spin briefly (a decode step waits well under a millisecond), then poll gently.
    if (waited < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

#else

NcclGroup& nccl_group(graph::Communicator&) {
  throw Error(
      "[cuda] collectives on GPU buffers need NCCL, which this build lacks (nccl.h was not found "
      "when it was configured): run tensor-parallel and FSDP graphs with device_map=\"cpu\"");
}

void synchronize_with_timeout(cudaStream_t stream) { TFM_CUDA(cudaStreamSynchronize(stream)); }

#endif  // TFM_NCCL

}  // namespace tfm::cuda
