// One launcher for the f32 and bf16 forms of a kernel: the dtype, known only at run time, picks
// the element type the kernel is instantiated with.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/cuda_status.h"

namespace tfm::cuda {

// The element type, passed as a value to a generic lambda.
template <typename T>
struct FloatType {
  using type = T;
};

// Calls `launch` with FloatType<float> or FloatType<__nv_bfloat16> as `dtype` says; any other
// dtype is an error naming `op`.
template <typename Launch>
void with_float_type(DType dtype, const char* op, Launch&& launch) {
  check_float_kind(dtype, op);
  if (dtype == DType::bf16) {
    launch(FloatType<__nv_bfloat16>{});
  } else {
    launch(FloatType<float>{});
  }
}

// Both of a kernel's element types: its input's (a bf16 product's output read as it is) and its
// output's, each as its dtype says.
template <typename Launch>
void with_float_types(DType in, DType out, const char* op, Launch&& launch) {
  with_float_type(in, op, [&](auto in_type) {
    with_float_type(out, op, [&](auto out_type) { launch(in_type, out_type); });
  });
}

}  // namespace tfm::cuda
