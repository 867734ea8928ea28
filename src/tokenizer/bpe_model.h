// The BPE model of tokenizer.json: a vocabulary, merges applied by rank, and the two ways of
// starting a word: from bytes (GPT-2 byte-level) or from characters with byte_fallback and unk
// (sentencepiece-style, Llama-2 and Mistral).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge_table.h"
#include "tokenizer/vocab.h"
#include "tokenizer/word_cache.h"

namespace tfm::tokenizer {

struct BpeOptions {
  bool byte_level = false;  // words are raw bytes; each byte starts as its byte-level token
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is a token is used whole
  std::optional<std::string> unk_token;
};

// Per-call working memory, reused across the words of one encode.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // linked list over the word, -1 at the ends
    bool removed;
  };
  struct Candidate {
    int32_t rank, pos, new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string text;
};

class BpeModel {
 public:
  // merges: pairs of token strings by rank. Throws tfm::Error naming `where` for merges whose
  // parts or result are not in the vocabulary.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string_view, std::string_view>>& merges,
           BpeOptions options, const std::string& where);

  // Appends the ids of one word (already normalized and pre-tokenized).
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string_view* id_to_token(int32_t id) const { return vocab_.token(id); }
  size_t size() const { return vocab_.size(); }

 private:
  void start_word(std::string_view word, BpeScratch& scratch) const;
  void push_symbol(int32_t id, BpeScratch& scratch) const;
  void merge(BpeScratch& scratch) const;

  Vocab vocab_;
  MergeTable merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_;  // byte-level: token of each byte; else <0xXX> tokens
  mutable WordCache cache_;            // a memo: encoding stays logically const
};

}  // namespace tfm::tokenizer
