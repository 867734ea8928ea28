#include "tokenizer/word_cache.h"

namespace tfm::tokenizer {

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxWordBytes) return false;
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(word);
  if (it == entries_.end()) return false;
  const int32_t* begin = ids_.data() + it->second.offset;
  out.insert(out.end(), begin, begin + it->second.count);
  return true;
}

void WordCache::insert(std::string_view word, const std::vector<int32_t>& ids, size_t count) {
  if (word.size() > kMaxWordBytes) return;
  std::lock_guard lock(mutex_);
  if (entries_.size() >= kMaxWords) return;
  const auto offset = static_cast<uint32_t>(ids_.size());
  if (!entries_.try_emplace(std::string(word), Entry{offset, static_cast<uint32_t>(count)})
           .second) {
    return;
  }
  ids_.insert(ids_.end(), ids.end() - static_cast<std::ptrdiff_t>(count), ids.end());
}

}  // namespace tfm::tokenizer
