// Helpers shared by the store tests: synthetic KV with a reference copy, temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "store/prefix-store.h"

namespace impress::store::testing {

inline std::string TempDir(const std::string& tag) {
  const char* base = std::getenv("IMPRESS_STORE_TEST_DIR");
  std::string root = base && *base ? base : "/tmp";
  std::string d = root + "/impress-store-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Flips one byte inside the data files; returns false if there is none.
inline bool FlipByteInData(const std::string& dir, uint64_t nth_block) {
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("data-", 0) != 0) continue;
    const uint64_t size = std::filesystem::file_size(e.path());
    if (size == 0) continue;
    const uint64_t off = std::min(size - 1, nth_block * 4096 + 1000);
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(off));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(off));
    f.write(&c, 1);
    return true;
  }
  return false;
}

inline std::unique_ptr<PrefixStore> OpenOrDie(const PrefixStoreOptions& o) {
  auto st = PrefixStore::Open(o);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  return st.ok() ? std::move(*st) : nullptr;
}

// The options every store test starts from: a model `model` of layers x heads x dim KV with the
// given probe heads and chunk size, no device or host tier, 256 MiB of SSD, 8 MiB data files,
// reorder only on demand. Tests change what they exercise on the returned value.
inline PrefixStoreOptions TestOptions(const std::string& dir, const std::string& model, int layers, int heads, int dim,
                                      std::vector<int> probe_kv_heads, int chunk_tokens) {
  PrefixStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = model;
  o.n_layer = layers;
  o.n_head_kv = heads;
  o.head_dim = dim;
  o.probe_kv_heads = std::move(probe_kv_heads);
  o.chunk_tokens = chunk_tokens;
  o.device_bytes = 0;
  o.host_bytes = 0;
  o.ssd_bytes = 256ull << 20;
  o.reorder_interval = std::chrono::milliseconds(0);
  o.data_file_bytes = 8ull << 20;
  o.read_gap_blocks = 0;  // the tests count the blocks each read needs exactly
  return o;
}

inline std::vector<int32_t> RandomTokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 50000);
  return t;
}

// Each of positions [0, n) with probability p, ascending; never none.
inline std::vector<uint32_t> RandomPositions(std::mt19937& rng, uint64_t n, double p) {
  std::vector<uint32_t> v;
  std::bernoulli_distribution keep(p);
  for (uint32_t i = 0; i < n; ++i)
    if (keep(rng)) v.push_back(i);
  if (v.empty()) v.push_back(uint32_t(rng() % n));
  return v;
}

// The KV the tests write: a pure function of (model, token prefix hash, position, layer, head,
// dim), so the expected bytes for any position of any sequence can be recomputed independently.
struct SyntheticKV {
  int n_layer, n_head_kv, head_dim;
  // Value of K (is_v = 0) or V (1) for the token at `pos` of `tokens`; depends on the tokens up to pos.
  static f16_t Value(uint64_t prefix_hash, uint64_t pos, int il, int ih, int d, int is_v) {
    uint64_t x = prefix_hash * 0x9E3779B97F4A7C15ull ^ (pos << 20) ^ (uint64_t(il) << 12) ^ (uint64_t(ih) << 8) ^
                 (uint64_t(d) << 1) ^ uint64_t(is_v);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return f16_t(x & 0x7bff);  // finite halves only
  }
  static std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens) {
    std::vector<uint64_t> h(tokens.size());
    uint64_t a = 1469598103934665603ull;
    for (size_t i = 0; i < tokens.size(); ++i) {
      a = (a ^ uint64_t(uint32_t(tokens[i]))) * 1099511628211ull;
      h[i] = a;
    }
    return h;
  }
  // K/V for tokens [start, end) of `tokens`: per layer (n, n_head_kv, head_dim).
  void Make(const std::vector<int32_t>& tokens, size_t start, std::vector<std::vector<f16_t>>* k,
            std::vector<std::vector<f16_t>>* v) const {
    auto ph = PrefixHashes(tokens);
    const size_t n = tokens.size() - start, row = size_t(n_head_kv) * head_dim;
    k->assign(size_t(n_layer), std::vector<f16_t>(n * row));
    v->assign(size_t(n_layer), std::vector<f16_t>(n * row));
    for (int il = 0; il < n_layer; ++il)
      for (size_t t = 0; t < n; ++t)
        for (int ih = 0; ih < n_head_kv; ++ih)
          for (int d = 0; d < head_dim; ++d) {
            (*k)[size_t(il)][t * row + size_t(ih) * head_dim + size_t(d)] =
                Value(ph[start + t], start + t, il, ih, d, 0);
            (*v)[size_t(il)][t * row + size_t(ih) * head_dim + size_t(d)] =
                Value(ph[start + t], start + t, il, ih, d, 1);
          }
  }
  Result<InsertSummary> Insert(PrefixStore& s, const std::vector<int32_t>& tokens, size_t start) const {
    std::vector<std::vector<f16_t>> k, v;
    Make(tokens, start, &k, &v);
    std::vector<LayerKV> layers(static_cast<size_t>(n_layer), LayerKV{});
    for (int il = 0; il < n_layer; ++il) layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data()};
    return s.Insert(tokens, start, layers);
  }
  // Checks a KV read of `positions` of `tokens` against the formula; returns the first mismatch.
  ::testing::AssertionResult Check(const std::vector<int32_t>& tokens, int il, const std::vector<uint32_t>& positions,
                                   const ReadResult& r, bool want_k, bool want_v) const {
    auto ph = PrefixHashes(tokens);
    const size_t row = size_t(n_head_kv) * head_dim;
    if (want_k && r.k.size() != positions.size() * row) return ::testing::AssertionFailure() << "K size " << r.k.size();
    if (want_v && r.v.size() != positions.size() * row) return ::testing::AssertionFailure() << "V size " << r.v.size();
    for (size_t i = 0; i < positions.size(); ++i)
      for (int ih = 0; ih < n_head_kv; ++ih)
        for (int d = 0; d < head_dim; ++d) {
          const size_t at = i * row + size_t(ih) * head_dim + size_t(d);
          const uint32_t p = positions[i];
          if (want_k && r.k[at] != Value(ph[p], p, il, ih, d, 0))
            return ::testing::AssertionFailure()
                   << "K differs at position " << p << " layer " << il << " head " << ih << " dim " << d;
          if (want_v && r.v[at] != Value(ph[p], p, il, ih, d, 1))
            return ::testing::AssertionFailure()
                   << "V differs at position " << p << " layer " << il << " head " << ih << " dim " << d;
        }
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult CheckProbe(const std::vector<int32_t>& tokens, int il, const std::vector<int>& probe_heads,
                                        uint64_t n, const ReadResult& r) const {
    auto ph = PrefixHashes(tokens);
    const size_t row = probe_heads.size() * size_t(head_dim);
    if (r.k.size() != n * row) return ::testing::AssertionFailure() << "probe size " << r.k.size();
    for (uint64_t p = 0; p < n; ++p)
      for (size_t j = 0; j < probe_heads.size(); ++j)
        for (int d = 0; d < head_dim; ++d)
          if (r.k[p * row + j * size_t(head_dim) + size_t(d)] != Value(ph[p], p, il, probe_heads[j], d, 0))
            return ::testing::AssertionFailure() << "probe key differs at position " << p << " layer " << il;
    return ::testing::AssertionSuccess();
  }
};

// Reads K and V of every layer at the first `n` tokens of `tokens` (which must match exactly n)
// and checks them bit for bit against the formula.
inline ::testing::AssertionResult ReadsExact(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& tokens,
                                             uint64_t n) {
  MatchHandle h = s.Match(tokens);
  if (h.n_matched != n) return ::testing::AssertionFailure() << "matched " << h.n_matched << ", expected " << n;
  std::vector<uint32_t> pos(n);
  for (uint32_t p = 0; p < n; ++p) pos[p] = p;
  for (int il = 0; il < kv.n_layer && n > 0; ++il) {
    auto t = s.SubmitReadKV(h, il, pos, true, true);
    if (!t.ok()) return ::testing::AssertionFailure() << t.status().ToString();
    auto r = s.Wait(*t);
    if (!r.ok()) return ::testing::AssertionFailure() << r.status().ToString();
    auto c = kv.Check(tokens, il, pos, *r, true, true);
    if (!c) return c;
  }
  Status rs = s.Release(h);
  if (!rs.ok()) return ::testing::AssertionFailure() << rs.ToString();
  return ::testing::AssertionSuccess();
}

}  // namespace impress::store::testing
