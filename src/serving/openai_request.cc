#include "serving/openai_request.h"

#include <nlohmann/json.hpp>

namespace tfm::serving {
namespace {

using nlohmann::json;

constexpr int kMaxChoices = 128;
constexpr int kMaxStopStrings = 4;  // OpenAI's limit
constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxCompletionLogprobs = 5;

ApiError bad(const std::string& param, const std::string& problem) {
  return ApiError(400, "'" + param + "': " + problem, param);
}

// A field read only when present and not null, of the type OpenAI's schema gives it.
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* key, double low, double high) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw bad(key, "expected a number, got " + v->dump());
  const double x = v->get<double>();
  if (!(x >= low && x <= high)) {
    throw bad(key, v->dump() + " is out of range: it must be between " + json(low).dump() +
                       " and " + json(high).dump());
  }
  return x;
}

std::optional<int64_t> integer(const json& body, const char* key, int64_t low, int64_t high) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) throw bad(key, "expected an integer, got " + v->dump());
  const auto x = v->get<int64_t>();
  if (x < low || x > high) {
    throw bad(key, std::to_string(x) + " is out of range: it must be between " +
                       std::to_string(low) + " and " + std::to_string(high));
  }
  return x;
}

std::optional<bool> boolean(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) throw bad(key, "expected a boolean, got " + v->dump());
  return v->get<bool>();
}

// Content as a string or a list of {"type": "text", "text": ...} parts.
std::string message_content(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad(where, "expected a string or a list of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      throw bad(where, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> messages(const json& body) {
  const json* v = field(body, "messages");
  if (v == nullptr) throw bad("messages", "a required field is missing");
  if (!v->is_array()) throw bad("messages", "expected a list of messages");
  if (v->empty()) throw bad("messages", "the list is empty: give at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad(where, "expected an object with a role and content");
    if (!m.contains("role") || !m["role"].is_string()) {
      throw bad(where + ".role", "expected a string");
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer") {
      throw bad(where + ".role", "unknown role '" + role + "'");
    }
    const json* content = field(m, "content");
    out.push_back({role, content == nullptr ? "" : message_content(*content, where + ".content")});
  }
  return out;
}

// One prompt: a string, or a list of token ids.
CompletionRequest::Prompt one_prompt(const json& p) {
  CompletionRequest::Prompt out;
  if (p.is_string()) {
    out.text = p.get<std::string>();
    if (out.text.empty()) throw bad("prompt", "the prompt is empty");
    return out;
  }
  if (!p.is_array() || p.empty()) {
    throw bad("prompt", p.is_array() ? "the prompt is empty" : "expected a string, or token ids");
  }
  for (const json& id : p) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw bad("prompt", "expected a string, or a list of token ids");
    }
    out.ids.push_back(id.get<int64_t>());
  }
  return out;
}

// OpenAI's four forms: a string, token ids, a list of strings, a list of token id lists.
void read_prompts(const json& body, CompletionRequest& r) {
  const json* v = field(body, "prompt");
  if (v == nullptr) throw bad("prompt", "a required field is missing");
  const bool several = v->is_array() && !v->empty() && !(*v)[0].is_number();
  if (!several) {
    r.prompts.push_back(one_prompt(*v));
    return;
  }
  for (const json& p : *v) {
    if (p.is_number()) throw bad("prompt", "a list of prompts mixes token ids and prompts");
    r.prompts.push_back(one_prompt(p));
  }
  if (r.prompts.size() * static_cast<size_t>(r.n) > kMaxChoices) {
    throw bad("prompt", std::to_string(r.prompts.size()) + " prompts of n=" + std::to_string(r.n) +
                            " choices each are more than " + std::to_string(kMaxChoices) +
                            " choices");
  }
}

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array() || v->size() > kMaxStopStrings) {
    throw bad("stop", "expected a string or a list of up to 4 strings");
  }
  std::vector<std::string> out;
  for (const json& s : *v) {
    if (!s.is_string() || s.get<std::string>().empty()) {
      throw bad("stop", "expected a string or a list of up to 4 non-empty strings");
    }
    out.push_back(s.get<std::string>());
  }
  return out;
}

void read_logprobs(const json& body, CompletionRequest& r) {
  SamplingParams& s = r.sampling;
  if (r.chat) {
    s.logprobs = boolean(body, "logprobs").value_or(false);
    const auto top = integer(body, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !s.logprobs) throw bad("top_logprobs", "needs logprobs set to true");
    s.top_logprobs = static_cast<int>(top.value_or(0));
    return;
  }
  // Completions: logprobs is the number of likeliest tokens to list.
  const auto top = integer(body, "logprobs", 0, kMaxCompletionLogprobs);
  s.logprobs = top.has_value();
  s.top_logprobs = static_cast<int>(top.value_or(0));
}

}  // namespace

std::string ApiError::type() const {
  switch (status) {
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 413:
      return "BadRequestError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

CompletionRequest parse_completion_request(const std::string& text, bool chat) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (const json* model = field(body, "model")) {
    if (!model->is_string()) throw bad("model", "expected a string");
    r.model = model->get<std::string>();
  }
  r.n = static_cast<int>(integer(body, "n", 1, kMaxChoices).value_or(1));
  if (chat) {
    r.messages = messages(body);
    if (const json* kwargs = field(body, "chat_template_kwargs")) {
      if (!kwargs->is_object()) throw bad("chat_template_kwargs", "expected an object");
      for (const auto& [key, value] : kwargs->items()) {
        if (key != "enable_thinking") {
          throw bad("chat_template_kwargs", "'" + key + "' is not supported (enable_thinking is)");
        }
      }
      r.enable_thinking = boolean(*kwargs, "enable_thinking").value_or(true);
    }
  } else {
    read_prompts(body, r);
  }
  // max_completion_tokens is the newer name of max_tokens (chat); either sets it.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const auto v = integer(body, key, 1, 1 << 30)) r.max_tokens = static_cast<int>(*v);
  }
  r.stream = boolean(body, "stream").value_or(false);
  if (const json* options = field(body, "stream_options")) {
    if (!r.stream) throw bad("stream_options", "only allowed when stream is true");
    if (!options->is_object()) throw bad("stream_options", "expected an object");
    r.include_usage = boolean(*options, "include_usage").value_or(false);
  }
  r.stop = stop_strings(body);
  r.ignore_eos = boolean(body, "ignore_eos").value_or(false);
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", 0, 2).value_or(1));
  s.top_p = static_cast<float>(number(body, "top_p", 1e-9, 1).value_or(1));
  // vLLM's: -1 (or 0) keeps every token.
  const int64_t top_k = integer(body, "top_k", -1, 1 << 30).value_or(0);
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  if (const auto seed = integer(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2).value_or(0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2).value_or(0));
  s.repetition_penalty =
      static_cast<float>(number(body, "repetition_penalty", 1e-9, 1e9).value_or(1));
  read_logprobs(body, r);
  return r;
}

}  // namespace tfm::serving
