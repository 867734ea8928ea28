#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_spec.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

class ByteLevel : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      // Tokens outside the byte mapping (added tokens such as "<|im_end|>" with non-ASCII text)
      // are kept as they are, like tokenizers does.
      const size_t before = bytes.size();
      if (!chars_to_bytes(token, bytes)) {
        bytes.resize(before);
        bytes += token;
      }
    }
    tokens.assign(1, std::move(bytes));
  }
};

class Replace : public Decoder {
 public:
  Replace(const nlohmann::json& spec, const std::string& where)
      : regex_(pattern_of(spec, where), where), content_(string_field(spec, "content", where)) {}
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<Span> matches;
    for (auto& token : tokens) {
      // Tokens here may hold partial UTF-8 (after ByteLevel); match only the valid prefix.
      matches.clear();
      regex_.find_all(std::string_view(token).substr(0, valid_prefix(token)), matches);
      std::string out;
      size_t last = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, last, begin - last);
        out += content_;
        last = end;
      }
      out.append(token, last);
      token = std::move(out);
    }
  }

 private:
  static size_t valid_prefix(const std::string& text) {
    const size_t bad = find_invalid_utf8(text);
    return bad == std::string::npos ? text.size() : bad;
  }
  Regex regex_;
  std::string content_;
};

class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// "<0x41>" tokens become bytes; a run of them that is not valid UTF-8 becomes one U+FFFD per
// byte, as in tokenizers.
class ByteFallback : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_count = 0;
    const auto flush = [&] {
      if (byte_count == 0) return;
      if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < byte_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      byte_count = 0;
    };
    for (auto& token : tokens) {
      if (const int b = byte_of(token); b >= 0) {
        bytes += static_cast<char>(b);
        ++byte_count;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int byte_of(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    int value = 0;
    for (char c : token.substr(3, 2)) {
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                               : -1;
      if (digit < 0) return -1;
      value = value * 16 + digit;
    }
    return value;
  }
};

class Fuse : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& token : tokens) all += token;
    tokens.assign(1, std::move(all));
  }
};

class Metaspace : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // tokenizers drops every replacement character of the first token, not only a leading one.
      const std::string space = i == 0 && strip_first_ ? "" : " ";
      std::string out;
      size_t last = 0;
      for (size_t p; (p = tokens[i].find(replacement_, last)) != std::string::npos;
           last = p + replacement_.size()) {
        out.append(tokens[i], last, p - last);
        out += space;
      }
      out.append(tokens[i], last);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = type_of(spec, "decoder", where);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Replace") return std::make_unique<Replace>(spec, where);
  if (type == "Strip") {
    return std::make_unique<Strip>(string_field(spec, "content", where),
                                   int_field(spec, "start", 0, where),
                                   int_field(spec, "stop", 0, where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Metaspace") {
    const std::string scheme = text_field(spec, "prepend_scheme", "always", where);
    const bool prefix = spec.contains("prepend_scheme")
                            ? scheme != "never"
                            : flag_field(spec, "add_prefix_space", true, where);
    return std::make_unique<Metaspace>(string_field(spec, "replacement", where), prefix);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : array_field(spec, "decoders", where)) {
      if (auto decoder = make_decoder(step, where)) steps.push_back(std::move(decoder));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw unsupported(where, "decoder", type,
                    "ByteLevel, Replace, Strip, ByteFallback, Fuse, Metaspace, Sequence");
}

}  // namespace tfm::tokenizer
