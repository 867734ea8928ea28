#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "tfm/error.h"

namespace tfm::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

[[noreturn]] void fail(const std::string& what, size_t pos) {
  throw Error("chat template: " + what + " at offset " + std::to_string(pos));
}

// Tokenizes the inside of a tag from `pos` up to its closing `close` ("}}" or "%}").
// Returns the offset just past the closer; `strip_after` tells whether it was "-}}"/"-%}".
size_t lex_tag(const std::string& s, size_t pos, const char* close, std::vector<Token>& out,
               bool& strip_after) {
  static const char* const kOperators[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|", "+", "-",
                                           "*",  "/",  "%",  "~",  "<",  ">",  "="};
  while (true) {
    while (pos < s.size() && is_space(s[pos])) ++pos;
    if (pos >= s.size()) fail("unclosed tag", pos);
    if (s[pos] == '-' && s.compare(pos + 1, 2, close) == 0) {
      strip_after = true;
      out.push_back({Token::kEnd, ""});
      return pos + 3;
    }
    if (s.compare(pos, 2, close) == 0) {
      strip_after = false;
      out.push_back({Token::kEnd, ""});
      return pos + 2;
    }
    const char c = s[pos];
    if (c == '\'' || c == '"') {
      std::string text;
      size_t i = pos + 1;
      for (; i < s.size() && s[i] != c; ++i) {
        if (s[i] != '\\' || i + 1 >= s.size()) {
          text += s[i];
          continue;
        }
        const char e = s[++i];
        text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (i >= s.size()) fail("unterminated string", pos);
      out.push_back({Token::kString, std::move(text)});
      pos = i + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t i = pos;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      const bool is_float =
          i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (is_float) {
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      out.push_back({is_float ? Token::kFloat : Token::kInt, s.substr(pos, i - pos)});
      pos = i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t i = pos;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      out.push_back({Token::kName, s.substr(pos, i - pos)});
      pos = i;
    } else {
      const char* op = nullptr;
      for (const char* candidate : kOperators) {
        if (s.compare(pos, std::strlen(candidate), candidate) == 0) {
          op = candidate;
          break;
        }
      }
      if (op == nullptr) fail(std::string("unexpected character '") + c + "'", pos);
      out.push_back({Token::kOperator, op});
      pos += std::strlen(op);
    }
  }
}

}  // namespace

std::vector<Chunk> lex(const std::string& source) {
  std::string s = source;
  if (s.ends_with('\n')) s.pop_back();  // jinja2 drops one trailing newline by default
  std::vector<Chunk> chunks;
  size_t pos = 0;
  bool strip_next = false;  // the previous tag ended with "-"
  while (pos < s.size()) {
    size_t open = pos;
    while ((open = s.find('{', open)) != std::string::npos &&
           (open + 1 >= s.size() || std::strchr("{%#", s[open + 1]) == nullptr)) {
      ++open;
    }
    std::string text = s.substr(pos, (open == std::string::npos ? s.size() : open) - pos);
    if (strip_next) text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r")));
    if (open == std::string::npos) {
      chunks.push_back({Chunk::kText, std::move(text), {}});
      break;
    }
    const char kind = s[open + 1];
    const char modifier = open + 2 < s.size() ? s[open + 2] : '\0';
    if (modifier == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && modifier != '+') {
      // lstrip_blocks: a block tag alone at the start of a line takes the indentation with it.
      const size_t newline = text.find_last_of('\n');
      const bool line_start = newline != std::string::npos || pos == 0 || s[pos - 1] == '\n';
      const size_t from = newline == std::string::npos ? 0 : newline + 1;
      if (line_start && text.find_first_not_of(" \t", from) == std::string::npos) {
        text.erase(from);
      }
    }
    chunks.push_back({Chunk::kText, std::move(text), {}});
    size_t body = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
    if (kind == '#') {
      const size_t close = s.find("#}", body);
      if (close == std::string::npos) fail("unclosed comment", open);
      strip_next = s[close - 1] == '-';
      pos = close + 2;
    } else {
      Chunk tag{kind == '{' ? Chunk::kOutput : Chunk::kStatement, "", {}};
      pos = lex_tag(s, body, kind == '{' ? "}}" : "%}", tag.tokens, strip_next);
      chunks.push_back(std::move(tag));
    }
    // trim_blocks: the newline right after a block tag or comment is dropped.
    if (kind != '{' && !strip_next && pos < s.size() && s[pos] == '\n') ++pos;
  }
  return chunks;
}

}  // namespace tfm::jinja
