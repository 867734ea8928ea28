// From a dataset file to fixed-length rows in one call, for a training run:
// read (dataset_reader.h) -> tokenize (dataset_tokenize.h) -> pack or pad (dataset_rows.h).
// Then split (dataset_split.h) where needed, and DataLoader (dataset_loader.h) for batches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tfm/tokenizer.h"
#include "training/dataset_reader.h"
#include "training/dataset_rows.h"
#include "training/dataset_tokenize.h"

namespace tfm::training {

enum class RowShaping { kPacked, kPadded };

struct DatasetOptions {
  int64_t max_length = 1024;  // run_clm's block_size default
  RowShaping shaping = RowShaping::kPacked;
  TextFileOptions text_file{};
  JsonlOptions jsonl{};
  TokenizeOptions tokenize{};
  int64_t group_size = kRunClmGroupSize;  // packed only
  std::optional<int32_t> pad_token_id{};  // padded only; default: the tokenizer's pad_token
};

// `tokenizer` may be null for pre-tokenized examples.
TokenRows make_rows(Examples examples, const Tokenizer* tokenizer, const DatasetOptions& options);
TokenRows load_rows(const std::string& path, const Tokenizer* tokenizer,
                    const DatasetOptions& options);

}  // namespace tfm::training
