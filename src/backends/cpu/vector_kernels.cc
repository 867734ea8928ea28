#include "backends/cpu/vector_kernels.h"

#include "backends/cpu/cpu_isa.h"

namespace tfm::cpu {
namespace avx2 {
extern const VectorKernels kernels;
}
namespace avx512 {
extern const VectorKernels kernels;
}

std::vector<const VectorKernels*> runnable_vector_kernels() {
  std::vector<const VectorKernels*> sets{&avx2::kernels};
  if (cpu_isa().avx512) sets.push_back(&avx512::kernels);
  return sets;
}

const VectorKernels& vector_kernels() {
  static const VectorKernels* const best = runnable_vector_kernels().back();
  return *best;
}

}  // namespace tfm::cpu
