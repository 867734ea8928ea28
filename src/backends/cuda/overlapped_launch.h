// Programmatic dependent launch (sm_90 and later): a kernel launched this way may be scheduled
// while the stream's previous kernel is still running, so the gap between the small kernels of a
// decode step (launch latency, block start-up) overlaps the work before it. Every kernel launched
// here first calls let_next_kernels_start() and, before it reads what earlier kernels write,
// wait_for_previous_kernels() (device_math.cuh); kernels after it rely on that too (a kernel's
// end implies every earlier kernel's), so none may return before the wait. Before the wait a
// kernel may read only what no kernel of the step writes: the decode products read a graph's
// constant weights there (WeightReads in kernels.h), never ones an earlier step gathered or cast,
// and fused decode attention its first keys (FreshToken::keys_before_wait).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/cuda_status.h"

namespace tfm::cuda {

// Whether the kernels run as built for sm_90 or later, where wait_for_previous_kernels() waits: a
// build for an older architecture JIT-compiled on a newer GPU would skip the wait. The kernels of
// one build share their architecture, so the first launch decides.
bool overlapped_launch_supported(const void* kernel);

template <typename... Params, typename... Args>
void launch_overlapped(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                       size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = overlapped_launch_supported(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), name);
}

}  // namespace tfm::cuda
