#include "training/dataset_rows.h"

#include <algorithm>

#include "tfm/error.h"

namespace tfm::training {
namespace {

void check(const Examples& examples, int64_t max_length, const char* what) {
  if (!examples.tokenized()) {
    throw Error(std::string(what) + ": dataset " + examples.source + " is not tokenized yet");
  }
  if (max_length <= 0) {
    throw Error(std::string(what) + ": max_length must be positive, got " +
                std::to_string(max_length));
  }
}

void append_block(TokenRows& rows, const int32_t* ids) {
  rows.input_ids.insert(rows.input_ids.end(), ids, ids + rows.max_length);
  rows.attention_mask.insert(rows.attention_mask.end(), rows.max_length, 1);
  rows.labels.insert(rows.labels.end(), ids, ids + rows.max_length);
}

}  // namespace

TokenRows pack_examples(const Examples& examples, int64_t max_length, int64_t group_size) {
  check(examples, max_length, "pack_examples");
  if (group_size < 0) throw Error("pack_examples: group_size must be >= 0");
  const size_t group = group_size == 0 ? examples.size() : static_cast<size_t>(group_size);
  TokenRows rows;
  rows.max_length = max_length;
  std::vector<int32_t> concatenated;
  size_t total = 0;
  for (size_t first = 0; first < examples.size(); first += group) {
    concatenated.clear();
    for (size_t i = first; i < std::min(first + group, examples.size()); ++i) {
      concatenated.insert(concatenated.end(), examples.ids[i].begin(), examples.ids[i].end());
    }
    total += concatenated.size();
    const size_t blocks = concatenated.size() / static_cast<size_t>(max_length);
    for (size_t b = 0; b < blocks; ++b) append_block(rows, concatenated.data() + b * max_length);
  }
  if (rows.num_rows() == 0) {
    throw Error("pack_examples: dataset " + examples.source + " has " + std::to_string(total) +
                " tokens, not one block of max_length " + std::to_string(max_length));
  }
  return rows;
}

TokenRows pad_examples(const Examples& examples, int64_t max_length, int32_t pad_token_id) {
  check(examples, max_length, "pad_examples");
  if (max_length < 2) throw Error("pad_examples: max_length 1 leaves no next token to predict");
  TokenRows rows;
  rows.max_length = max_length;
  for (const std::vector<int32_t>& ids : examples.ids) {
    if (ids.size() < 2) continue;
    const int64_t real = std::min<int64_t>(static_cast<int64_t>(ids.size()), max_length);
    const int64_t pad = max_length - real;
    rows.input_ids.insert(rows.input_ids.end(), ids.begin(), ids.begin() + real);
    rows.input_ids.insert(rows.input_ids.end(), pad, pad_token_id);
    rows.attention_mask.insert(rows.attention_mask.end(), real, 1);
    rows.attention_mask.insert(rows.attention_mask.end(), pad, 0);
    rows.labels.insert(rows.labels.end(), ids.begin(), ids.begin() + real);
    rows.labels.insert(rows.labels.end(), pad, kIgnoreIndex);
  }
  if (rows.num_rows() == 0) {
    throw Error("pad_examples: dataset " + examples.source +
                " has no example of two or more tokens");
  }
  return rows;
}

}  // namespace tfm::training
