#include "backends/cuda/overlapped_launch.h"

namespace tfm::cuda {

bool overlapped_launch_supported(const void* kernel) {
  static const bool supported = [kernel] {
    cudaFuncAttributes attributes{};
    TFM_CUDA(cudaFuncGetAttributes(&attributes, kernel));
    return attributes.binaryVersion >= 90;
  }();
  return supported;
}

}  // namespace tfm::cuda
