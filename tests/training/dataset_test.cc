// Reading, tokenizing, packing, padding and splitting against Hugging Face datasets,
// transformers and nanoGPT's split (tests/data/training/dataset/golden.json).
#include "training/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "training/dataset_goldens.h"
#include "training/dataset_split.h"

namespace tfm::training {
namespace {

using testing_training::dataset_file;
using testing_training::dataset_golden;
using testing_training::flat_rows;
using testing_training::qwen3_tokenizer;

constexpr int32_t kQwen3Pad = 151643;  // <|endoftext|>

const nlohmann::json& loader_golden() { return dataset_golden()["text_loader"]; }
int64_t max_length() { return dataset_golden()["max_length"].get<int64_t>(); }

void expect_rows(const TokenRows& rows, const nlohmann::json& expected) {
  EXPECT_EQ(rows.max_length, max_length());
  EXPECT_EQ(rows.num_rows(), static_cast<int64_t>(expected["input_ids"].size()));
  EXPECT_EQ(rows.input_ids, flat_rows(expected["input_ids"]));
  EXPECT_EQ(rows.labels, flat_rows(expected["labels"]));
  if (expected.contains("attention_mask")) {
    EXPECT_EQ(rows.attention_mask, flat_rows(expected["attention_mask"]));
  } else {
    EXPECT_TRUE(std::all_of(rows.attention_mask.begin(), rows.attention_mask.end(),
                            [](int32_t m) { return m == 1; }));
  }
}

Examples tokenized_lines() {
  return tokenize_examples(read_text_file(dataset_file("sample.txt")), qwen3_tokenizer());
}

TEST(DatasetReader, TextLinesMatchDatasets) {
  const Examples lines = read_text_file(dataset_file("sample.txt"));
  EXPECT_EQ(lines.texts, loader_golden()["line"].get<std::vector<std::string>>());
  ASSERT_EQ(lines.lines.size(), lines.texts.size());
  for (size_t i = 0; i < lines.lines.size(); ++i) EXPECT_EQ(lines.lines[i], int64_t(i) + 1);
  EXPECT_EQ(lines.where(2), dataset_file("sample.txt") + ":3");
}

TEST(DatasetReader, KeepLinebreaksParagraphAndDocumentMatchDatasets) {
  const std::string path = dataset_file("sample.txt");
  EXPECT_EQ(read_text_file(path, {.keep_linebreaks = true}).texts,
            loader_golden()["line_keep_linebreaks"].get<std::vector<std::string>>());
  const Examples paragraphs = read_text_file(path, {.sample_by = SampleBy::kParagraph});
  EXPECT_EQ(paragraphs.texts, loader_golden()["paragraph"].get<std::vector<std::string>>());
  EXPECT_EQ(paragraphs.lines.at(1), 4);  // "All:" after "First Citizen:\n...\n\n"
  EXPECT_EQ(read_text_file(path, {.sample_by = SampleBy::kDocument}).texts,
            loader_golden()["document"].get<std::vector<std::string>>());
}

TEST(DatasetReader, JsonlTextMatchesDatasets) {
  const Examples records = read_dataset(dataset_file("sample.jsonl"));
  EXPECT_EQ(records.texts, dataset_golden()["jsonl_loader"].get<std::vector<std::string>>());
  // Line 6 is blank: the records after it keep their own line numbers.
  EXPECT_EQ(records.lines.at(4), 5);
  EXPECT_EQ(records.lines.at(5), 7);
}

TEST(DatasetTokenize, MatchesTransformersTokenizerCall) {
  const Examples tokens = tokenized_lines();
  EXPECT_TRUE(tokens.tokenized());
  EXPECT_EQ(tokens.ids,
            dataset_golden()["tokenized_lines"].get<std::vector<std::vector<int32_t>>>());
}

TEST(DatasetTokenize, AppendEosEndsEveryDocument) {
  const Examples tokens = tokenize_examples(read_text_file(dataset_file("sample.txt")),
                                            qwen3_tokenizer(), {.append_eos = true});
  const auto expected =
      dataset_golden()["tokenized_lines"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(tokens.ids.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<int32_t> with_eos = expected[i];
    with_eos.push_back(151645);  // <|im_end|>, Qwen3's eos_token
    EXPECT_EQ(tokens.ids[i], with_eos);
  }
}

TEST(DatasetRows, PackedMatchesRunClmGroupTexts) {
  expect_rows(pack_examples(tokenized_lines(), max_length()), dataset_golden()["packed_lines"]);
}

TEST(DatasetRows, PackedDropsARemainderPerGroupLikeBatchedMap) {
  expect_rows(pack_examples(tokenized_lines(), max_length(), /*group_size=*/7),
              dataset_golden()["packed_lines_group_7"]);
}

TEST(DatasetRows, PaddedMatchesTokenizerPaddingMaxLength) {
  expect_rows(pad_examples(tokenized_lines(), max_length(), kQwen3Pad),
              dataset_golden()["padded_lines"]);
}

TEST(DatasetRows, PreTokenizedJsonlPacksLikeGroupTexts) {
  const Examples ids = read_jsonl(dataset_file("sample_ids.jsonl"), {.vocab_size = 151936});
  EXPECT_TRUE(ids.tokenized());
  expect_rows(pack_examples(ids, max_length()), dataset_golden()["packed_ids"]);
}

TEST(DatasetRows, LoadRowsRunsTheWholePipeline) {
  DatasetOptions options;
  options.max_length = max_length();
  expect_rows(load_rows(dataset_file("sample.txt"), &qwen3_tokenizer(), options),
              dataset_golden()["packed_lines"]);
  options.shaping = RowShaping::kPadded;  // pad id from the tokenizer
  expect_rows(load_rows(dataset_file("sample.txt"), &qwen3_tokenizer(), options),
              dataset_golden()["padded_lines"]);
  options.shaping = RowShaping::kPacked;
  expect_rows(load_rows(dataset_file("sample_ids.jsonl"), nullptr, options),
              dataset_golden()["packed_ids"]);
}

TEST(DatasetSplit, ExamplesSplitKeepsOrderAndTakesTheEnd) {
  const Examples lines = read_text_file(dataset_file("sample.txt"));
  const DatasetSplit split = split_examples(lines, 0.1);
  const size_t n = lines.size();
  const size_t train = n * 9 / 10;  // floor(n * 0.9)
  ASSERT_EQ(split.train.size(), train);
  ASSERT_EQ(split.validation.size(), n - train);
  EXPECT_EQ(split.train.texts.front(), lines.texts.front());
  EXPECT_EQ(split.validation.texts.front(), lines.texts[train]);
  EXPECT_EQ(split.validation.lines.front(), lines.lines[train]);
}

// The demo's split: nanoGPT's data[:int(n*0.9)] / data[int(n*0.9):] of the characters, each part
// tokenized and packed on its own.
TEST(DatasetSplit, TinyShakespeareMatchesNanoGptSplitAndTokenizer) {
  const nlohmann::json& golden = dataset_golden()["tinyshakespeare"];
  const Examples document = read_text_file(std::string(TFM_DATA_DIR) + "/tinyshakespeare/input.txt",
                                           {.sample_by = SampleBy::kDocument});
  ASSERT_EQ(document.texts.at(0).size(), golden["characters"].get<size_t>());  // ASCII
  const DatasetSplit split = split_document(document, 0.1);
  const std::pair<const char*, const Examples*> parts[] = {{"train", &split.train},
                                                           {"validation", &split.validation}};
  for (const auto& [name, part] : parts) {
    SCOPED_TRACE(name);
    const nlohmann::json& expected = golden[name];
    const std::string& text = part->texts.at(0);
    ASSERT_EQ(text.size(), expected["characters"].get<size_t>());
    const std::string starts = expected["starts_with"];
    EXPECT_EQ(text.substr(0, starts.size()), starts);
    const Examples tokens = tokenize_examples(*part, qwen3_tokenizer());
    const std::vector<int32_t>& ids = tokens.ids.at(0);
    ASSERT_EQ(ids.size(), expected["tokens"].get<size_t>());
    const auto first = expected["first_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + first.size()), first);
    uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a over the ids' little-endian bytes
    for (int32_t id : ids) {
      for (int b = 0; b < 4; ++b)
        hash = (hash ^ ((uint32_t(id) >> (8 * b)) & 0xff)) * 0x100000001B3ull;
    }
    EXPECT_EQ(std::to_string(hash), expected["fnv1a"].get<std::string>());
    EXPECT_EQ(pack_examples(tokens, 256).num_rows(), expected["blocks_of_256"].get<int64_t>());
  }
}

}  // namespace
}  // namespace tfm::training
