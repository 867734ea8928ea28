// Examples shaped into rows of exactly max_length tokens, so one compiled graph serves every
// training step. Two ways, as in transformers' examples:
// - packed (run_clm.py `group_texts`): all ids concatenated and cut into blocks of max_length,
//   the remainder dropped; every token is real, labels = input_ids. run_clm maps group_texts over
//   batches of 1000 examples, so it drops a remainder per 1000 examples, not once: group_size
//   keeps that (0 concatenates the whole dataset).
// - padded (`tokenizer(padding="max_length", truncation=True)`): one example per row, cut from
//   the right or padded on the right; attention_mask 0 and labels -100 on padding. Examples of
//   fewer than two tokens are dropped: a causal LM predicts token t+1 from token t, so they hold no
//   target and a batch of them would divide the loss by zero.
// Labels are not shifted: the model shifts them, as transformers' causal LMs do.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "training/dataset_examples.h"

namespace tfm::training {

using graph::kIgnoreIndex;  // label the loss skips (PyTorch's ignore_index)
constexpr int64_t kRunClmGroupSize = 1000;

// [num_rows, max_length] each, row-major (flat, so a batch is a gather of rows).
struct TokenRows {
  int64_t max_length = 0;
  std::vector<int32_t> input_ids;
  std::vector<int32_t> attention_mask;  // 1 real token, 0 padding
  std::vector<int32_t> labels;          // input_ids, kIgnoreIndex on padding

  int64_t num_rows() const {
    return max_length > 0 ? static_cast<int64_t>(input_ids.size()) / max_length : 0;
  }
};

// `examples` must be tokenized. Both throw when no row results.
TokenRows pack_examples(const Examples& examples, int64_t max_length,
                        int64_t group_size = kRunClmGroupSize);
TokenRows pad_examples(const Examples& examples, int64_t max_length, int32_t pad_token_id);

}  // namespace tfm::training
