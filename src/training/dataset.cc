#include "training/dataset.h"

#include "tfm/error.h"

namespace tfm::training {

TokenRows make_rows(Examples examples, const Tokenizer* tokenizer, const DatasetOptions& options) {
  if (!examples.tokenized()) {
    if (tokenizer == nullptr) {
      throw Error("dataset " + examples.source + " holds text: it needs a tokenizer");
    }
    examples = tokenize_examples(std::move(examples), *tokenizer, options.tokenize);
  }
  if (options.shaping == RowShaping::kPacked) {
    return pack_examples(examples, options.max_length, options.group_size);
  }
  std::optional<int32_t> pad = options.pad_token_id;
  if (!pad && tokenizer != nullptr) pad = tokenizer->pad_token_id();
  if (!pad) {
    throw Error("dataset " + examples.source +
                ": padded rows need a pad_token_id (the tokenizer has no pad_token)");
  }
  return pad_examples(examples, options.max_length, *pad);
}

TokenRows load_rows(const std::string& path, const Tokenizer* tokenizer,
                    const DatasetOptions& options) {
  return make_rows(read_dataset(path, options.text_file, options.jsonl), tokenizer, options);
}

}  // namespace tfm::training
