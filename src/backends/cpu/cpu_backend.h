#pragma once

#include "graph/backend.h"

namespace tfm::cpu {

graph::Backend& cpu_backend();

}  // namespace tfm::cpu
