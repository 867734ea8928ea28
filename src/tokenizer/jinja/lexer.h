// Splits a Jinja template into text and tags, applying whitespace control the way transformers
// configures jinja2 (trim_blocks, lstrip_blocks, no trailing newline), and tags into tokens.
#pragma once

#include <string>
#include <vector>

namespace tfm::jinja {

struct Token {
  enum Kind { kName, kString, kInt, kFloat, kOperator, kEnd };
  Kind kind;
  std::string text;  // names, operators, and strings with escapes resolved
};

struct Chunk {
  enum Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string text;           // kText
  std::vector<Token> tokens;  // kOutput and kStatement, ending with a kEnd token
};

std::vector<Chunk> lex(const std::string& source);

}  // namespace tfm::jinja
