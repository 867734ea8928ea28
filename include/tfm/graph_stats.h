// What a model's graph cache has done: compilations, hits and their cost.
#pragma once

#include <cstddef>

namespace tfm {

struct GraphCacheStats {
  int compiles = 0;
  int hits = 0;
  int loads = 0;  // graphs a compiler backend loaded from its on-disk cache instead of compiling
  double compile_ms = 0;
  size_t arena_bytes = 0;  // largest activation arena among compiled graphs
};

}  // namespace tfm
