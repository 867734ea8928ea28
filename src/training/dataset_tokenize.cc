#include "training/dataset_tokenize.h"

#include "tfm/error.h"

namespace tfm::training {

Examples tokenize_examples(Examples examples, const Tokenizer& tokenizer,
                           const TokenizeOptions& options) {
  if (examples.tokenized()) return examples;
  const std::optional<int32_t> eos = tokenizer.eos_token_id();
  if (options.append_eos && !eos) {
    throw Error("dataset " + examples.source + ": append_eos needs a tokenizer with an eos_token");
  }
  examples.ids.resize(examples.texts.size());
  for (size_t i = 0; i < examples.texts.size(); ++i) {
    try {
      examples.ids[i] = tokenizer.encode(examples.texts[i], options.add_special_tokens);
    } catch (const Error& e) {
      throw Error("dataset " + examples.where(i) + ": " + e.what());
    }
    if (options.append_eos) examples.ids[i].push_back(*eos);
  }
  examples.texts.clear();
  return examples;
}

}  // namespace tfm::training
