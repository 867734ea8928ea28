// Driving the serving engine's sequences in tests: greedy parameters, and a sequence's ids to its
// end (a tfm::Error when it fails or takes past a deadline).
#pragma once

#include <chrono>
#include <vector>

#include "serving/sequence.h"
#include "tfm/error.h"

namespace tfm::testing {

inline serving::SamplingParams greedy(int max_tokens) {
  serving::SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = 0;
  return p;
}

inline std::vector<int64_t> run_to_end(serving::Sequence& s,
                                       std::chrono::seconds limit = std::chrono::seconds(300)) {
  std::vector<int64_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const serving::TokenEvent& e : s.take(std::chrono::milliseconds(100))) {
      ids.push_back(e.token);
      if (e.finish) return ids;
    }
    if (s.error()) throw Error(*s.error());
  }
  throw Error("the sequence did not finish in time");
}

}  // namespace tfm::testing
