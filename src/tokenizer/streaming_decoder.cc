#include "tfm/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tfm {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDecoder::put(int32_t id) {
  window_.push_back(id);
  const std::string bytes = tokenizer_.decode_bytes(window_, skip_special_tokens_);
  const size_t complete = tokenizer::complete_utf8_prefix(bytes);
  // ByteFallback decodes an unfinished character to U+FFFD: wait for the rest of it too.
  if (complete <= emitted_ || std::string_view(bytes).substr(0, complete).ends_with(kReplacement)) {
    return "";
  }
  std::string text =
      tokenizer::utf8_lossy(std::string_view(bytes).substr(emitted_, complete - emitted_));
  emitted_ = complete;
  if (complete == bytes.size()) {
    // Everything is out: keep only the last id, as context for decoders that treat the start of
    // the text specially (Metaspace, Strip), unless it is part of a byte-fallback character and
    // means something else alone.
    const std::vector<int32_t> last(window_.end() - 1, window_.end());
    const std::string alone = tokenizer_.decode_bytes(last, skip_special_tokens_);
    if (alone.find(kReplacement) == std::string::npos) {
      window_ = last;
      emitted_ = alone.size();
    }
  }
  return text;
}

std::string StreamingDecoder::flush() {
  const std::string bytes = tokenizer_.decode_bytes(window_, skip_special_tokens_);
  window_.clear();
  const size_t from = std::min(emitted_, bytes.size());
  emitted_ = 0;
  return tokenizer::utf8_lossy(std::string_view(bytes).substr(from));
}

}  // namespace tfm
