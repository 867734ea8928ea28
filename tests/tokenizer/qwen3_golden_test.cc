// Every entry of the Qwen3 golden file (made with Hugging Face tokenizers) must match exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tfm/tokenizer.h"

namespace tfm {
namespace {

const Tokenizer& qwen3() {
  static const Tokenizer tokenizer =
      AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer");
  return tokenizer;
}

nlohmann::json golden() {
  std::ifstream in(std::string(TFM_TEST_DATA_DIR) + "/fixtures/qwen3-tokenizer-golden.json");
  return nlohmann::json::parse(in);
}

TEST(Qwen3Golden, EncodeAndDecodeMatchTokenizers) {
  const nlohmann::json entries = golden();
  ASSERT_FALSE(entries.empty());
  for (const auto& entry : entries) {
    const std::string text = entry["text"];
    const auto expected = entry["ids"].get<std::vector<int32_t>>();
    const auto ids = qwen3().encode(text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, expected) << text;
    EXPECT_EQ(qwen3().decode(expected), entry["decoded"].get<std::string>()) << text;
    EXPECT_EQ(qwen3().decode(expected, /*skip_special_tokens=*/true),
              entry["decoded_skip_special"].get<std::string>())
        << text;
  }
}

TEST(Qwen3Golden, SpecialTokenAccessors) {
  EXPECT_EQ(qwen3().eos_token_id(), 151645);  // <|im_end|>
  EXPECT_EQ(qwen3().pad_token_id(), 151643);  // <|endoftext|>
  EXPECT_EQ(qwen3().token_to_id("<think>"), 151667);
  EXPECT_EQ(qwen3().id_to_token(785), "The");
  EXPECT_TRUE(qwen3().is_special(151644));
  EXPECT_FALSE(qwen3().is_special(151667));
}

}  // namespace
}  // namespace tfm
