// StringIndex: strings held elsewhere (a tokenizer's token texts and pieces) to ids, in one flat
// open-addressing table of views. Built once at load, 150K entries for a Qwen2 vocabulary: a
// table of std::string keys made that many copies and allocations, most of a model's start-up.
//
// The strings must stay where they are while the index is used (the tokenizer's vectors of
// strings: a move of the vector keeps its elements in place; a copy of the tokenizer rebuilds).
//
// Thread contract: const methods are safe from any thread; Insert needs exclusive access.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace impress {

class StringIndex {
 public:
  // Room for n keys without growing (the table stays at most half full).
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) Rehash(cap);
  }

  static size_t Hash(std::string_view key) { return std::hash<std::string_view>()(key); }

  // Adds key -> id unless key is present (the first of duplicates wins); false when present.
  bool Insert(std::string_view key, int32_t id) { return Insert(key, id, Hash(key)); }
  bool Insert(std::string_view key, int32_t id, size_t hash) {  // hash: Hash(key)
    if (2 * (size_ + 1) > slots_.size()) Rehash(slots_.empty() ? 16 : 2 * slots_.size());
    Slot& s = slots_[Probe(key, hash)];
    if (s.id >= 0) return false;
    s = {key.data(), uint32_t(key.size()), id};
    ++size_;
    return true;
  }

  // The id of key, or -1.
  int32_t Find(std::string_view key) const { return Find(key, Hash(key)); }
  int32_t Find(std::string_view key, size_t hash) const {
    if (slots_.empty()) return -1;
    return slots_[Probe(key, hash)].id;
  }

  // Asks the caches for the slot a key of this hash is looked for first. Building an index of
  // 150K keys is one cache miss after another; asked for a few keys ahead, they overlap.
  void Prefetch(size_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
  }

  // Then, once that slot is in the cache: the string it holds, which a lookup of a key that
  // lands there compares (most lookups of a key in the index end at their first slot).
  void PrefetchKey(size_t hash) const {
    if (slots_.empty()) return;
    const Slot& s = slots_[hash & (slots_.size() - 1)];
    if (s.id >= 0) __builtin_prefetch(s.p);
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    const char* p = nullptr;
    uint32_t n = 0;
    int32_t id = -1;  // -1: empty
  };

  // The slot holding key, or the empty slot where it would go.
  size_t Probe(std::string_view key, size_t hash) const {
    const size_t mask = slots_.size() - 1;
    size_t i = hash & mask;
    while (slots_[i].id >= 0 && std::string_view(slots_[i].p, slots_[i].n) != key) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    for (const Slot& s : old)
      if (s.id >= 0) slots_[Probe(std::string_view(s.p, s.n), Hash(std::string_view(s.p, s.n)))] = s;
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace impress
