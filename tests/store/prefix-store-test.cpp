// PrefixStore: round trips (before/after reorder, across reopen), faults (flipped bytes, disk
// full, io_uring refused, another model's catalog), SSD budget, tiers, concurrency.
#include "store/prefix-store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "store/extent-files.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::FlipByteInData;
using testing::RandomPositions;
using testing::RandomTokens;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 3, kHeads = 3, kDim = 64;

PrefixStoreOptions SmallOptions(const std::string& dir) {
  return TestOptions(dir, "model-A", kLayers, kHeads, kDim, {0, 2}, 16);
}

// Reads random position sets of every layer of `tokens` and checks them bit for bit.
void CheckSequence(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& tokens, std::mt19937& rng,
                   uint64_t expect_matched, const std::vector<int>& probe_heads = {0, 2}) {
  MatchHandle h = s.Match(tokens);
  ASSERT_EQ(h.n_matched, expect_matched);
  if (h.n_matched == 0) return;
  for (int il = 0; il < kv.n_layer; ++il) {
    auto pos = RandomPositions(rng, h.n_matched, 0.3);
    bool want_k = rng() % 3 != 0, want_v = !want_k || rng() % 2;
    auto t = s.SubmitReadKV(h, il, pos, want_k, want_v);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto r = s.Wait(*t);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kv.Check(tokens, il, pos, *r, want_k, want_v));
    auto tp = s.SubmitProbeKeys(h, il);
    ASSERT_TRUE(tp.ok());
    auto rp = s.Wait(*tp);
    ASSERT_TRUE(rp.ok()) << rp.status().ToString();
    EXPECT_TRUE(kv.CheckProbe(tokens, il, probe_heads, h.n_matched, *rp));
  }
  ASSERT_TRUE(s.Release(h).ok());
}

TEST(PrefixStore, RoundTripRandomNodesLayersPositions) {
  std::string dir = TempDir("rt");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(7);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  PrefixStore& s = **st;
  // Sequences that share prefixes and diverge inside nodes (forcing splits).
  std::vector<std::vector<int32_t>> seqs;
  auto base = RandomTokens(rng, 300);
  seqs.push_back(base);
  for (int i = 0; i < 6; ++i) {
    size_t cut = 5 + rng() % 290;
    auto t = std::vector<int32_t>(base.begin(), base.begin() + long(cut));
    auto tail = RandomTokens(rng, 20 + rng() % 100);
    t.insert(t.end(), tail.begin(), tail.end());
    seqs.push_back(t);
  }
  for (auto& t : seqs) {
    MatchHandle h = s.Match(t);
    auto r = kv.Insert(s, t, h.n_matched);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(s.Release(h).ok());
  }
  for (auto& t : seqs) CheckSequence(s, kv, t, rng, t.size());
  // A query that extends a cached sequence matches exactly the cached part.
  auto longer = seqs[2];
  longer.push_back(123456);
  CheckSequence(s, kv, longer, rng, seqs[2].size());
  // Partial reads are finer than a chunk: one token of one layer reads at most 2 blocks.
  MatchHandle h = s.Match(seqs[0]);
  auto t = s.SubmitReadKV(h, 1, std::vector<uint32_t>{37}, true, true);
  ASSERT_TRUE(t.ok());
  auto r = s.Wait(*t);
  ASSERT_TRUE(r.ok());
  EXPECT_LE(r->stats.ssd_bytes, 2u * 4096u);
  EXPECT_EQ(r->stats.chunks_ssd, 1u);
  ASSERT_TRUE(s.Release(h).ok());
  ASSERT_TRUE(s.CheckConsistency().ok());
  // Reopen: same tree, same bytes.
  st->reset();
  auto st2 = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st2.ok()) << st2.status().ToString();
  for (auto& q : seqs) CheckSequence(**st2, kv, q, rng, q.size());
  EXPECT_TRUE((*st2)->CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, BadArgumentsAreClearErrors) {
  std::string dir = TempDir("args");
  SyntheticKV kv{kLayers, kHeads, kDim};
  auto o = SmallOptions(dir);
  o.probe_kv_heads = {5};
  EXPECT_EQ(PrefixStore::Open(o).status().code(), Status::Code::kInvalidArgument);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok());
  std::mt19937 rng(1);
  auto t = RandomTokens(rng, 40);
  ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
  MatchHandle h = (*st)->Match(t);
  EXPECT_FALSE((*st)->SubmitReadKV(h, 0, std::vector<uint32_t>{5, 3}, true, true).ok());     // not ascending
  EXPECT_FALSE((*st)->SubmitReadKV(h, 0, std::vector<uint32_t>{40}, true, true).ok());       // past the match
  EXPECT_FALSE((*st)->SubmitReadKV(h, kLayers, std::vector<uint32_t>{1}, true, true).ok());  // bad layer
  auto other = RandomTokens(rng, 30);
  EXPECT_EQ(kv.Insert(**st, other, 10).status().code(), Status::Code::kNotFound);  // gap not cached
  // Release clears the handle (releasing it again is harmless); a stale copy of a released handle
  // is refused everywhere, and the released node is no longer locked: it can be evicted.
  const MatchHandle stale = h;
  ASSERT_NE(stale.id, 0u);
  ASSERT_TRUE((*st)->Release(h).ok());
  EXPECT_EQ(h.id, 0u);
  EXPECT_TRUE((*st)->Release(h).ok());
  MatchHandle again = stale;
  EXPECT_EQ((*st)->Release(again).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ((*st)->SubmitReadKV(stale, 0, std::vector<uint32_t>{1}, true, true).status().code(),
            Status::Code::kInvalidArgument);
  auto evicted = (*st)->EvictNodes(1);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_EQ(*evicted, 1u);
  EXPECT_EQ((*st)->Match(t).n_matched, 0u);
  std::filesystem::remove_all(dir);
}

// The background reorder follows SetReorderInterval at once: off -> every 20 ms -> off.
TEST(PrefixStore, ReorderIntervalChangesWhileOpen) {
  std::string dir = TempDir("interval");
  auto o = SmallOptions(dir);
  o.reorder_interval = std::chrono::milliseconds(0);
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  PrefixStore& s = **st;
  auto passes = [&] { return s.Stats().reorder_passes; };
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(passes(), 0u) << "interval 0: no background pass";
  s.SetReorderInterval(std::chrono::milliseconds(20));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (passes() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(passes(), 3u) << "a 20 ms interval runs passes";
  s.SetReorderInterval(std::chrono::milliseconds(0));
  // A pass already in flight may still finish (however long a loaded machine makes it take); no
  // new one may start.
  const uint64_t stopped = passes();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(passes(), stopped + 1) << "back to 0: no more passes";
  std::filesystem::remove_all(dir);
}

// Importance: every 4th token (plus a few) matters. Reorder packs them into fewer chunks.
TEST(PrefixStore, ReorderPacksImportantTokensAndKeepsData) {
  std::string dir = TempDir("reorder");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(11);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok());
  PrefixStore& s = **st;
  auto t = RandomTokens(rng, 512);
  ASSERT_TRUE(kv.Insert(s, t, 0).ok());
  std::vector<uint32_t> important;
  for (uint32_t i = 0; i < t.size(); ++i)
    if (i % 4 == 1 || i < 4) important.push_back(i);
  auto chunks_for_important = [&](PrefixStore& ps) {
    MatchHandle h = ps.Match(t);
    uint32_t n = 0;
    for (int il = 0; il < kLayers; ++il) {
      auto tk = ps.SubmitReadKV(h, il, important, true, true);
      EXPECT_TRUE(tk.ok());
      auto r = ps.Wait(*tk);
      EXPECT_TRUE(r.ok());
      EXPECT_TRUE(kv.Check(t, il, important, *r, true, true));
      n += r->stats.chunks();
    }
    EXPECT_TRUE(ps.Release(h).ok());
    return n;
  };
  const uint32_t before = chunks_for_important(s);
  for (int rep = 0; rep < 3; ++rep) {
    MatchHandle h = s.Match(t);
    for (int il = 0; il < kLayers; ++il) ASSERT_TRUE(s.ReportImportance(h, il, important).ok());
    ASSERT_TRUE(s.Release(h).ok());
  }
  // A reader holding the old layout keeps reading correct data across the swap.
  MatchHandle old_h = s.Match(t);
  auto rep = s.ReorderNow();
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->segments_reordered, 1u);
  CheckSequence(s, kv, t, rng, t.size());
  auto tk = s.SubmitReadKV(old_h, 2, important, true, true);
  ASSERT_TRUE(tk.ok());
  auto r = s.Wait(*tk);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(kv.Check(t, 2, important, *r, true, true));
  ASSERT_TRUE(s.Release(old_h).ok());
  const uint32_t after = chunks_for_important(s);
  std::printf("[reorder] chunks needed for %zu important tokens x %d layers: before %u, after %u\n", important.size(),
              kLayers, before, after);
  EXPECT_LT(after, before);
  EXPECT_LE(after, (uint32_t(important.size()) + 15) / 16 * kLayers + kLayers);
  // A second reorder with unchanged statistics rewrites nothing.
  auto rep2 = s.ReorderNow();
  ASSERT_TRUE(rep2.ok());
  EXPECT_EQ(rep2->segments_reordered, 0u);
  // Reopen: the mapping list survives; the reorder's old extents were freed.
  st->reset();
  auto st2 = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st2.ok());
  EXPECT_EQ(chunks_for_important(**st2), after);
  CheckSequence(**st2, kv, t, rng, t.size());
  EXPECT_TRUE((*st2)->CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

// The pipeline selects tokens per layer, and which tokens matter differs between layers. Each
// layer gets its own mapping list, so after a reorder every layer needs fewer chunks and blocks.
TEST(PrefixStore, ReorderIsPerLayerSoEveryLayerPacksItsOwnImportantTokens) {
  std::string dir = TempDir("reorder-layers");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(13);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok());
  PrefixStore& s = **st;
  const uint32_t n = 512, C = 16;
  auto t = RandomTokens(rng, n);
  ASSERT_TRUE(kv.Insert(s, t, 0).ok());
  // Disjoint patterns: layer 0 every 4th token from 1, layer 1 every 4th from 3, layer 2 a block
  // of 128 tokens in the middle (contiguous already: reorder must not make it worse).
  std::vector<std::vector<uint32_t>> important(kLayers);
  for (uint32_t i = 0; i < n; ++i) {
    if (i % 4 == 1) important[0].push_back(i);
    if (i % 4 == 3) important[1].push_back(i);
    if (i >= 200 && i < 328) important[2].push_back(i);
  }
  struct Cost {
    uint32_t chunks = 0;
    uint64_t ssd_bytes = 0, useful = 0;
  };
  auto cost = [&](PrefixStore& ps, int il) {
    MatchHandle h = ps.Match(t);
    auto tk = ps.SubmitReadKV(h, il, important[size_t(il)], true, true);
    EXPECT_TRUE(tk.ok());
    auto r = ps.Wait(*tk);
    EXPECT_TRUE(r.ok());
    EXPECT_TRUE(kv.Check(t, il, important[size_t(il)], *r, true, true));
    EXPECT_TRUE(ps.Release(h).ok());
    return Cost{r->stats.chunks(), r->stats.ssd_bytes, r->stats.useful_bytes};
  };
  std::vector<Cost> before(kLayers);
  for (int il = 0; il < kLayers; ++il) before[size_t(il)] = cost(s, il);
  for (int rep = 0; rep < 3; ++rep) {
    MatchHandle h = s.Match(t);
    for (int il = 0; il < kLayers; ++il) ASSERT_TRUE(s.ReportImportance(h, il, important[size_t(il)]).ok());
    ASSERT_TRUE(s.Release(h).ok());
  }
  // Reference: one mapping list shared by all layers, sorted by importance summed over layers
  // (the layout this replaced), simulated here: chunks each layer would then touch.
  std::vector<double> summed(n, 0.0);
  for (const auto& imp : important)
    for (uint32_t p : imp) summed[p] += 1.0;
  std::vector<uint32_t> shared(n);
  std::iota(shared.begin(), shared.end(), 0u);
  std::stable_sort(shared.begin(), shared.end(), [&](uint32_t a, uint32_t b) { return summed[a] > summed[b]; });
  std::vector<uint32_t> shared_slot(n);
  for (uint32_t sl = 0; sl < n; ++sl) shared_slot[shared[sl]] = sl;
  auto rep = s.ReorderNow();
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->segments_reordered, 1u);
  std::vector<Cost> after(kLayers);
  for (int il = 0; il < kLayers; ++il) {
    after[size_t(il)] = cost(s, il);
    std::set<uint32_t> shared_chunks;
    for (uint32_t p : important[size_t(il)]) shared_chunks.insert(shared_slot[p] / C);
    const auto& b = before[size_t(il)];
    const auto& a = after[size_t(il)];
    std::printf(
        "[reorder per layer] layer %d: %zu important tokens: chunks before %u, after %u (one shared list: %zu); "
        "SSD bytes before %llu (amp %.2f), after %llu (amp %.2f)\n",
        il, important[size_t(il)].size(), b.chunks, a.chunks, shared_chunks.size(), (unsigned long long)b.ssd_bytes,
        double(b.ssd_bytes) / double(b.useful), (unsigned long long)a.ssd_bytes,
        double(a.ssd_bytes) / double(a.useful));
    const uint32_t ideal = (uint32_t(important[size_t(il)].size()) + C - 1) / C;
    EXPECT_LE(a.chunks, ideal) << "layer " << il;  // one node: the important tokens fill whole chunks
    EXPECT_LE(a.chunks, b.chunks) << "layer " << il;
    EXPECT_LE(a.ssd_bytes, b.ssd_bytes) << "layer " << il;
    EXPECT_LE(a.chunks, shared_chunks.size()) << "layer " << il;
  }
  // The scattered layers gain a lot; so do both against a single shared list.
  for (int il : {0, 1}) {
    EXPECT_LT(after[size_t(il)].chunks, before[size_t(il)].chunks) << "layer " << il;
    EXPECT_LT(after[size_t(il)].ssd_bytes, before[size_t(il)].ssd_bytes) << "layer " << il;
  }
  // Every position of every layer still reads back bit-identical, also across a reopen.
  CheckSequence(s, kv, t, rng, t.size());
  st->reset();
  auto st2 = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st2.ok());
  for (int il = 0; il < kLayers; ++il) EXPECT_EQ(cost(**st2, il).chunks, after[size_t(il)].chunks) << "layer " << il;
  CheckSequence(**st2, kv, t, rng, t.size());
  auto rep2 = (*st2)->ReorderNow();  // statistics survived the reopen: nothing changes
  ASSERT_TRUE(rep2.ok());
  EXPECT_EQ(rep2->segments_reordered, 0u);
  EXPECT_TRUE((*st2)->CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

// K and V live in separate 4 KiB-aligned regions of a chunk: a key-only read (the fallback and
// AS+H2O) reads no V block, a value-only read no K block.
TEST(PrefixStore, KeyOnlyReadsTouchOnlyKeyBlocks) {
  std::string dir = TempDir("kregion");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(17);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok());
  PrefixStore& s = **st;
  const uint32_t n = 300, C = 16;
  const uint64_t k_bytes = uint64_t(kHeads) * kDim * 2;
  auto t = RandomTokens(rng, n);
  ASSERT_TRUE(kv.Insert(s, t, 0).ok());
  MatchHandle h = s.Match(t);
  std::vector<uint32_t> all(n);
  std::iota(all.begin(), all.end(), 0u);
  // Expected from the format: per chunk, its K region rounded up to whole 4 KiB blocks.
  uint64_t k_region_blocks_bytes = 0;
  for (uint32_t c = 0; c < (n + C - 1) / C; ++c)
    k_region_blocks_bytes += (std::min(C, n - c * C) * k_bytes + 4095) / 4096 * 4096;
  for (int il = 0; il < kLayers; ++il) {
    auto rk = s.Wait(*s.SubmitReadAllKeys(h, il));
    ASSERT_TRUE(rk.ok());
    EXPECT_TRUE(kv.Check(t, il, all, *rk, true, false));
    auto rv = s.Wait(*s.SubmitReadKV(h, il, all, false, true));
    ASSERT_TRUE(rv.ok());
    EXPECT_TRUE(kv.Check(t, il, all, *rv, false, true));
    auto rkv = s.Wait(*s.SubmitReadKV(h, il, all, true, true));
    ASSERT_TRUE(rkv.ok());
    EXPECT_TRUE(kv.Check(t, il, all, *rkv, true, true));
    EXPECT_EQ(rk->stats.ssd_bytes, k_region_blocks_bytes) << "layer " << il;
    EXPECT_EQ(rv->stats.ssd_bytes, k_region_blocks_bytes) << "layer " << il;
    EXPECT_EQ(rk->stats.ssd_bytes + rv->stats.ssd_bytes, rkv->stats.ssd_bytes) << "layer " << il;
    if (il == 0)
      std::printf("[layout] all keys of %u tokens: %llu SSD bytes for %llu bytes of K (amp %.3f); K+V: %llu\n", n,
                  (unsigned long long)rk->stats.ssd_bytes, (unsigned long long)rk->stats.useful_bytes,
                  rk->stats.read_amplification(), (unsigned long long)rkv->stats.ssd_bytes);
  }
  // Selected tokens stay 4 KiB-granular: one token's key is at most 2 blocks, K+V at most 4.
  auto r1 = s.Wait(*s.SubmitReadKV(h, 1, std::vector<uint32_t>{37}, true, false));
  ASSERT_TRUE(r1.ok());
  EXPECT_LE(r1->stats.ssd_bytes, 2u * 4096u);
  auto r2 = s.Wait(*s.SubmitReadKV(h, 1, std::vector<uint32_t>{37, 38, 200}, true, true));
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(kv.Check(t, 1, {37, 38, 200}, *r2, true, true));
  EXPECT_LE(r2->stats.ssd_bytes, 8u * 4096u);
  ASSERT_TRUE(s.Release(h).ok());
  std::filesystem::remove_all(dir);
}

// Reads of one chunk a few blocks apart become one request (read_gap_blocks): fewer requests for
// a scattered selection, the same rows returned. Chunks of 64 tokens: a token's key is 384 bytes,
// so tokens 0, 32 and 48 start the K region's blocks 0, 3 and 4.
TEST(PrefixStore, NearbyRunsJoinIntoOneRead) {
  std::string dir = TempDir("gapjoin");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(23);
  auto t = RandomTokens(rng, 64);
  auto opts = [&](uint32_t gap) {
    PrefixStoreOptions o = TestOptions(dir, "model-A", kLayers, kHeads, kDim, {0, 2}, 64);
    o.read_gap_blocks = gap;
    return o;
  };
  {
    auto st = PrefixStore::Open(opts(0));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
  }
  struct Got {
    uint32_t n_ios;
    uint64_t ssd_bytes;
  };
  auto read = [&](uint32_t gap, std::vector<uint32_t> pos) -> Got {
    auto st = PrefixStore::Open(opts(gap));
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return {0, 0};
    PrefixStore& s = **st;
    MatchHandle h = s.Match(t);
    EXPECT_EQ(h.n_matched, 64u);
    auto r = s.Wait(*s.SubmitReadKV(h, 1, pos, true, false));
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return {0, 0};
    EXPECT_TRUE(kv.Check(t, 1, pos, *r, true, false)) << "gap " << gap;
    EXPECT_TRUE(s.Release(h).ok());
    return {r->stats.n_ios, r->stats.ssd_bytes};
  };
  const Got apart = read(0, {0, 32});
  EXPECT_EQ(apart.n_ios, 2u);
  EXPECT_EQ(apart.ssd_bytes, 2u * 4096u);
  const Got joined = read(2, {0, 32});  // two blocks between: one read of four blocks
  EXPECT_EQ(joined.n_ios, 1u);
  EXPECT_EQ(joined.ssd_bytes, 4u * 4096u);
  const Got too_far = read(2, {0, 48});  // three blocks between: still two reads
  EXPECT_EQ(too_far.n_ios, 2u);
  EXPECT_EQ(too_far.ssd_bytes, 2u * 4096u);
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, FlippedBytesAreDetectedAndDroppedOnOpen) {
  std::string dir = TempDir("flip");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(3);
  auto t = RandomTokens(rng, 200);
  {
    auto st = PrefixStore::Open(SmallOptions(dir));
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
  }
  // Layer 0's extent starts the file: 13 chunks of 16 tokens (5 blocks each: header, 2 K, 2 V) -> corrupt block 40.
  ASSERT_TRUE(FlipByteInData(dir, 40));
  auto o = SmallOptions(dir);
  o.verify_on_open = true;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  MatchHandle h = (*st)->Match(t);
  EXPECT_LT(h.n_matched, t.size());
  EXPECT_EQ(h.n_matched % 16, 0u);  // cut at a chunk boundary
  EXPECT_GE((*st)->Stats().chunks_dropped_corrupt, 1u);
  ASSERT_TRUE((*st)->Release(h).ok());
  CheckSequence(**st, kv, t, rng, h.n_matched);
  EXPECT_TRUE((*st)->CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, FlippedBytesAreDetectedOnReadAndNeverServed) {
  std::string dir = TempDir("flip2");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(5);
  auto t = RandomTokens(rng, 200);
  auto st = PrefixStore::Open(SmallOptions(dir));
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
  ASSERT_TRUE(FlipByteInData(dir, 3));  // layer 0, chunk 0: header block, K blocks 1-2, V blocks 3-4 -> a V block
  MatchHandle h = (*st)->Match(t);
  std::vector<uint32_t> all(t.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  auto tk = (*st)->SubmitReadKV(h, 0, all, true, true);
  ASSERT_TRUE(tk.ok());
  auto r = (*st)->Wait(*tk);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
  // Still locked by h: the bad chunk is refused, not served.
  auto tk2 = (*st)->SubmitReadKV(h, 0, all, true, false);
  EXPECT_TRUE(!tk2.ok() || !(*st)->Wait(*tk2).ok());
  ASSERT_TRUE((*st)->Release(h).ok());
  // After release the prefix is truncated before the bad chunk.
  MatchHandle h2 = (*st)->Match(t);
  EXPECT_LT(h2.n_matched, t.size());
  ASSERT_TRUE((*st)->Release(h2).ok());
  CheckSequence(**st, kv, t, rng, h2.n_matched);
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, ForcedPreadPathGivesIdenticalResults) {
  std::string dir = TempDir("pread");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(9);
  auto t = RandomTokens(rng, 333);
  std::vector<uint32_t> pos = RandomPositions(rng, t.size(), 0.4);
  std::vector<f16_t> k1, v1;
  {
    auto st = PrefixStore::Open(SmallOptions(dir));
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
    MatchHandle h = (*st)->Match(t);
    auto r = (*st)->Wait(*(*st)->SubmitReadKV(h, 1, pos, true, true));
    ASSERT_TRUE(r.ok());
    k1 = r->k;
    v1 = r->v;
    ASSERT_TRUE((*st)->Release(h).ok());
  }
  auto o = SmallOptions(dir);
  o.force_pread = true;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)->Stats().io_engine, "pread");
  MatchHandle h = (*st)->Match(t);
  auto r = (*st)->Wait(*(*st)->SubmitReadKV(h, 1, pos, true, true));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->k, k1);
  EXPECT_EQ(r->v, v1);
  EXPECT_TRUE(kv.Check(t, 1, pos, *r, true, true));
  ASSERT_TRUE((*st)->Release(h).ok());
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, CatalogOfAnotherModelIsNotReused) {
  std::string dir = TempDir("model");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(2);
  auto t = RandomTokens(rng, 100);
  {
    auto st = PrefixStore::Open(SmallOptions(dir));
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
    EXPECT_GT((*st)->Stats().ssd_disk_bytes, 0u);
  }
  auto o = SmallOptions(dir);
  o.model_fingerprint = "model-B";
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  MatchHandle h = (*st)->Match(t);
  EXPECT_EQ(h.n_matched, 0u);
  EXPECT_GT((*st)->Stats().ssd_disk_bytes, 0u);  // the old model's data is kept beside (never read)
  st->reset();
  // Another geometry is another namespace too.
  o.model_fingerprint = "model-A";
  o.head_dim = 32;
  auto st2 = PrefixStore::Open(o);
  ASSERT_TRUE(st2.ok());
  EXPECT_EQ((*st2)->Match(t).n_matched, 0u);
  std::filesystem::remove_all(dir);
}

// Env that makes data-file writes fail with ENOSPC once armed.
class DiskFullEnv : public EnvWrapper {
 public:
  DiskFullEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<bool> full{false};
  class F : public FileWrapper {
   public:
    F(std::unique_ptr<File> f, DiskFullEnv* e) : FileWrapper(std::move(f)), env_(e) {}
    Status WriteAt(uint64_t off, const void* buf, size_t n) override {
      if (env_->full) return Status::ResourceExhausted("write " + path() + ": No space left on device (disk full)");
      return f_->WriteAt(off, buf, n);
    }

   private:
    DiskFullEnv* env_;
  };
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, const OpenOptions& o) override {
    auto f = target()->OpenFile(p, o);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new F(std::move(*f), this));
  }
};

TEST(PrefixStore, DiskFullFailsWritesClearlyWhileReadsGoOn) {
  std::string dir = TempDir("full");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(4);
  DiskFullEnv env;
  auto o = SmallOptions(dir);
  o.env = &env;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  auto a = RandomTokens(rng, 150), b = RandomTokens(rng, 150);
  ASSERT_TRUE(kv.Insert(**st, a, 0).ok());
  env.full = true;
  auto r = kv.Insert(**st, b, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disk full"), std::string::npos) << r.status().ToString();
  EXPECT_EQ((*st)->Match(b).n_matched, 0u);
  CheckSequence(**st, kv, a, rng, a.size());
  env.full = false;
  ASSERT_TRUE(kv.Insert(**st, b, 0).ok());
  CheckSequence(**st, kv, b, rng, b.size());
  EXPECT_TRUE((*st)->CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

// A real full filesystem: a small loop-mounted ext4 (needs root and mount; skipped otherwise).
TEST(PrefixStore, RealFullFilesystemFailsWritesWhileReadsGoOn) {
  std::string base = TempDir("loop");
  std::string img = base + "/fs.img", mnt = base + "/mnt";
  std::filesystem::create_directories(mnt);
  std::string cmd = "dd if=/dev/zero of=" + img + " bs=1M count=6 status=none && mkfs.ext4 -q " + img +
                    " && mount -o loop " + img + " " + mnt + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::filesystem::remove_all(base);
    GTEST_SKIP() << "cannot loop-mount a small ext4 here (not root or no loop devices)";
  }
  {
    SyntheticKV kv{kLayers, kHeads, kDim};
    std::mt19937 rng(8);
    auto o = SmallOptions(mnt + "/store");
    o.ssd_bytes = 1ull << 30;  // bigger than the filesystem: the disk fills first
    auto st = PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    auto a = RandomTokens(rng, 100);
    ASSERT_TRUE(kv.Insert(**st, a, 0).ok());
    Status last;
    for (int i = 0; i < 100 && last.ok(); ++i) {
      auto r = kv.Insert(**st, RandomTokens(rng, 400), 0);
      last = r.status();
    }
    ASSERT_FALSE(last.ok());
    std::printf("[disk full] %s\n", last.ToString().c_str());
    EXPECT_TRUE(last.message().find("disk full") != std::string::npos ||
                last.message().find("No space") != std::string::npos)
        << last.ToString();
    CheckSequence(**st, kv, a, rng, a.size());
  }
  std::system(("umount " + mnt).c_str());
  std::filesystem::remove_all(base);
}

TEST(PrefixStore, SsdBudgetIsNeverExceededAndLeastRecentLeavesGo) {
  std::string dir = TempDir("budget");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(6);
  auto o = SmallOptions(dir);
  o.ssd_bytes = 4ull << 20;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  std::vector<std::vector<int32_t>> seqs;
  for (int i = 0; i < 30; ++i) {
    seqs.push_back(RandomTokens(rng, 200));
    auto r = kv.Insert(**st, seqs.back(), 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto s = (*st)->Stats();
    EXPECT_LE(s.ssd_disk_bytes + s.catalog_bytes, o.ssd_bytes);
    uint64_t dir_bytes = 0;
    for (auto& e : std::filesystem::directory_iterator(dir)) dir_bytes += std::filesystem::file_size(e.path());
    EXPECT_LE(dir_bytes, o.ssd_bytes) << "directory grew past its cap";
  }
  EXPECT_GT((*st)->Stats().nodes_evicted, 0u);
  EXPECT_EQ((*st)->Match(seqs.front()).n_matched, 0u);  // the oldest went first
  CheckSequence(**st, kv, seqs.back(), rng, seqs.back().size());
  EXPECT_TRUE((*st)->CheckConsistency().ok());
  // Everything locked: a write that cannot fit fails clearly.
  std::vector<MatchHandle> hs;
  for (auto& q : seqs) hs.push_back((*st)->Match(q));
  auto big = kv.Insert(**st, RandomTokens(rng, 3000), 0);
  EXPECT_EQ(big.status().code(), Status::Code::kResourceExhausted) << big.status().ToString();
  for (auto& h : hs) ASSERT_TRUE((*st)->Release(h).ok());
  std::filesystem::remove_all(dir);
}

TEST(PrefixStore, MemoryTiersServeRepeatedReadsWithIdenticalData) {
  std::string dir = TempDir("tiers");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(12);
  auto o = SmallOptions(dir);
  o.device_bytes = 64 * 1024;
  o.host_bytes = 128 * 1024;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  auto t = RandomTokens(rng, 256);
  ASSERT_TRUE(kv.Insert(**st, t, 0).ok());
  std::vector<uint32_t> pos = {0, 1, 2, 3, 17, 40, 41, 200};
  uint32_t mem_hits = 0;
  for (int rep = 0; rep < 4; ++rep) {
    MatchHandle h = (*st)->Match(t);
    for (int il = 0; il < kLayers; ++il) {
      auto r = (*st)->Wait(*(*st)->SubmitReadKV(h, il, pos, true, true));
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(kv.Check(t, il, pos, *r, true, true));
      if (rep > 0) mem_hits += r->stats.chunks_device + r->stats.chunks_host;
    }
    ASSERT_TRUE((*st)->Release(h).ok());
  }
  EXPECT_GT(mem_hits, 0u);
  auto s = (*st)->Stats();
  EXPECT_LE(s.tiers.device.used_bytes, o.device_bytes);
  EXPECT_LE(s.tiers.host.used_bytes, o.host_bytes);
  EXPECT_GT(s.tiers.device.hits + s.tiers.host.hits, 0u);
  std::filesystem::remove_all(dir);
}

// Readers check every byte while another thread reorders, inserts (forcing evictions) and evicts.
TEST(PrefixStore, ReadersDuringReorderAndEvictionAlwaysGetCorrectData) {
  std::string dir = TempDir("conc");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(13);
  auto o = SmallOptions(dir);
  o.ssd_bytes = 8ull << 20;
  o.device_bytes = 96 * 1024;
  o.host_bytes = 192 * 1024;
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok());
  PrefixStore& s = **st;
  std::vector<std::vector<int32_t>> seqs;
  auto base = RandomTokens(rng, 128);
  for (int i = 0; i < 8; ++i) {
    auto t = base;
    auto tail = RandomTokens(rng, 100 + rng() % 100);
    t.insert(t.end(), tail.begin(), tail.end());
    seqs.push_back(t);
    MatchHandle h = s.Match(t);
    ASSERT_TRUE(kv.Insert(s, t, h.n_matched).ok());
    ASSERT_TRUE(s.Release(h).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, reads{0};
  auto reader = [&](int seed) {
    std::mt19937 r{uint32_t(seed)};
    while (!stop) {
      const auto& t = seqs[r() % seqs.size()];
      MatchHandle h = s.Match(t);
      if (h.n_matched == 0) continue;
      for (int il = 0; il < kLayers; ++il) {
        auto pos = RandomPositions(r, h.n_matched, 0.25);
        auto tk = s.SubmitReadKV(h, il, pos, true, true);
        if (!tk.ok()) {
          ++failures;
          continue;
        }
        auto res = s.Wait(*tk);
        if (!res.ok() || !kv.Check(t, il, pos, *res, true, true)) ++failures;
        ++reads;
        std::vector<uint32_t> imp;
        for (uint32_t p : pos)
          if ((p + uint32_t(il)) % 3 == 0) imp.push_back(p);  // differs per layer: per-layer mapping lists
        if (!s.ReportImportance(h, il, imp).ok()) ++failures;
      }
      if (!s.Release(h).ok()) ++failures;
    }
  };
  std::thread r1(reader, 1), r2(reader, 2);
  std::mt19937 w(99);
  for (int round = 0; round < 12; ++round) {
    auto rep = s.ReorderNow();
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    auto t = base;
    auto tail = RandomTokens(w, 150);
    t.insert(t.end(), tail.begin(), tail.end());
    MatchHandle h = s.Match(t);  // released below: a locked node could never be evicted
    auto ins = kv.Insert(s, t, h.n_matched);
    EXPECT_TRUE(s.Release(h).ok());  // EXPECT: the readers must be joined before returning
    // NotFound: the shared prefix was evicted meanwhile; ResourceExhausted: everything left is
    // locked by the readers. Both are clean refusals.
    EXPECT_TRUE(ins.ok() || ins.status().code() == Status::Code::kNotFound ||
                ins.status().code() == Status::Code::kResourceExhausted)
        << ins.status().ToString();
    (void)s.EvictNodes(1);
  }
  stop = true;
  r1.join();
  r2.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_GT(s.Stats().segments_reordered, 0u);
  EXPECT_GT(s.Stats().nodes_evicted, 0u) << "inserts past the budget and EvictNodes evicted nothing";
  EXPECT_TRUE(s.CheckConsistency().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
