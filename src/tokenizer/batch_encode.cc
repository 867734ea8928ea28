// Batches: truncation and padding to one rectangular shape, as transformers' __call__ does.
#include <algorithm>

#include "tfm/error.h"
#include "tfm/tokenizer.h"
#include "tokenizer/pipeline.h"

namespace tfm {

BatchEncoding Tokenizer::encode_batch(std::span<const std::string> texts,
                                      const BatchEncodeOptions& options) const {
  if ((options.truncation || options.pad_to_max_length) && !options.max_length) {
    throw Error("encode_batch: truncation and pad_to_max_length need max_length");
  }
  const auto& post = pipeline_->post_processor;
  const size_t specials = options.add_special_tokens ? post.prefix.size() + post.suffix.size() : 0;
  BatchEncoding batch;
  size_t longest = 0;
  for (const std::string& text : texts) {
    std::vector<int32_t> ids = encode(text, /*add_special_tokens=*/false);
    // Truncation keeps room for the special tokens, as in tokenizers.
    if (options.truncation && ids.size() + specials > *options.max_length) {
      ids.resize(*options.max_length > specials ? *options.max_length - specials : 0);
    }
    if (options.add_special_tokens) {
      ids.insert(ids.begin(), post.prefix.begin(), post.prefix.end());
      ids.insert(ids.end(), post.suffix.begin(), post.suffix.end());
    }
    longest = std::max(longest, ids.size());
    batch.input_ids.push_back(std::move(ids));
  }
  const size_t target = options.pad_to_max_length ? *options.max_length : longest;
  const auto pad = pad_token_id();
  for (auto& ids : batch.input_ids) {
    const size_t real = ids.size();
    std::vector<int32_t> mask(real, 1);
    if (options.padding && real < target) {
      if (!pad) throw Error("encode_batch: padding needs a pad_token (tokenizer_config.json)");
      const size_t missing = target - real;
      const auto at_ids = options.padding_side == PaddingSide::kLeft ? ids.begin() : ids.end();
      ids.insert(at_ids, missing, *pad);
      const auto at_mask = options.padding_side == PaddingSide::kLeft ? mask.begin() : mask.end();
      mask.insert(at_mask, missing, 0);
    }
    batch.attention_mask.push_back(std::move(mask));
  }
  return batch;
}

}  // namespace tfm
