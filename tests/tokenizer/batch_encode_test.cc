// Batches padded and truncated like transformers' tokenizer(texts, padding=..., truncation=...).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tfm/tokenizer.h"

namespace tfm {
namespace {

TEST(BatchEncode, MatchesTransformers) {
  const Tokenizer tokenizer =
      AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer");
  std::ifstream in(std::string(TFM_TEST_DATA_DIR) + "/tokenizers/qwen3/batch-golden.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    const auto& o = c["options"];
    BatchEncodeOptions options;
    options.padding_side = c["padding_side"] == "left" ? PaddingSide::kLeft : PaddingSide::kRight;
    options.pad_to_max_length = o["padding"] == "max_length";
    options.truncation = o.value("truncation", false);
    if (o.contains("max_length")) options.max_length = o["max_length"].get<size_t>();
    const auto texts = c["texts"].get<std::vector<std::string>>();
    const BatchEncoding batch = tokenizer.encode_batch(texts, options);
    EXPECT_EQ(batch.input_ids, c["input_ids"].get<std::vector<std::vector<int32_t>>>()) << c.dump();
    EXPECT_EQ(batch.attention_mask, c["attention_mask"].get<std::vector<std::vector<int32_t>>>());
  }
}

}  // namespace
}  // namespace tfm
