// apply_chat_template: tokenizer_config.json's Jinja template rendered as transformers does.
#include "tfm/error.h"
#include "tfm/tokenizer.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/pipeline.h"

namespace tfm {

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt, bool enable_thinking) const {
  const auto& config = pipeline_->config;
  if (config.chat_template.empty()) {
    throw Error("apply_chat_template: " + pipeline_->source +
                " has no chat_template in tokenizer_config.json");
  }
  // Parsed per call: templates are a few kB and chat rendering is far from any hot loop.
  const auto nodes = jinja::parse(config.chat_template);
  jinja::Array list;
  for (const auto& message : messages) {
    list.emplace_back(jinja::Object{{"role", jinja::Value(message.role)},
                                    {"content", jinja::Value(message.content)}});
  }
  // The variables transformers passes: messages, tools (None without tools), the flags and the
  // special tokens map.
  jinja::Object context{{"messages", jinja::Value(std::move(list))},
                        {"tools", jinja::Value(jinja::None{})},
                        {"add_generation_prompt", jinja::Value(add_generation_prompt)},
                        {"enable_thinking", jinja::Value(enable_thinking)}};
  const std::pair<const char*, const std::optional<std::string>*> specials[] = {
      {"bos_token", &config.bos_token},
      {"eos_token", &config.eos_token},
      {"pad_token", &config.pad_token},
      {"unk_token", &config.unk_token}};
  for (const auto& [name, token] : specials) {
    if (*token) context.emplace_back(name, jinja::Value(**token));
  }
  return jinja::render(nodes, std::move(context));
}

}  // namespace tfm
