// Subcommands register themselves, so adding one touches only its own file:
//   static const bool kRegistered = tfm::cli::register_command(&add_generate_command);
#pragma once

#include <CLI/CLI.hpp>

namespace tfm::cli {

using CommandAdder = void (*)(CLI::App& app);

bool register_command(CommandAdder adder);
void add_all_commands(CLI::App& app);

}  // namespace tfm::cli
