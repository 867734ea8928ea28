// One sequence the serving engine runs: its prompt, how its tokens are chosen, and the tokens it
// hands back, one at a time, to the thread that waits on it (an HTTP handler).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tfm::serving {

// OpenAI's sampling parameters, as vLLM applies them: temperature 0 is greedy decoding.
struct SamplingParams {
  int max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0: all tokens
  std::optional<uint64_t> seed;
  float repetition_penalty = 1.0f;  // transformers': divides the logits of every id seen
  float presence_penalty = 0.0f;    // OpenAI's: subtracted once from each id generated so far
  float frequency_penalty = 0.0f;   // and this once per time it was generated
  // The chosen token's log-probability and that of the `top_logprobs` likeliest, from the model's
  // own distribution (before penalties and temperature, as vLLM reports them).
  bool logprobs = false;
  int top_logprobs = 0;
  std::vector<int64_t> stop_token_ids;  // EOS ids: the sequence ends on any of them
  bool greedy() const { return !(temperature > 1e-5f); }
};

enum class FinishReason { kStop, kLength };

struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;
};

struct TokenEvent {
  int64_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;       // the top_logprobs likeliest, most likely first
  std::optional<FinishReason> finish;  // set on the sequence's last token
};

class Sequence {
 public:
  Sequence(std::vector<int64_t> prompt, SamplingParams params)
      : prompt_(std::move(prompt)), params_(std::move(params)) {}

  const std::vector<int64_t>& prompt() const { return prompt_; }
  const SamplingParams& params() const { return params_; }

  // The engine's side.
  void push(TokenEvent event);
  // A sequence the engine could not run (its error text); wakes the waiting thread.
  void fail(std::string message);

  // The waiting side: the tokens produced since the last call, waiting up to `timeout` for one.
  // Empty when none came in time.
  std::vector<TokenEvent> take(std::chrono::milliseconds timeout);
  std::optional<std::string> error() const;
  // The client went away, or a stop string ended the text: the engine frees its slot.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  const std::vector<int64_t> prompt_;
  const SamplingParams params_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  std::optional<std::string> error_;
  std::atomic<bool> cancelled_ = false;
};

}  // namespace tfm::serving
