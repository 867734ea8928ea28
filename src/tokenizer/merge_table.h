// Open-addressing hash table from a pair of token ids to the merge they form: the BPE inner loop
// looks pairs up constantly, and a flat table beats std::unordered_map's node chasing.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace tfm::tokenizer {

struct MergeResult {
  int32_t rank;    // lower merges first
  int32_t new_id;  // the token the pair becomes
};

class MergeTable {
 public:
  void reserve(size_t count) {
    const size_t capacity = std::bit_ceil(count * 2 + 16);
    slots_.assign(capacity, Slot{kEmpty, {0, 0}});
    shift_ = 64 - std::countr_zero(capacity);
  }

  // Keeps the first insertion of a pair, as tokenizers does for duplicated merges.
  void insert(int32_t left, int32_t right, MergeResult result) {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == kEmpty) {
        slots_[i] = Slot{key, result};
        return;
      }
    }
  }

  const MergeResult* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].result;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    MergeResult result;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ULL) >> shift_; }

  std::vector<Slot> slots_ = std::vector<Slot>(16, Slot{kEmpty, {0, 0}});
  int shift_ = 60;
};

}  // namespace tfm::tokenizer
