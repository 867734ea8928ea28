// The splitting rules shared by pre-tokenizers: how the matched parts of a word and the parts
// between matches become words (tokenizers' SplitDelimiterBehavior).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace tfm::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where);

// Splits `word` around `matches` (sorted, non-overlapping) and appends the pieces to `out`.
// With `invert`, the matches are the words to keep and the gaps are the delimiters.
void split_word(std::string_view word, const std::vector<Span>& matches, SplitBehavior behavior,
                bool invert, std::vector<std::string_view>& out);

}  // namespace tfm::tokenizer
