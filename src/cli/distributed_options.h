// --tp-size and --fsdp-size for the commands that load a model, and which rank prints: under
// tfmrun (or torchrun) rank 0 alone prints results, so a job's output reads as one process's.
#pragma once

#include <CLI/CLI.hpp>

#include "tfm/model.h"

namespace tfm::cli {

void add_distributed_options(CLI::App* cmd, DistributedConfig& config);
bool prints_results();  // RANK unset or 0

}  // namespace tfm::cli
