// The server's counters, written by the request threads, read as Prometheus text by /metrics.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "serving/engine.h"

namespace tfm::serving {

class Metrics {
 public:
  void request_done(int status);
  void prompt_tokens(int64_t count);
  void generation_token();
  void first_token(double seconds);
  void inter_token(double seconds);
  // Prometheus' text format (version 0.0.4), with the engine's running and waiting sequences and
  // its graph counts.
  std::string text(const EngineCounts& engine) const;

 private:
  mutable std::mutex mutex_;
  int64_t requests_ok_ = 0, requests_failed_ = 0;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  double first_token_sum_ = 0, inter_token_sum_ = 0;
  int64_t first_token_count_ = 0, inter_token_count_ = 0;
};

}  // namespace tfm::serving
