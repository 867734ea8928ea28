// Goldens made by tools/make_tokenizer_goldens.py with Hugging Face tokenizers: every
// tests/data/tokenizers/<name>/golden.json must be reproduced id for id and byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tfm/tokenizer.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldens = fs::path(TFM_TEST_DATA_DIR) / "tokenizers";

std::string tokenizer_folder(const std::string& name) {
  // The real Qwen3 tokenizer lives in data/; the small trained ones next to their goldens.
  return name == "qwen3" ? std::string(TFM_DATA_DIR) + "/qwen3-tokenizer"
                         : (kGoldens / name).string();
}

std::string streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  StreamingDecoder stream(tokenizer, skip);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = stream.put(id);
    text += piece;
  }
  return text + stream.flush();
}

class Golden : public testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesTokenizers) {
  const Tokenizer tokenizer = AutoTokenizer::from_pretrained(tokenizer_folder(GetParam()));
  std::ifstream in(kGoldens / GetParam() / "golden.json");
  const nlohmann::json entries = nlohmann::json::parse(in);
  ASSERT_GT(entries.size(), 20u);
  for (const auto& entry : entries) {
    const std::string text = entry["text"];
    const auto ids = entry["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.encode(text, false), ids) << text;
    EXPECT_EQ(tokenizer.encode(text, true), entry["ids_with_special"].get<std::vector<int32_t>>())
        << text;
    for (bool skip : {false, true}) {
      const std::string expected = entry[skip ? "decoded_skip_special" : "decoded"];
      EXPECT_EQ(tokenizer.decode(ids, skip), expected) << text;
      EXPECT_EQ(streamed(tokenizer, ids, skip), expected) << text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Golden,
                         testing::Values("qwen3", "gpt2-style", "sentencepiece-style", "metaspace",
                                         "bytelevel-variants", "whitespace-nfd"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

}  // namespace
}  // namespace tfm
