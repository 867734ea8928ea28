// One completion request in flight: its n sequences in the engine, each turned into text as its
// tokens arrive (complete UTF-8 characters only, stop strings cut), with OpenAI's logprobs.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serving/engine.h"
#include "serving/metrics.h"
#include "serving/openai_request.h"
#include "serving/stop_strings.h"
#include "tfm/tokenizer.h"

namespace tfm::serving {

// What one choice added since the last call.
struct ChoiceDelta {
  int index = 0;
  std::string text;
  nlohmann::json logprobs;  // the new tokens' entries (a list), or null without logprobs
  std::optional<FinishReason> finish;
};

class CompletionRun {
 public:
  // Submits n sequences for each prompt, choice p * n + i the i-th of prompt p (throws what
  // Engine::submit throws).
  CompletionRun(Engine& engine, const Tokenizer& tokenizer, Metrics& metrics,
                const CompletionRequest& request, const std::vector<std::vector<int64_t>>& prompts,
                SamplingParams params);
  ~CompletionRun();  // cancels what is still running

  // Waits for the next tokens of any choice (at most `timeout`); one delta per choice that moved.
  std::vector<ChoiceDelta> next(std::chrono::milliseconds timeout);
  bool done() const;
  int choices() const { return static_cast<int>(choices_.size()); }
  // Each prompt once, as OpenAI counts them.
  int prompt_tokens() const { return static_cast<int>(prompt_tokens_); }
  int completion_tokens() const;

 private:
  struct Choice {
    std::shared_ptr<Sequence> sequence;
    std::unique_ptr<StreamingDecoder> decoder;
    std::unique_ptr<StopStrings> stops;
    int tokens = 0;
    std::optional<FinishReason> finish;
    std::chrono::steady_clock::time_point last;
  };
  std::optional<ChoiceDelta> advance(int index, std::vector<TokenEvent> events);
  nlohmann::json logprob_entry(const TokenEvent& event) const;

  const Tokenizer& tokenizer_;
  Metrics& metrics_;
  size_t prompt_tokens_ = 0;
  std::vector<Choice> choices_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tfm::serving
