// Text examples to token ids, as transformers' run_clm.py does: `tokenizer(examples["text"])`,
// which adds the tokenizer's own special tokens (BOS for Llama, none for Qwen3 or GPT-2) and no
// EOS. Packing then runs documents into each other with nothing between them; append_eos marks
// the boundary instead, as GPT-2-style pretraining data does, at the cost of differing from
// run_clm.
#pragma once

#include "tfm/tokenizer.h"
#include "training/dataset_examples.h"

namespace tfm::training {

struct TokenizeOptions {
  bool add_special_tokens = true;
  bool append_eos = false;  // needs a tokenizer with an eos_token
};

// Pre-tokenized examples pass through unchanged. Errors (e.g. invalid UTF-8) name the example's
// file and line.
Examples tokenize_examples(Examples examples, const Tokenizer& tokenizer,
                           const TokenizeOptions& options = {});

}  // namespace tfm::training
