// Remembers the ids of words already encoded, as tokenizers' BPE cache does: natural text
// repeats a small set of words, so most words skip the merge loop.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tfm::tokenizer {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;  // longer words rarely repeat
  static constexpr size_t kMaxWords = 1 << 17;

  // Appends the cached ids of `word` to `out`; false when absent.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  // Caches the last `count` ids of `ids` for `word`; a full cache stops growing.
  void insert(std::string_view word, const std::vector<int32_t>& ids, size_t count);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Entry {
    uint32_t offset, count;  // into ids_
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> entries_;
  std::vector<int32_t> ids_;
};

}  // namespace tfm::tokenizer
