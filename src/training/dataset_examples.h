// Examples as read from a dataset file, before they become fixed-length rows. An example is text
// (tokenized later) or token ids (pre-tokenized); one dataset holds one kind. Each example keeps
// the line it started on, so an error found later (bad UTF-8, a bad id) can still point at it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfm::training {

struct Examples {
  std::string source;                     // the file, for messages
  std::vector<int64_t> lines;             // 1-based line on which each example starts
  std::vector<std::string> texts;         // text examples; empty once tokenized
  std::vector<std::vector<int32_t>> ids;  // token ids per example

  bool tokenized() const { return texts.empty(); }
  size_t size() const { return tokenized() ? ids.size() : texts.size(); }
  // "data/train.jsonl:12", for messages about example i.
  std::string where(size_t i) const;
};

}  // namespace tfm::training
