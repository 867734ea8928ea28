// Qwen3's chat template against transformers' apply_chat_template (goldens made by
// tools/make_tokenizer_goldens.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tfm/error.h"
#include "tfm/tokenizer.h"

namespace tfm {
namespace {

TEST(ChatTemplate, Qwen3MatchesTransformers) {
  const Tokenizer tokenizer =
      AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer");
  std::ifstream in(std::string(TFM_TEST_DATA_DIR) + "/tokenizers/qwen3/chat-golden.json");
  const nlohmann::json entries = nlohmann::json::parse(in);
  ASSERT_GE(entries.size(), 20u);
  for (const auto& entry : entries) {
    std::vector<ChatMessage> messages;
    for (const auto& m : entry["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string text = tokenizer.apply_chat_template(messages, entry["add_generation_prompt"],
                                                           entry["enable_thinking"]);
    EXPECT_EQ(text, entry["text"].get<std::string>()) << entry["messages"].dump();
    EXPECT_EQ(tokenizer.encode(text, false), entry["ids"].get<std::vector<int32_t>>());
  }
}

TEST(ChatTemplate, WithoutTemplateIsAnError) {
  const Tokenizer tokenizer = Tokenizer::from_files(std::string(TFM_TEST_DATA_DIR) +
                                                    "/tokenizers/gpt2-style/tokenizer.json");
  EXPECT_THROW(tokenizer.apply_chat_template({{"user", "hi"}}, true), Error);
}

}  // namespace
}  // namespace tfm
