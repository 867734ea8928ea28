// What the CUDA kernels tell the fusion passes and the planner, and the passes the backend runs.
#pragma once

#include "fusion/pipeline.h"
#include "fusion/target.h"

namespace tfm::cuda {

const fusion::Target& cuda_target();
fusion::Pipeline cuda_pipeline();

}  // namespace tfm::cuda
