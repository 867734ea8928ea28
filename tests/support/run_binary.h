// Runs one of the project's programs as a user would, for the CLI tests.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tfm::testing {

struct Run {
  int status = -1;  // the exit code, or 128 + the signal that ended it
  std::string out, err;
};

// Spawns `program`, one of the binaries next to $TFM_BIN (the tfm binary, set by CTest), with
// `args` as argv (no shell, so texts with quotes and newlines pass unchanged), keeping stdout and
// stderr apart. nullopt when TFM_BIN is unset: the test was not run through ctest.
std::optional<Run> run_binary(const std::string& program, const std::vector<std::string>& args);
// The same with the test's environment changed for the program: each name set to its value, or
// removed where the value is nullopt.
using EnvChanges = std::map<std::string, std::optional<std::string>>;
std::optional<Run> run_binary(const std::string& program, const std::vector<std::string>& args,
                              const EnvChanges& env);

// The path of a program next to $TFM_BIN ("" when TFM_BIN is unset).
std::string binary_path(const std::string& program);
// A rendezvous port for a distributed test: its own per test process and `offset`, so parallel
// ctest runs do not meet in one store, and free when chosen.
std::string test_port(int offset);

}  // namespace tfm::testing
