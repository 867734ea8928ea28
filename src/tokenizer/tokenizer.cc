// The public Tokenizer: encode, decode and vocabulary accessors over a loaded Pipeline.
#include "tfm/tokenizer.h"

#include "tfm/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/utf8.h"

namespace tfm {

Tokenizer::Tokenizer(std::unique_ptr<tokenizer::Pipeline> pipeline)
    : pipeline_(std::move(pipeline)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_files(const std::string& tokenizer_json_path,
                                const std::string& tokenizer_config_json_path) {
  return Tokenizer(tokenizer::load_pipeline(tokenizer_json_path, tokenizer_config_json_path));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const size_t bad = tokenizer::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw Error("tokenizer (" + pipeline_->source + "): input text is not valid UTF-8 at byte " +
                std::to_string(bad) + " of " + std::to_string(text.size()));
  }
  const auto& post = pipeline_->post_processor;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids = post.prefix;
  tokenizer::encode_into(*pipeline_, text, ids);
  if (add_special_tokens) ids.insert(ids.end(), post.suffix.begin(), post.suffix.end());
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const auto& p = *pipeline_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const auto added = p.added_by_id.find(id); added != p.added_by_id.end()) {
      if (!(skip_special_tokens && added->second.special)) tokens.push_back(added->second.content);
    } else if (const std::string_view* token = p.model->id_to_token(id)) {
      tokens.emplace_back(*token);
    }  // unknown ids are dropped, as in tokenizers
  }
  if (p.decoder) p.decoder->decode(tokens);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !p.decoder) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return tokenizer::utf8_lossy(decode_bytes(ids, skip_special_tokens));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto& p = *pipeline_;
  if (const auto it = p.added_by_content.find(std::string(token)); it != p.added_by_content.end()) {
    return it->second;
  }
  return p.model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const auto& p = *pipeline_;
  if (const auto it = p.added_by_id.find(id); it != p.added_by_id.end()) return it->second.content;
  if (const std::string_view* token = p.model->id_to_token(id)) return std::string(*token);
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const auto it = pipeline_->added_by_id.find(id);
  return it != pipeline_->added_by_id.end() && it->second.special;
}

size_t Tokenizer::vocab_size() const {
  size_t size = pipeline_->model->size();
  for (const auto& [id, token] : pipeline_->added_by_id) {
    if (!pipeline_->model->id_to_token(id)) ++size;
  }
  return size;
}

std::optional<int32_t> Tokenizer::eos_token_id() const {
  const auto& token = pipeline_->config.eos_token;
  return token ? token_to_id(*token) : std::nullopt;
}

std::optional<int32_t> Tokenizer::pad_token_id() const {
  const auto& token = pipeline_->config.pad_token;
  return token ? token_to_id(*token) : std::nullopt;
}

std::optional<int32_t> Tokenizer::bos_token_id() const {
  const auto& token = pipeline_->config.bos_token;
  return token ? token_to_id(*token) : std::nullopt;
}

}  // namespace tfm
