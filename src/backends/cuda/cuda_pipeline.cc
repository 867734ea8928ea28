#include "backends/cuda/cuda_pipeline.h"

#include "backends/cuda/kernels.h"
#include "backends/cuda/steps.h"

namespace tfm::cuda {

const fusion::Target& cuda_target() {
  static const fusion::Target target{
      .name = "cuda",
      .writes_bf16 = fusion::default_writes_bf16,
      .elementwise = {.depth = kMaxEwDepth, .instrs = kMaxEwInstrs, .inputs = kMaxEwInputs},
      .alignment = kArenaAlignment};
  return target;
}

// Every pass: the fused decode attention (attention_fusion.h) is chosen when a step is made,
// from the plan's arena.
fusion::Pipeline cuda_pipeline() { return fusion::standard_pipeline(); }

}  // namespace tfm::cuda
