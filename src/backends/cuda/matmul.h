// Matrix products through cuBLASLt: y[m, n] = x[m, k] · w[n, k]^T in f32, with x and w both f32
// or both bf16 (f32 accumulation); the backward pass also needs the other transposes. The
// algorithm is chosen once per shape, when a graph compiles.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "tfm/dtype.h"

namespace tfm::cuda {

// Workspace each product may use; the caller provides it.
inline constexpr size_t kMatmulWorkspaceBytes = size_t{32} << 20;

// A row-major operand as stored: transposed (op(a) = a^T) or not, and the alignment in bytes its
// address and row stride are sure to have (a view into a larger buffer may have less than the 256
// bytes of an allocation, which cuBLASLt assumes by default). Rows are `ld` elements apart (0: as
// many as a row holds); in a batch of products, the matrices are `stride` elements apart. `dtype`
// is y's (f32, or bf16 for autocast's narrowed products); a and b are of the Matmul's dtype.
struct MatmulOperand {
  bool transposed = false;
  uint32_t alignment = 256;
  int64_t ld = 0;
  int64_t stride = 0;
  DType dtype = DType::f32;
};

// Owns a cuBLASLt descriptor, so that one made before a later call throws is still destroyed.
template <auto destroy>
struct LtDestroyer {
  template <typename T>
  void operator()(T* descriptor) const {
    destroy(descriptor);
  }
};
template <typename Handle, auto destroy>
using LtOwned = std::unique_ptr<std::remove_pointer_t<Handle>, LtDestroyer<destroy>>;
using MatmulDesc = LtOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using MatrixLayout = LtOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using MatmulPreference = LtOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

class Matmul {
 public:
  // run(a, b, y) gives y[m, n] = op(a) · op(b), with op(a) [m, k] and op(b) [k, n]; a linear layer
  // is a = x [m, k] as stored and b = w [n, k] transposed. y is never transposed; `batch`
  // products run at once over the operands' strides.
  Matmul(int64_t m, int64_t n, int64_t k, DType dtype, MatmulOperand a, MatmulOperand b,
         MatmulOperand y = {}, int64_t batch = 1);

  // With an `addend` (laid out as y, and aligned as the y operand says; f32 y only), y =
  // op(a) · op(b) + addend.
  void run(const void* a, const void* b, void* y, void* workspace, cudaStream_t stream,
           const float* addend = nullptr) const;

 private:
  MatmulDesc op_;
  MatrixLayout b_layout_, a_layout_, y_layout_;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace tfm::cuda
