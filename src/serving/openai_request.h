// The body of an OpenAI /v1/chat/completions or /v1/completions request, checked as OpenAI and
// vLLM check it: a bad field is an ApiError naming it (400), never a guess.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "serving/sequence.h"
#include "tfm/error.h"
#include "tfm/tokenizer.h"

namespace tfm::serving {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = "")
      : Error(message), status(status), param(std::move(param)) {}
  int status;
  std::string param;         // the request field at fault, if one is
  std::string type() const;  // "BadRequestError", "NotFoundError", ...
};

struct CompletionRequest {
  bool chat = false;
  std::optional<std::string> model;
  std::vector<ChatMessage> messages;  // chat
  bool enable_thinking = true;        // chat_template_kwargs.enable_thinking (vLLM's; Qwen3)
  // Completions: each prompt as text or as token ids (one of the two set); choices come n a prompt.
  struct Prompt {
    std::string text;
    std::vector<int64_t> ids;
  };
  std::vector<Prompt> prompts;
  std::optional<int> max_tokens;  // unset: what max_model_len leaves
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::vector<std::string> stop;
  bool ignore_eos = false;  // vLLM's and llama-server's extension: run to max_tokens
  SamplingParams sampling;  // all but max_tokens and the stop ids, which the server adds
};

CompletionRequest parse_completion_request(const std::string& body, bool chat);

}  // namespace tfm::serving
