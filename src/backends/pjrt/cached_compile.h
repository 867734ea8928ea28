// A module compiled by the client, or loaded from the compile cache when an earlier run of the
// same plugin compiled it with the same options.
#pragma once

#include <string>

#include "backends/pjrt/client.h"
#include "backends/pjrt/compile_cache.h"

namespace tfm::pjrt {

struct Compiled {
  LoadedExecutable executable;
  bool from_cache = false;
};

// `cache` null: no cache. An entry the plugin cannot load is removed, said, and compiled again.
Compiled compile_cached(const Client& client, const CompileCache* cache, const std::string& mlir,
                        const std::string& compile_options);

}  // namespace tfm::pjrt
