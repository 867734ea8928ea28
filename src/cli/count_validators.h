// Validators for counts given on the command line, whose refusals say the rule in words (CLI11's
// PositiveNumber prints its range as "0.000000 to 1797693...", 300 digits).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tfm::cli {

// A whole number of at least `least`.
inline CLI::Validator at_least(long long least) {
  return CLI::Validator(
      [least](std::string& text) -> std::string {
        long long value = 0;
        size_t used = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || text.empty()) return "'" + text + "' is not a whole number";
        if (value < least) {
          return "must be " + std::to_string(least) + " or more, got " + text;
        }
        return "";
      },
      ">= " + std::to_string(least));
}

}  // namespace tfm::cli
