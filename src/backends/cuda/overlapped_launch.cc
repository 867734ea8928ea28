#include "backends/cuda/overlapped_launch.h"

#include <cstdlib>
#include <string>

namespace tfm::cuda {

bool overlapped_launch_supported(const void* kernel) {
  static const bool supported = [kernel] {
    const char* setting = std::getenv("TFM_CUDA_OVERLAP");
    if (setting != nullptr && std::string(setting) == "0") return false;
    cudaFuncAttributes attributes{};
    TFM_CUDA(cudaFuncGetAttributes(&attributes, kernel));
    return attributes.binaryVersion >= 90;
  }();
  return supported;
}

}  // namespace tfm::cuda
