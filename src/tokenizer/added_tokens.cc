#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

bool ends_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  size_t end = text.size();
  const char32_t c = prev_char(text, end);
  return is_alphanumeric(c) || c == '_';
}

bool starts_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = 0;
  const char32_t c = next_char(text, pos);
  return is_alphanumeric(c) || c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) {
  for (auto& token : tokens) {
    if (token.content.empty()) continue;
    first_byte_[static_cast<unsigned char>(token.content[0])] = true;
    tokens_.push_back(std::move(token));
  }
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const auto& a, const auto& b) {
    return a.content.size() > b.content.size();
  });
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t done = 0;  // text before this is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* hit = nullptr;
    for (const auto& token : tokens_) {
      if (text.compare(pos, token.content.size(), token.content) == 0) {
        hit = &token;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + hit->content.size();
    if (hit->single_word &&
        (ends_with_word_char(text.substr(0, begin)) || starts_with_word_char(text.substr(end)))) {
      // Like aho-corasick's non-overlapping search, a rejected match is skipped as a whole.
      pos = end;
      continue;
    }
    if (hit->lstrip) {
      // Whitespace already taken by the previous token stays with it.
      while (begin > done) {
        size_t prev = begin;
        if (!is_whitespace(prev_char(text, prev))) break;
        begin = prev;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!is_whitespace(next_char(text, next))) break;
        end = next;
      }
    }
    if (begin > done) out.push_back({text.substr(done, begin - done), -1, done});
    out.push_back({text.substr(begin, end - begin), hit->id, begin});
    done = end;
    pos = end;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1, done});
}

}  // namespace tfm::tokenizer
