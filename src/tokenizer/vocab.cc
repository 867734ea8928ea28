#include "tokenizer/vocab.h"

#include <bit>
#include <cstring>

namespace tfm::tokenizer {
namespace {

constexpr size_t kArenaBlock = 1 << 20;

}  // namespace

uint64_t Vocab::hash(std::string_view token) {
  // FNV-1a is enough here: tokens are short and the table is at most half full.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : token) h = (h ^ c) * 0x100000001b3ULL;
  return h ^ (h >> 29);
}

void Vocab::reserve(size_t count) {
  if (slots_.size() >= count * 2) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(std::bit_ceil(count * 2 + 16), Slot{0, -1});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    const uint64_t h = hash(tokens_[slot.id]);
    size_t i = h & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

void Vocab::grow() { reserve(std::max<size_t>(count_ * 2, 1024)); }

bool Vocab::add(std::string_view token, int32_t id) {
  if (id < 0) return false;
  if ((count_ + 1) * 2 > slots_.size()) grow();
  if (static_cast<size_t>(id) < tokens_.size() && tokens_[id].data() != nullptr) return false;
  const uint64_t h = hash(token);
  const auto tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  for (; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash == tag && tokens_[slots_[i].id] == token) return false;
  }
  if (arena_.empty() || arena_.back().size() + token.size() > arena_.back().capacity()) {
    arena_.emplace_back().reserve(std::max(kArenaBlock, token.size()));
  }
  std::string& block = arena_.back();
  const size_t offset = block.size();
  block.append(token);
  if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(id) + 1);
  // Non-null even for the empty token, so that "present" stays distinguishable.
  tokens_[id] = std::string_view(block.data() + offset, token.size());
  slots_[i] = Slot{tag, id};
  ++count_;
  return true;
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t h = hash(token);
  const auto tag = static_cast<uint32_t>(h >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash == tag && tokens_[slots_[i].id] == token) return slots_[i].id;
  }
  return std::nullopt;
}

const std::string_view* Vocab::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[id].data() == nullptr) {
    return nullptr;
  }
  return &tokens_[id];
}

}  // namespace tfm::tokenizer
