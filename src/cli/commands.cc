#include "cli/commands.h"

#include <vector>

namespace tfm::cli {
namespace {

std::vector<CommandAdder>& adders() {
  static std::vector<CommandAdder> all;  // function-local: safe across static initializers
  return all;
}

}  // namespace

bool register_command(CommandAdder adder) {
  adders().push_back(adder);
  return true;
}

void add_all_commands(CLI::App& app) {
  for (CommandAdder adder : adders()) adder(app);
}

}  // namespace tfm::cli
