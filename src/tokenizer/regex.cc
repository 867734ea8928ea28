#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tfm/error.h"

namespace tfm::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP makes \s, \w and \d Unicode-aware, as they are in the Oniguruma patterns of tokenizers.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(where + ": regex '" + pattern + "' does not compile at offset " +
                std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(owned);
}

std::string Regex::escape(std::string_view literal) {
  std::string out = "\\Q";
  size_t pos = 0;
  // \Q...\E quotes everything except a literal "\E", which must be split out.
  for (size_t e; (e = literal.find("\\E", pos)) != std::string_view::npos; pos = e + 2) {
    out.append(literal.substr(pos, e - pos));
    out += "\\E\\\\E\\Q";
  }
  out.append(literal.substr(pos));
  out += "\\E";
  return out;
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  // One match_data per call: Regex objects are shared between threads.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto match = code_->jit ? &pcre2_jit_match : &pcre2_match;
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc =
        match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("regex match failed with PCRE2 error " + std::to_string(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    if (ovector[1] > ovector[0]) {
      out.emplace_back(ovector[0], ovector[1]);
      pos = ovector[1];
    } else {
      pos = ovector[0] + 1;  // empty match: step over one character
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace tfm::tokenizer
