#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "tfm/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tfm::tokenizer {
namespace {

// Heap order: lowest rank first, then leftmost, as in tokenizers' Word::merge_all.
bool later(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

}  // namespace

BpeModel::BpeModel(Vocab vocab,
                   const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    merged.assign(left).append(right);
    const auto l = token_to_id(left), r = token_to_id(right), m = token_to_id(merged);
    if (!l || !r || !m) {
      throw Error(where + ": model.merges[" + std::to_string(rank) + "] ('" + std::string(left) +
                  "', '" + std::string(right) + "') uses a token missing from model.vocab: '" +
                  std::string(!l   ? left
                              : !r ? right
                                   : std::string_view(merged)) +
                  "'");
    }
    merges_.insert(*l, *r, {static_cast<int32_t>(rank), *m});
  }

  if (options_.unk_token) {
    unk_id_ = token_to_id(*options_.unk_token);
    if (!unk_id_) {
      throw Error(where + ": model.unk_token '" + *options_.unk_token + "' is not in model.vocab");
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto id = token_to_id(options_.byte_level ? byte_to_chars()[b] : std::string(name));
    byte_ids_[b] = id.value_or(-1);
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  return vocab_.find(token);
}

void BpeModel::push_symbol(int32_t id, BpeScratch& scratch) const {
  const auto index = static_cast<int32_t>(scratch.symbols.size());
  scratch.symbols.push_back({id, index - 1, -1, false});
  if (index > 0) scratch.symbols[index - 1].next = index;
}

void BpeModel::start_word(std::string_view word, BpeScratch& scratch) const {
  scratch.symbols.clear();
  if (options_.byte_level) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) {
        push_symbol(byte_ids_[b], scratch);
      } else if (unk_id_) {
        push_symbol(*unk_id_, scratch);
      }
    }
    return;
  }
  // A run of unknown characters becomes one unk token with fuse_unk, one per character without.
  bool last_was_unk = false;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    pos += utf8_char_length(static_cast<unsigned char>(word[pos]));
    const std::string_view c = word.substr(begin, pos - begin);
    if (const auto id = token_to_id(c)) {
      push_symbol(*id, scratch);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids_[uint8_t(b)] >= 0; })) {
      for (char b : c) push_symbol(byte_ids_[static_cast<unsigned char>(b)], scratch);
      last_was_unk = false;
      continue;
    }
    if (!unk_id_) continue;  // tokenizers drops characters it cannot represent
    if (!(last_was_unk && options_.fuse_unk)) push_symbol(*unk_id_, scratch);
    last_was_unk = true;
  }
}

void BpeModel::merge(BpeScratch& scratch) const {
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  heap.clear();
  const auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const MergeResult* m = merges_.find(symbols[pos].id, symbols[next].id)) {
      heap.push_back({m->rank, pos, m->new_id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    auto& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    auto& right = symbols[left.next];
    // Skip entries made stale by an earlier merge of either symbol.
    const MergeResult* current = merges_.find(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
}

void BpeModel::encode_word(std::string_view word, BpeScratch& scratch,
                           std::vector<int32_t>& out) const {
  if (word.empty() || cache_.lookup(word, out)) return;
  const size_t before = out.size();
  std::optional<int32_t> whole;
  if (options_.ignore_merges) {
    whole = token_to_id(options_.byte_level ? (scratch.text = bytes_to_chars(word)) : word);
  }
  if (whole) {
    out.push_back(*whole);
  } else {
    start_word(word, scratch);
    merge(scratch);
    for (int32_t i = scratch.symbols.empty() ? -1 : 0; i >= 0; i = scratch.symbols[i].next) {
      out.push_back(scratch.symbols[i].id);
    }
  }
  cache_.insert(word, out, out.size() - before);
}

}  // namespace tfm::tokenizer
