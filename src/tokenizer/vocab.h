// Token strings <-> ids in flat arrays: one arena for the text and an open-addressing index. The
// 150k-token vocabularies of current models load and look up several times faster this way than
// in a node-based std::unordered_map (one allocation and one cache miss per token).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::tokenizer {

class Vocab {
 public:
  void reserve(size_t count);
  // False when the token or the id is already present (the first one stays).
  bool add(std::string_view token, int32_t id);
  std::optional<int32_t> find(std::string_view token) const;
  const std::string_view* token(int32_t id) const;  // nullptr when the id has no token
  size_t size() const { return count_; }
  size_t id_limit() const { return tokens_.size(); }  // one past the largest id

 private:
  struct Slot {
    uint32_t hash;  // high bits of the hash, to skip most string compares
    int32_t id;     // -1: empty
  };
  static uint64_t hash(std::string_view token);
  void grow();

  std::vector<std::string> arena_;        // token text in blocks that never move
  std::vector<std::string_view> tokens_;  // by id; empty data() == no token
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace tfm::tokenizer
