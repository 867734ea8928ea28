// The device-side twin of a host process group: NCCL over the same ranks, for collectives on GPU
// buffers inside compiled graphs (tensor parallel and FSDP on CUDA). It starts from an id rank 0
// makes and broadcasts over the host group. NCCL calls are asynchronous and a dead peer would
// stall them for ever, so waiting on a stream that carries them goes through
// synchronize_with_timeout: past the group's timeout the communicators are aborted and the wait
// is a tfm::Error. Builds without NCCL refuse collectives on CUDA with an error saying so.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "graph/communicator.h"

namespace tfm::cuda {

class NcclGroup {
 public:
  virtual ~NcclGroup() = default;
  // `out` may equal `in` for all_reduce_sum. Counts are f32 elements per rank, as in
  // graph::Communicator.
  virtual void all_reduce_sum(const float* in, float* out, size_t count, cudaStream_t stream) = 0;
  virtual void all_gather(const float* in, size_t count, float* out, cudaStream_t stream) = 0;
  virtual void reduce_scatter_sum(const float* in, size_t count, float* out,
                                  cudaStream_t stream) = 0;
  // Block r of `in` (count floats each) to rank r; block r of `out` from rank r.
  virtual void all_to_all(const float* in, size_t count, float* out, cudaStream_t stream) = 0;
};

// The twin of `host`, made on first use (collectively: every rank of `host` must ask for it at
// the same point, as compiling the same graph does) and kept for the life of the process.
NcclGroup& nccl_group(graph::Communicator& host);

// cudaStreamSynchronize, bounded by the timeout of every NCCL group made so far when there is one.
void synchronize_with_timeout(cudaStream_t stream);

}  // namespace tfm::cuda
