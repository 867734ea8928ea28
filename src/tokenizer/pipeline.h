// Everything a loaded tokenizer is made of, in the order text flows through it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace tfm::tokenizer {

// What add_special_tokens puts around a sequence (TemplateProcessing and friends).
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
};

// tokenizer_config.json: what transformers adds on top of tokenizer.json.
struct TokenizerConfig {
  std::string chat_template;  // empty when absent
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
};

struct Pipeline {
  std::string source;                       // "tokenizer.json at <path>", for error messages
  AddedTokenMatcher raw_tokens{{}};         // added tokens with normalized=false
  AddedTokenMatcher normalized_tokens{{}};  // the others, matched after normalization
  std::unordered_map<int32_t, AddedToken> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  PostProcessor post_processor;
  std::unique_ptr<Decoder> decoder;
  TokenizerConfig config;
};

// Throws tfm::Error naming the file for anything missing, malformed or unsupported.
std::unique_ptr<Pipeline> load_pipeline(const std::string& tokenizer_json_path,
                                        const std::string& tokenizer_config_json_path);
TokenizerConfig load_tokenizer_config(const std::string& path);
PostProcessor make_post_processor(const nlohmann::json& spec, const std::string& where);
std::unique_ptr<BpeModel> make_model(
    const nlohmann::json& spec, Vocab vocab,
    const std::vector<std::pair<std::string_view, std::string_view>>& merges, bool byte_level,
    const std::string& where);

// Pipeline stages over a whole input; encode.cc.
void encode_into(const Pipeline& pipeline, std::string_view text, std::vector<int32_t>& out);

}  // namespace tfm::tokenizer
