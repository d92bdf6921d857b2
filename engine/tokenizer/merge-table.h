// MergeTable: a BPE vocabulary's merge rules, (left id, right id) -> (rank, merged id), in one
// flat open-addressing table. Built once at load (about 150K rules for a Qwen2 vocabulary, where
// a node-based map spent more on its allocations than on the lookups) and read at every merge
// step of encoding.
//
// Thread contract: const methods are safe from any thread; Insert and Reserve need exclusive
// access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace impress {

struct BpeMerge {
  int32_t rank;    // earlier rules merge first
  int32_t merged;  // the token the pair becomes
};

class MergeTable {
 public:
  // Room for n rules without growing (the table stays at most half full).
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) Rehash(cap);
  }

  // Adds the rule for (left, right) unless the pair has one (the first wins); false when it had.
  // Ids are token ids: 0 <= id < 2^31.
  bool Insert(int32_t left, int32_t right, BpeMerge m) {
    if (2 * (size_ + 1) > slots_.size()) Rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const uint64_t key = Key(left, right);
    Slot& s = slots_[Probe(key)];
    if (s.key == key) return false;
    s = {key, m};
    ++size_;
    return true;
  }

  // Asks the caches for the slot where (left, right) is looked up first: a load's inserts touch
  // the table at random, and asking a few rules ahead lets the misses overlap.
  void Prefetch(int32_t left, int32_t right) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(Key(left, right))]);
  }

  // The rule for (left, right), or null.
  const BpeMerge* Find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[Probe(Key(left, right))];
    return s.key == kEmpty ? nullptr : &s.m;
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of ids below 2^31 has this key
  struct Slot {
    uint64_t key = kEmpty;
    BpeMerge m{};
  };

  static uint64_t Key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

  // The slot holding key, or the empty slot where it would go (Fibonacci hashing: the product's
  // top bits, so pairs that differ in either id spread over the table).
  size_t Home(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  size_t Probe(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    for (const Slot& s : old)
      if (s.key != kEmpty) slots_[Probe(s.key)] = s;
  }

  std::vector<Slot> slots_;
  int shift_ = 64;  // 64 - log2(slots_.size())
  size_t size_ = 0;
};

}  // namespace impress
