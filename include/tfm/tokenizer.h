// Hugging Face tokenizers in C++: reads tokenizer.json (+ tokenizer_config.json) and reproduces
// `tokenizers` id for id, including added/special tokens, decoding and the chat template.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tfm {

namespace tokenizer {
struct Pipeline;  // normalizer, pre-tokenizer, model, post-processor, decoder (src/tokenizer)
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

enum class PaddingSide { kRight, kLeft };

struct BatchEncodeOptions {
  bool add_special_tokens = true;
  // Pad every row to the longest row, or to max_length when pad_to_max_length is set.
  bool padding = true;
  bool pad_to_max_length = false;
  PaddingSide padding_side = PaddingSide::kRight;
  std::optional<size_t> max_length;
  bool truncation = false;  // cut rows longer than max_length (from the right)
};

struct BatchEncoding {
  std::vector<std::vector<int32_t>> input_ids;
  std::vector<std::vector<int32_t>> attention_mask;  // 1 for real tokens, 0 for padding
};

class Tokenizer {
 public:
  // Reads a tokenizer.json; tokenizer_config_json may be empty (no chat template, no eos/pad).
  static Tokenizer from_files(const std::string& tokenizer_json_path,
                              const std::string& tokenizer_config_json_path = "");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Throws tfm::Error when text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  BatchEncoding encode_batch(std::span<const std::string> texts,
                             const BatchEncodeOptions& options = {}) const;
  // Invalid UTF-8 produced by a partial byte sequence becomes U+FFFD, as in `tokenizers`.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Renders tokenizer_config.json's chat_template like transformers' apply_chat_template.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, bool enable_thinking = true) const;

  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  size_t vocab_size() const;  // model vocabulary plus added tokens

 private:
  friend class StreamingDecoder;
  explicit Tokenizer(std::unique_ptr<tokenizer::Pipeline> pipeline);
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::unique_ptr<tokenizer::Pipeline> pipeline_;
};

class AutoTokenizer {
 public:
  // A Hub id ("Qwen/Qwen3-0.6B", resolved in the local cache), a folder holding tokenizer.json,
  // or the path of a tokenizer.json.
  static Tokenizer from_pretrained(const std::string& id_or_path);
};

// Turns ids generated one at a time into text, emitting only complete UTF-8 characters: a
// character split over several byte tokens comes out once its last byte has arrived.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  std::string put(int32_t id);  // the newly completed text, possibly empty
  std::string flush();          // whatever is pending, incomplete bytes as U+FFFD

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // ids whose decoded bytes are not all emitted yet, plus context
  size_t emitted_ = 0;           // bytes of decode(window_) already returned
};

}  // namespace tfm
