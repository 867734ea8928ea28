// Text -> ids: added tokens, then per segment normalize, pre-tokenize and BPE each word.
#include <string>

#include "tokenizer/pipeline.h"

namespace tfm::tokenizer {
namespace {

void encode_words(const Pipeline& p, std::string_view text, bool starts_text, BpeScratch& scratch,
                  std::vector<int32_t>& out) {
  Words words;
  words.starts_text = starts_text;
  words.views.push_back(text);
  if (p.pre_tokenizer) p.pre_tokenizer->pre_tokenize(words);
  for (std::string_view word : words.views) p.model->encode_word(word, scratch, out);
}

void encode_segment(const Pipeline& p, std::string_view text, bool starts_text, BpeScratch& scratch,
                    std::vector<int32_t>& out) {
  std::string normalized;
  std::string_view view = text;
  if (p.normalizer) {
    normalized.assign(text);
    p.normalizer->normalize(normalized);
    view = normalized;
  }
  if (p.normalized_tokens.empty()) {
    encode_words(p, view, starts_text, scratch, out);
    return;
  }
  std::vector<Segment> segments;
  p.normalized_tokens.split(view, segments);
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
    } else {
      encode_words(p, segment.text, starts_text && segment.offset == 0, scratch, out);
    }
  }
}

}  // namespace

void encode_into(const Pipeline& p, std::string_view text, std::vector<int32_t>& out) {
  BpeScratch scratch;
  std::vector<Segment> segments;
  p.raw_tokens.split(text, segments);
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
    } else {
      encode_segment(p, segment.text, segment.offset == 0, scratch, out);
    }
  }
}

}  // namespace tfm::tokenizer
