// The basic ops each fused op stands for: what the fused kernels are tested against, and what a
// backend without a kernel for one runs. The kernel backends' passes (src/fusion) make the fused
// ops from these same basic ops.
//   kQkvLinear        three linears of the (normed) rows, their outputs flattened and concatenated
//   kGatedLinear      mul(silu(linear(h, w_gate)), linear(h, w_up)), h the (normed) rows
//   kPrepareAttention rope(rms_norm(q)), rope(rms_norm(k)) (norms where given), and k and v
//                     written into the caches by cache_write; later reads of a cache see the writes
//   normed kRope      rope(rms_norm(x))
//   kLinear + residual  add(linear(x, w, bias), residual)
// The folds the kernel backends make in training graphs (gradients added in place, a loss written
// with its gradient, paired elementwise chains) are forms of the backward ops their flags name,
// made and run inside one backend's plan; decompose leaves them as they are.
#pragma once

#include "graph/graph.h"

namespace tfm::ops {

graph::Graph decompose(const graph::Graph& fused);

}  // namespace tfm::ops
