#include "app/serve/prefix-scopes.h"

#include <random>

namespace impress::serve {
namespace {

// SplitMix64's finalizer: every input bit moves every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

}  // namespace

PrefixScopes::PrefixScopes(size_t max_hashes) : max_hashes_(max_hashes), seed_(RandomSeed()) {}

uint64_t PrefixScopes::Next(uint64_t h, int32_t token) const {
  return Mix(h ^ Mix(seed_ + uint64_t(uint32_t(token)) + 0x9e3779b97f4a7c15ULL));
}

int PrefixScopes::Reusable(const std::string& scope, std::span<const int32_t> tokens, int limit) {
  MutexLock lock(&mu_);
  auto it = known_.find(scope);
  if (it == known_.end()) return 0;
  const auto& known = it->second;
  const int n = std::min(limit, int(tokens.size()));
  uint64_t h = seed_;
  // Records hold every prefix of what they recorded, so the first unknown prefix ends the match.
  for (int i = 0; i < n; ++i) {
    h = Next(h, tokens[size_t(i)]);
    if (!known.contains(h)) return i;
  }
  return std::max(n, 0);
}

void PrefixScopes::Record(const std::string& scope, std::span<const int32_t> tokens) {
  MutexLock lock(&mu_);
  Entry e{scope, {}};
  e.hashes.reserve(tokens.size());
  auto& known = known_[scope];
  uint64_t h = seed_;
  for (const int32_t t : tokens) {
    h = Next(h, t);
    e.hashes.push_back(h);
    ++known[h];
  }
  n_hashes_ += e.hashes.size();
  records_.push_back(std::move(e));
  // Forget the oldest records past the cap (never the one just made).
  while (n_hashes_ > max_hashes_ && records_.size() > 1) {
    Entry& old = records_.front();
    auto& k = known_[old.scope];
    for (const uint64_t x : old.hashes) {
      auto f = k.find(x);
      if (f != k.end() && --f->second == 0) k.erase(f);
    }
    if (k.empty()) known_.erase(old.scope);
    n_hashes_ -= old.hashes.size();
    records_.pop_front();
  }
}

size_t PrefixScopes::n_hashes() {
  MutexLock lock(&mu_);
  return n_hashes_;
}

}  // namespace impress::serve
