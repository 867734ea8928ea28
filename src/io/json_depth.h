// A bound on how deeply the JSON tfm reads may nest (config.json, tokenizer files, indexes,
// datasets, chat messages): past it the parse fails as malformed JSON does, so no later step walks
// an unbounded depth recursively (serializing a value into an error message overflowed the stack
// at 100,000 levels).
#pragma once

#include <nlohmann/json.hpp>

namespace tfm {

// As deep as Python's json module reads before its default recursion limit stops it.
inline constexpr int kMaxJsonDepth = 1000;

// For nlohmann::json::parse(input, json_depth_limit()): throws nlohmann::json::parse_error past
// kMaxJsonDepth, which the callers' existing handling of malformed JSON reports.
inline nlohmann::json::parser_callback_t json_depth_limit() {
  return [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (depth >= kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                   event == nlohmann::json::parse_event_t::array_start)) {
      throw nlohmann::json::parse_error::create(
          101, 0, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", nullptr);
    }
    return true;
  };
}

}  // namespace tfm
