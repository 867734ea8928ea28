// AMX's tile registers as tfm's tile kernels use them: all eight 16 rows of 64 bytes (palette 1).
// Each thread that runs tile instructions loads this configuration first, and releases the tiles
// when done. Include only in code compiled for AMX (a target pragma), run only where cpu_isa()
// finds AMX-BF16.
#pragma once

#include "backends/cpu/simd_intrinsics.h"

#include <cstdint>

namespace tfm::cpu {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) inline void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

}  // namespace tfm::cpu
