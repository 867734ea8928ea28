#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "tfm/error.h"
#include "tokenizer/json_spec.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

bool is_ascii(const std::string& text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    // ASCII text is already in every normalization form.
    if (is_ascii(text)) return;
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &out,
                                static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw Error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
    text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    free(out);
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      const char32_t c = next_char(text, pos);
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
    text = std::move(out);
  }
};

class Replace : public Normalizer {
 public:
  Replace(const nlohmann::json& spec, const std::string& where)
      : regex_(pattern_of(spec, where), where), content_(string_field(spec, "content", where)) {}
  void normalize(std::string& text) const override {
    std::vector<Span> matches;
    regex_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    size_t last = 0;
    for (const auto& [begin, end] : matches) {
      out.append(text, last, begin - last);
      out += content_;
      last = end;
    }
    out.append(text, last);
    text = std::move(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t end = text.size();
    while (right_ && end > 0) {
      size_t prev = end;
      if (!is_whitespace(prev_char(text, prev))) break;
      end = prev;
    }
    size_t begin = 0;
    while (left_ && begin < end) {
      size_t next = begin;
      if (!is_whitespace(next_char(text, next))) break;
      begin = next;
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = type_of(spec, "normalizer", where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  }
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE |
                                               UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE |
                                               UTF8PROC_COMPAT);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(spec, "prepend", where));
  if (type == "Strip") {
    return std::make_unique<Strip>(flag_field(spec, "strip_left", true, where),
                                   flag_field(spec, "strip_right", true, where));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : array_field(spec, "normalizers", where)) {
      if (auto normalizer = make_normalizer(step, where)) steps.push_back(std::move(normalizer));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw unsupported(where, "normalizer", type,
                    "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence");
}

}  // namespace tfm::tokenizer
