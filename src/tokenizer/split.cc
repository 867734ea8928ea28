#include "tokenizer/split.h"

#include "tfm/error.h"

namespace tfm::tokenizer {

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw Error(where + ": split behavior '" + name +
              "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

void split_word(std::string_view word, const std::vector<Span>& matches, SplitBehavior behavior,
                bool invert, std::vector<std::string_view>& out) {
  // Every byte belongs to exactly one part, flagged as delimiter or not.
  struct Part {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > last) parts.push_back({last, begin, invert});
    parts.push_back({begin, end, !invert});
    last = end;
  }
  if (last < word.size()) parts.push_back({last, word.size(), invert});

  const auto emit = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back(word.substr(begin, end - begin));
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& p : parts) {
        if (!p.delimiter) emit(p.begin, p.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& p : parts) emit(p.begin, p.end);
      break;
    case SplitBehavior::kContiguous: {
      size_t i = 0;
      while (i < parts.size()) {
        size_t j = i + 1;
        while (parts[i].delimiter && j < parts.size() && parts[j].delimiter) ++j;
        emit(parts[i].begin, parts[j - 1].end);
        i = j;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      size_t begin = 0;
      for (const auto& p : parts) {
        if (p.delimiter) {
          emit(begin, p.end);
          begin = p.end;
        }
      }
      emit(begin, word.size());
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      size_t begin = 0;
      for (const auto& p : parts) {
        if (p.delimiter) {
          emit(begin, p.begin);
          begin = p.begin;
        }
      }
      emit(begin, word.size());
      break;
    }
  }
}

}  // namespace tfm::tokenizer
