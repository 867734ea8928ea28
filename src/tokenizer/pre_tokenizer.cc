#include "tokenizer/pre_tokenizer.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "tokenizer/json_spec.h"
#include "tokenizer/split.h"
#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The Whitespace pre-tokenizer keeps runs of word characters and runs of punctuation.
constexpr const char* kWhitespacePattern = R"(\w+|[^\w\s]+)";

// Applies a matcher and split behavior to every word.
class Splitter : public PreTokenizer {
 public:
  using Matcher = std::function<void(std::string_view, std::vector<Span>&)>;
  Splitter(Matcher matcher, SplitBehavior behavior, bool invert)
      : matcher_(std::move(matcher)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Words& words) const override {
    std::vector<std::string_view> out;
    out.reserve(words.views.size());
    std::vector<Span> matches;
    for (std::string_view word : words.views) {
      matches.clear();
      matcher_(word, matches);
      split_word(word, matches, behavior_, invert_, out);
    }
    words.views = std::move(out);
  }

 private:
  Matcher matcher_;
  SplitBehavior behavior_;
  bool invert_;
};

Splitter::Matcher regex_matcher(const std::string& pattern, const std::string& where) {
  return [regex = Regex(pattern, where)](std::string_view word, std::vector<Span>& out) {
    regex.find_all(word, out);
  };
}

// Every character for which `pred` holds is a match of its own.
Splitter::Matcher char_matcher(bool (*pred)(char32_t)) {
  return [pred](std::string_view word, std::vector<Span>& out) {
    size_t pos = 0;
    while (pos < word.size()) {
      const size_t begin = pos;
      if (pred(next_char(word, pos))) out.emplace_back(begin, pos);
    }
  };
}

class PrefixSpace : public PreTokenizer {
 public:
  void pre_tokenize(Words& words) const override {
    for (auto& word : words.views) {
      if (word.starts_with(' ')) continue;
      std::string spaced(1, ' ');
      spaced += word;
      word = words.own(std::move(spaced));
    }
  }
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void pre_tokenize(Words& words) const override {
    std::vector<std::string_view> out;
    for (size_t i = 0; i < words.views.size(); ++i) {
      std::string text;
      for (char c : words.views[i]) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      const bool at_start = i == 0 && words.starts_text;
      if (!text.starts_with(replacement_) &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_start))) {
        text.insert(0, replacement_);
      }
      const std::string_view word = words.own(std::move(text));
      if (!split_) {
        out.push_back(word);
        continue;
      }
      std::vector<Span> matches;
      for (size_t p = word.find(replacement_); p != std::string_view::npos;
           p = word.find(replacement_, p + replacement_.size())) {
        matches.emplace_back(p, p + replacement_.size());
      }
      split_word(word, matches, SplitBehavior::kMergedWithNext, false, out);
    }
    words.views = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(Words& words) const override {
    for (const auto& step : steps_) step->pre_tokenize(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Metaspace::Prepend metaspace_prepend(const nlohmann::json& spec, const std::string& where) {
  if (spec.contains("prepend_scheme")) {
    const std::string scheme = string_field(spec, "prepend_scheme", where);
    if (scheme == "always") return Metaspace::Prepend::kAlways;
    if (scheme == "first") return Metaspace::Prepend::kFirst;
    if (scheme == "never") return Metaspace::Prepend::kNever;
    throw Error(where + ": Metaspace prepend_scheme '" + scheme +
                "' is not one of always, first, never");
  }
  return flag_field(spec, "add_prefix_space", true, where) ? Metaspace::Prepend::kAlways
                                              : Metaspace::Prepend::kNever;
}

// Adds the steps of `spec` to `steps`, flattening sequences so ByteLevel's position is known.
void add_steps(const nlohmann::json& spec, const std::string& where,
               std::vector<std::unique_ptr<PreTokenizer>>& steps, bool& byte_level) {
  if (spec.is_null()) return;
  const std::string type = type_of(spec, "pre_tokenizer", where);
  if (byte_level) {
    throw Error(where + ": pre_tokenizer '" + type +
                "' after ByteLevel is not supported (ByteLevel must come last)");
  }
  if (type == "Sequence") {
    for (const auto& step : array_field(spec, "pretokenizers", where)) {
      add_steps(step, where, steps, byte_level);
    }
  } else if (type == "Split") {
    steps.push_back(std::make_unique<Splitter>(
        regex_matcher(pattern_of(spec, where), where),
        parse_split_behavior(string_field(spec, "behavior", where), where),
        flag_field(spec, "invert", false, where)));
  } else if (type == "ByteLevel") {
    if (flag_field(spec, "add_prefix_space", true, where))
      steps.push_back(std::make_unique<PrefixSpace>());
    if (flag_field(spec, "use_regex", true, where)) {
      steps.push_back(std::make_unique<Splitter>(regex_matcher(kGpt2Pattern, where),
                                                 SplitBehavior::kIsolated, false));
    }
    byte_level = true;
  } else if (type == "Whitespace") {
    steps.push_back(std::make_unique<Splitter>(regex_matcher(kWhitespacePattern, where),
                                               SplitBehavior::kRemoved, true));
  } else if (type == "WhitespaceSplit") {
    steps.push_back(
        std::make_unique<Splitter>(char_matcher(&is_whitespace), SplitBehavior::kRemoved, false));
  } else if (type == "Digits") {
    steps.push_back(std::make_unique<Splitter>(char_matcher(&is_numeric),
                                               flag_field(spec, "individual_digits", false, where)
                                                   ? SplitBehavior::kIsolated
                                                   : SplitBehavior::kContiguous,
                                               false));
  } else if (type == "Metaspace") {
    steps.push_back(std::make_unique<Metaspace>(string_field(spec, "replacement", where),
                                                metaspace_prepend(spec, where),
                                                flag_field(spec, "split", true, where)));
  } else {
    throw unsupported(where, "pre_tokenizer", type,
                      "Sequence, Split, ByteLevel, Whitespace, WhitespaceSplit, Digits, Metaspace");
  }
}

}  // namespace

PreTokenizerSpec make_pre_tokenizer(const nlohmann::json& spec, const std::string& where) {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  PreTokenizerSpec result;
  add_steps(spec, where, steps, result.byte_level);
  if (steps.size() == 1) {
    result.pre_tokenizer = std::move(steps.front());
  } else if (!steps.empty()) {
    result.pre_tokenizer = std::make_unique<Sequence>(std::move(steps));
  }
  return result;
}

}  // namespace tfm::tokenizer
