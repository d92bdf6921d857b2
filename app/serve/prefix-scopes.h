// PrefixScopes: which prompt prefixes each API key has sent, so that `impress serve` reuses for a
// request only stored KV of tokens its own key sent (or was answered) before. Without it, the
// store matches any client's prompt against every other client's, and the reuse a response
// reports (usage.prompt_tokens_details.cached_tokens) or its speed tells one client what another
// sent, token by token. The server caps a request's reusable prefix at Reusable() before the
// store's lookup; with --shared-cache, or without API keys (one user), it keeps no scopes.
//
// A scope remembers a keyed 64-bit hash of every prefix of what it recorded (8-16 bytes each),
// at most max_hashes in all; past that, the oldest records are forgotten (their prefixes are
// then recomputed once for that scope, never shared).
//
// Thread contract: internally synchronized.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"

namespace impress::serve {

class PrefixScopes {
 public:
  explicit PrefixScopes(size_t max_hashes = size_t(1) << 21);

  // The longest n <= limit such that `scope` recorded tokens[0, n) (as a prefix of a record).
  int Reusable(const std::string& scope, std::span<const int32_t> tokens, int limit) EXCLUDES(mu_);
  // `scope` sent (or was answered) `tokens`: every prefix of them becomes reusable for it.
  void Record(const std::string& scope, std::span<const int32_t> tokens) EXCLUDES(mu_);
  size_t n_hashes() EXCLUDES(mu_);

 private:
  struct Entry {
    std::string scope;
    std::vector<uint64_t> hashes;  // the prefixes this record added
  };
  uint64_t Next(uint64_t h, int32_t token) const;

  const size_t max_hashes_;
  const uint64_t seed_;  // random per server: prefix hashes cannot be predicted from outside
  Mutex mu_;
  // scope -> prefix hash -> how many records hold it.
  std::unordered_map<std::string, std::unordered_map<uint64_t, uint32_t>> known_ GUARDED_BY(mu_);
  std::deque<Entry> records_ GUARDED_BY(mu_);  // oldest first
  size_t n_hashes_ GUARDED_BY(mu_) = 0;
};

}  // namespace impress::serve
