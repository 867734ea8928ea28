// `tfm tokenize MODEL_OR_DIR TEXT`: ids as JSON; `--decode 1,2,3` prints text; `--chat JSON`
// renders messages through the chat template.
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "io/json_depth.h"
#include "tfm/error.h"
#include "tfm/tokenizer.h"

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string decode;
  std::string chat;
  bool skip_special_tokens = false;
  bool no_special_tokens = false;
  bool add_generation_prompt = false;
  bool no_thinking = false;
};

std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      ids.push_back(static_cast<int32_t>(std::stol(item, &used)));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw tfm::Error("tokenize --decode: '" + item + "' is not an integer id");
    }
  }
  return ids;
}

std::vector<tfm::ChatMessage> parse_messages(const std::string& json) {
  nlohmann::json messages;
  try {
    messages = nlohmann::json::parse(json, tfm::json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    throw tfm::Error(std::string("tokenize --chat: invalid JSON: ") + e.what());
  }
  if (!messages.is_array() || messages.empty()) {
    throw tfm::Error("tokenize --chat: expected a JSON array of one or more messages");
  }
  std::vector<tfm::ChatMessage> out;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      throw tfm::Error("tokenize --chat: each message needs string \"role\" and \"content\": " +
                       m.dump());
    }
    out.push_back({m["role"], m["content"]});
  }
  return out;
}

void run(const TokenizeOptions& o) {
  const tfm::Tokenizer tokenizer = tfm::AutoTokenizer::from_pretrained(o.model);
  if (!o.decode.empty()) {
    std::cout << tokenizer.decode(parse_ids(o.decode), o.skip_special_tokens) << "\n";
  } else if (!o.chat.empty()) {
    std::cout << tokenizer.apply_chat_template(parse_messages(o.chat), o.add_generation_prompt,
                                               !o.no_thinking);
  } else {
    std::cout << nlohmann::json(tokenizer.encode(o.text, !o.no_special_tokens)).dump() << "\n";
  }
}

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Encode text to ids, decode ids, or render a chat");
  cmd->add_option("model", options->model, "Hub id (Org/Name), folder or tokenizer.json")
      ->required();
  cmd->add_option("text", options->text, "Text to encode (prints the ids as JSON)");
  cmd->add_option("--decode", options->decode, "Comma-separated ids to decode, e.g. 1,2,3");
  cmd->add_flag("--skip-special-tokens", options->skip_special_tokens,
                "With --decode: drop special tokens");
  cmd->add_flag("--no-special-tokens", options->no_special_tokens,
                "Encode without the tokens add_special_tokens would add (e.g. BOS)");
  cmd->add_option("--chat", options->chat,
                  "JSON array of {\"role\", \"content\"} messages to render with the template");
  cmd->add_flag("--add-generation-prompt", options->add_generation_prompt,
                "With --chat: end with the assistant prompt");
  cmd->add_flag("--no-thinking", options->no_thinking, "With --chat: enable_thinking=false");
  cmd->callback([options] { run(*options); });
}

const bool kRegistered = tfm::cli::register_command(&add_tokenize_command);

}  // namespace
