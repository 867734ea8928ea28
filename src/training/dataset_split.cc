#include "training/dataset_split.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tfm/error.h"

namespace tfm::training {
namespace {

std::string str(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

size_t train_count(size_t n, const char* unit, double validation_fraction,
                   const std::string& source) {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0)) {
    throw Error("dataset " + source + ": validation_fraction must lie in (0, 1), got " +
                str(validation_fraction));
  }
  const auto train =
      static_cast<size_t>(std::floor(static_cast<double>(n) * (1.0 - validation_fraction)));
  if (train == 0 || train == n) {
    throw Error("dataset " + source + ": holding out " + str(validation_fraction) + " of " +
                std::to_string(n) + " " + unit + " leaves one side empty");
  }
  return train;
}

Examples slice(const Examples& examples, size_t begin, size_t end) {
  Examples out;
  out.source = examples.source;
  out.lines.assign(examples.lines.begin() + begin, examples.lines.begin() + end);
  if (examples.tokenized()) {
    out.ids.assign(examples.ids.begin() + begin, examples.ids.begin() + end);
  } else {
    out.texts.assign(examples.texts.begin() + begin, examples.texts.begin() + end);
  }
  return out;
}

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

DatasetSplit split_examples(const Examples& examples, double validation_fraction) {
  const size_t n = examples.size();
  const size_t train = train_count(n, "examples", validation_fraction, examples.source);
  return {slice(examples, 0, train), slice(examples, train, n)};
}

DatasetSplit split_document(const Examples& document, double validation_fraction) {
  if (document.tokenized() || document.size() != 1) {
    throw Error("split_document: dataset " + document.source +
                " must be one text example (sample_by = document)");
  }
  const std::string& text = document.texts[0];
  const size_t chars = static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return !continuation_byte(c); }));
  const size_t train_chars = train_count(chars, "characters", validation_fraction, document.source);
  size_t cut = 0;
  for (size_t seen = 0; cut < text.size(); ++cut) {
    if (!continuation_byte(text[cut]) && seen++ == train_chars) break;
  }
  const int64_t first_line = document.lines.empty() ? 1 : document.lines[0];
  const int64_t cut_line = first_line + std::count(text.begin(), text.begin() + cut, '\n');
  DatasetSplit split;
  split.train.source = split.validation.source = document.source;
  split.train.texts = {text.substr(0, cut)};
  split.train.lines = {first_line};
  split.validation.texts = {text.substr(cut)};
  split.validation.lines = {cut_line};
  return split;
}

}  // namespace tfm::training
