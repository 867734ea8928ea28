// A PCRE2 pattern compiled once (JIT where available) and matched over valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfm::tokenizer {

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class Regex {
 public:
  // Throws tfm::Error naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  static std::string escape(std::string_view literal);

  // Appends every non-empty, non-overlapping match of `text` (which must be valid UTF-8).
  void find_all(std::string_view text, std::vector<Span>& out) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace tfm::tokenizer
