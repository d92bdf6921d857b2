// PrefixStore inspection and administration (the GUI's store features): SnapshotTree
// against a naive trie, Residency against tier placement (and that it changes nothing), Pin /
// Unpin (persisted, honoured by every eviction path, preferred by the memory tiers), DropFrom
// (split point, freed disk, refusals), and the migration of a catalog from the previous schema.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/catalog.h"
#include "store/prefix-store.h"
#include "store/radix-tree.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::ReadsExact;  // every layer of the first n tokens, bit for bit
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 3, kHeads = 3, kDim = 64, kC = 16;

PrefixStoreOptions Options(const std::string& dir) {
  return TestOptions(dir, "model-admin", kLayers, kHeads, kDim, {0, 2}, kC);
}

std::unique_ptr<PrefixStore> OpenOrDie(const PrefixStoreOptions& o) {
  auto st = PrefixStore::Open(o);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  return st.ok() ? std::move(*st) : nullptr;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 50000);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Prefix(const std::vector<int32_t>& a, size_t n) { return {a.begin(), a.begin() + long(n)}; }

// Reads all positions of `layers` (K and V) of the matched prefix; returns the summed stats.
ReadStats ReadLayers(PrefixStore& s, const std::vector<int32_t>& tokens, const std::vector<int>& layers) {
  ReadStats sum;
  MatchHandle h = s.Match(tokens);
  std::vector<uint32_t> pos(h.n_matched);
  std::iota(pos.begin(), pos.end(), 0u);
  for (int il : layers) {
    auto t = s.SubmitReadKV(h, il, pos, true, true);
    EXPECT_TRUE(t.ok());
    if (!t.ok()) break;
    auto r = s.Wait(*t);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) break;
    sum.chunks_device += r->stats.chunks_device;
    sum.chunks_host += r->stats.chunks_host;
    sum.chunks_ssd += r->stats.chunks_ssd;
  }
  EXPECT_TRUE(s.Release(h).ok());
  return sum;
}

// Every (non-empty) prefix of every sequence, once: the token count of a perfect trie.
uint64_t DistinctPrefixes(const std::vector<std::vector<int32_t>>& seqs) {
  std::set<std::vector<int32_t>> all;
  for (const auto& s : seqs)
    for (size_t n = 1; n <= s.size(); ++n) all.insert(Prefix(s, n));
  return all.size();
}

// Structural checks of a snapshot, and that `seq` is spelled out by a root-to-node path.
// Returns the indices of the nodes on that path.
::testing::AssertionResult Spells(const TreeSnapshot& snap, const std::vector<int32_t>& seq,
                                  std::vector<int>* path = nullptr) {
  std::map<int, std::vector<int>> kids;
  for (int i = 0; i < int(snap.nodes.size()); ++i) kids[snap.nodes[size_t(i)].parent].push_back(i);
  int cur = -1;
  size_t p = 0;
  if (path) path->clear();
  while (p < seq.size()) {
    int next = -1;
    for (int c : kids[cur])
      if (!snap.nodes[size_t(c)].head.empty() && snap.nodes[size_t(c)].head[0] == seq[p]) next = c;
    if (next < 0) return ::testing::AssertionFailure() << "no node continues the sequence at position " << p;
    const TreeNodeInfo& n = snap.nodes[size_t(next)];
    if (n.start != p)
      return ::testing::AssertionFailure() << "node " << n.id << " starts at " << n.start << ", path is at " << p;
    for (size_t i = 0; i < n.head.size() && p + i < seq.size(); ++i)
      if (n.head[i] != seq[p + i])
        return ::testing::AssertionFailure() << "node " << n.id << " token " << i << " differs";
    if (path) path->push_back(next);
    p = std::min<size_t>(seq.size(), p + n.n_tokens);
    cur = next;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult WellFormed(const TreeSnapshot& snap) {
  std::map<int, uint32_t> n_kids;
  std::map<int, std::set<int32_t>> first_tokens;
  for (int i = 0; i < int(snap.nodes.size()); ++i) {
    const TreeNodeInfo& n = snap.nodes[size_t(i)];
    if (n.parent >= i) return ::testing::AssertionFailure() << "node " << i << " comes before its parent " << n.parent;
    if (n.parent < 0 && n.start != 0)
      return ::testing::AssertionFailure() << "root child " << n.id << " starts at " << n.start;
    if (n.parent >= 0) {
      const TreeNodeInfo& p = snap.nodes[size_t(n.parent)];
      if (p.start + p.n_tokens != n.start)
        return ::testing::AssertionFailure() << "node " << n.id << " does not continue its parent";
      if (n.pinned && !p.pinned)
        return ::testing::AssertionFailure() << "pinned node " << n.id << " under an unpinned parent";
    }
    if (n.n_tokens == 0 || n.head.size() != std::min<uint64_t>(n.n_tokens, TreeNodeInfo::kHeadTokens))
      return ::testing::AssertionFailure()
             << "node " << n.id << " has " << n.n_tokens << " tokens, head " << n.head.size();
    if (!first_tokens[n.parent].insert(n.head[0]).second)
      return ::testing::AssertionFailure() << "siblings share first token " << n.head[0];
    ++n_kids[n.parent];
  }
  if (!snap.truncated)
    for (int i = 0; i < int(snap.nodes.size()); ++i)
      if (snap.nodes[size_t(i)].n_children != n_kids[i])
        return ::testing::AssertionFailure() << "node " << i << " child count";
  return ::testing::AssertionSuccess();
}

uint64_t LiveDiskBytes(PrefixStore& s) {
  auto st = s.Stats();
  return st.ssd_disk_bytes - st.ssd_free_inside_bytes;
}

// A family of sequences that share prefixes (so inserts split nodes and some end inside others).
std::vector<std::vector<int32_t>> SharingSequences(std::mt19937& rng, int n) {
  std::vector<std::vector<int32_t>> seqs;
  for (int i = 0; i < n; ++i) {
    if (seqs.empty() || rng() % 4 == 0) {
      seqs.push_back(RandomTokens(rng, 20 + rng() % 200));
    } else {
      const auto& base = seqs[rng() % seqs.size()];
      const size_t cut = 1 + rng() % base.size();
      seqs.push_back(rng() % 5 == 0 ? Prefix(base, cut)
                                    : Concat(Prefix(base, cut), RandomTokens(rng, 1 + rng() % 100)));
    }
  }
  return seqs;
}

// The radix tree's pin rules on their own: closed upwards, copied by splits, skipped by
// eviction, released bottom-up only where no other pinned path needs a node; pre-order walk.
TEST(RadixTreePins, ClosedUpwardsCopiedBySplitsSkippedByEviction) {
  RadixTree tree;
  auto insert = [&](const std::vector<Token>& t) {
    const uint64_t start = tree.Match("m", t, false).n_matched;
    auto r = tree.Insert("m", t, tree.NewSegmentId(), start);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->last_node : kNoNode;
  };
  const NodeId a = insert({1, 2, 3, 4, 5, 6});
  const NodeId b = insert({1, 2, 3, 4, 9, 9});  // splits a at 4: upper [1,2,3,4]
  const NodeId upper = tree.Get(b)->parent;
  ASSERT_NE(upper, kNoNode);
  auto pinned = tree.Pin(b);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(*pinned, (std::vector<NodeId>{b, upper}));
  EXPECT_FALSE(tree.Get(a)->pinned);
  EXPECT_TRUE(tree.Validate().ok());
  // A split of the pinned upper node pins both halves.
  const NodeId c = insert({1, 2, 7});
  const NodeId top = tree.Get(c)->parent;
  EXPECT_TRUE(tree.Get(top)->pinned);
  EXPECT_TRUE(tree.Get(upper)->pinned);
  EXPECT_EQ(tree.Get(upper)->parent, top);
  EXPECT_TRUE(tree.Validate().ok());
  // Eviction takes the unpinned leaves (a, c) and nothing pinned.
  EvictOptions eo;
  eo.target = 100;
  auto evs = tree.EvictLeaves(eo);
  std::set<NodeId> gone;
  for (const auto& e : evs) gone.insert(e.node.id);
  EXPECT_EQ(gone, (std::set<NodeId>{a, c}));
  EXPECT_EQ(tree.n_nodes(), 3u);
  // Pre-order: parents first, from `top` down.
  auto order = tree.PreOrder("m");
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0].id, top);
  EXPECT_EQ(order[1].id, upper);
  EXPECT_EQ(order[2].id, b);
  EXPECT_EQ(tree.PreOrder("m", upper).size(), 2u);
  EXPECT_EQ(tree.PreOrder("m", kNoNode, 1).size(), 1u);
  EXPECT_TRUE(tree.PreOrder("other").empty());
  // Unpinning a node with a pinned child changes nothing; unpinning b frees the whole path.
  auto none = tree.Unpin(top);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto freed = tree.Unpin(b);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, (std::vector<NodeId>{b, upper, top}));
  EXPECT_TRUE(tree.Validate().ok());
  EXPECT_EQ(tree.EvictLeaves(eo).size(), 3u);
  // Rebuild repairs rows that break the closure (pinned child of an unpinned parent).
  RadixTree t2;
  std::vector<NodeRecord> rows;
  rows.push_back({100, kNoNode, 101, 0, {1, 2}, 0, 0, false, 3});
  rows.push_back({102, 100, 103, 0, {5}, 0, 0, true, 1});
  auto rep = t2.Rebuild("m", rows);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->n_restored, 2u);
  EXPECT_TRUE(t2.Get(100)->pinned);
  EXPECT_EQ(t2.Get(100)->hits, 3u);
  EXPECT_TRUE(t2.Validate().ok());
  EXPECT_TRUE(t2.EvictableLeaves().empty());
}

TEST(PrefixStoreAdmin, SnapshotTreeMatchesNaiveTrieAndSurvivesReopen) {
  const std::string dir = TempDir("admin-snap");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(21);
  auto o = Options(dir);
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  auto seqs = SharingSequences(rng, 40);
  for (const auto& q : seqs) {
    auto r = kv.Insert(*s, q, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  TreeSnapshot snap = s->SnapshotTree();
  EXPECT_FALSE(snap.truncated);
  EXPECT_TRUE(WellFormed(snap));
  uint64_t sum_tokens = 0, sum_bytes = 0;
  for (const auto& n : snap.nodes) {
    sum_tokens += n.n_tokens;
    sum_bytes += n.kv_bytes;
    EXPECT_EQ(n.hits, 0u);
    EXPECT_FALSE(n.pinned);
    EXPECT_FALSE(n.locked);
    EXPECT_EQ(n.chunks_device + n.chunks_host, 0u);  // no memory tier budget
    EXPECT_GT(n.chunks_ssd_only, 0u);
  }
  EXPECT_EQ(sum_tokens, DistinctPrefixes(seqs));
  EXPECT_EQ(snap.n_tokens_total, sum_tokens);
  EXPECT_EQ(snap.n_nodes_total, snap.nodes.size());
  EXPECT_EQ(s->Stats().n_nodes, snap.nodes.size());
  for (const auto& q : seqs) EXPECT_TRUE(Spells(snap, q));
  // Nothing was evicted, so every byte in use belongs to some node (rounding: < 1 byte a node).
  const uint64_t live = LiveDiskBytes(*s);
  EXPECT_LE(sum_bytes, live + snap.nodes.size());
  EXPECT_GE(sum_bytes + snap.nodes.size(), live);

  // Hits: one Match adds one to exactly the nodes on its path.
  const auto& q = seqs[5];
  std::vector<int> path;
  ASSERT_TRUE(Spells(snap, q, &path));
  MatchHandle h = s->Match(q);
  TreeSnapshot during = s->SnapshotTree();
  ASSERT_TRUE(s->Release(h).ok());
  TreeSnapshot after = s->SnapshotTree();
  ASSERT_EQ(after.nodes.size(), snap.nodes.size());
  const std::set<int> on_path(path.begin(), path.end());
  for (size_t i = 0; i < after.nodes.size(); ++i) {
    ASSERT_EQ(after.nodes[i].id, snap.nodes[i].id);
    EXPECT_EQ(after.nodes[i].hits, on_path.count(int(i)) ? 1u : 0u) << "node " << i;
    EXPECT_EQ(during.nodes[i].locked, on_path.count(int(i)) != 0) << "node " << i;
    EXPECT_FALSE(after.nodes[i].locked);
  }

  // Truncation keeps a forest: every kept node's parent is kept.
  TreeSnapshot small = s->SnapshotTree(3);
  EXPECT_TRUE(small.truncated);
  ASSERT_EQ(small.nodes.size(), 3u);
  EXPECT_TRUE(WellFormed(small));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(small.nodes[i].id, after.nodes[i].id);

  // Reopen: same tree, hits persisted.
  ASSERT_TRUE(s->CheckConsistency().ok());
  s.reset();
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->CheckConsistency().ok());
  TreeSnapshot re = s->SnapshotTree();
  ASSERT_EQ(re.nodes.size(), after.nodes.size());
  for (size_t i = 0; i < re.nodes.size(); ++i) {
    EXPECT_EQ(re.nodes[i].id, after.nodes[i].id);
    EXPECT_EQ(re.nodes[i].parent, after.nodes[i].parent);
    EXPECT_EQ(re.nodes[i].start, after.nodes[i].start);
    EXPECT_EQ(re.nodes[i].n_tokens, after.nodes[i].n_tokens);
    EXPECT_EQ(re.nodes[i].kv_bytes, after.nodes[i].kv_bytes);
    EXPECT_EQ(re.nodes[i].hits, after.nodes[i].hits);
    EXPECT_EQ(re.nodes[i].head, after.nodes[i].head);
  }
  // Another model's namespace is not shown: a store of another fingerprint in another dir is empty.
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(PrefixStoreAdmin, ResidencyFollowsTierPlacementAndChangesNothing) {
  const std::string dir = TempDir("admin-res");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(22);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const auto a = RandomTokens(rng, 150);
  const auto b = Concat(Prefix(a, 70), RandomTokens(rng, 60));
  ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
  ASSERT_TRUE(kv.Insert(*s, b, 0).ok());
  const uint64_t chunks_a = uint64_t(kLayers) * ((150 + kC - 1) / kC);  // one segment: identity layout

  // No memory budget: all on SSD.
  PrefixResidency r = s->Residency(a);
  EXPECT_EQ(r.n_matched, 150u);
  EXPECT_EQ(r.tokens_ssd_only, 150u);
  EXPECT_EQ(r.tokens_device + r.tokens_host, 0u);
  EXPECT_EQ(r.chunks_ssd_only, chunks_a);
  EXPECT_FALSE(r.pinned);
  // A query that diverges: only the common prefix.
  auto a_div = Concat(Prefix(a, 100), {-5, -6});
  EXPECT_EQ(s->Residency(a_div).n_matched, 100u);
  EXPECT_EQ(s->Residency(RandomTokens(rng, 10)).n_matched, 0u);

  // Room everywhere; read layer 0 only: its chunks go to device, the token is as slow as its
  // slowest layer, so every token is still ssd_only.
  s->SetTierBudget(Tier::kDevice, 64ull << 20);
  s->SetTierBudget(Tier::kHost, 64ull << 20);
  ReadLayers(*s, a, {0});
  r = s->Residency(a);
  EXPECT_EQ(r.tokens_ssd_only, 150u);
  EXPECT_EQ(r.chunks_device, chunks_a / kLayers);
  EXPECT_EQ(r.chunks_ssd_only, chunks_a - chunks_a / kLayers);
  // The next read of layer 0 is served exactly as Residency said.
  ReadStats rs = ReadLayers(*s, a, {0});
  EXPECT_EQ(rs.chunks_device, r.chunks_device);
  EXPECT_EQ(rs.chunks_ssd, 0u);

  ReadLayers(*s, a, {0, 1, 2});
  r = s->Residency(a);
  EXPECT_EQ(r.tokens_device, 150u);
  EXPECT_EQ(r.chunks_device, chunks_a);
  // b shares a's first 70 tokens (device) and has its own tail (never read: SSD).
  PrefixResidency rb = s->Residency(b);
  EXPECT_EQ(rb.n_matched, 130u);
  EXPECT_EQ(rb.tokens_device, 70u);
  EXPECT_EQ(rb.tokens_ssd_only, 60u);

  // Residency is read-only: no statistic, hit, lock or placement changes.
  const StoreStats before = s->Stats();
  const TreeSnapshot snap_before = s->SnapshotTree();
  for (int i = 0; i < 5; ++i) (void)s->Residency(a);
  const StoreStats after = s->Stats();
  const TreeSnapshot snap_after = s->SnapshotTree();
  EXPECT_EQ(after.n_reads, before.n_reads);
  EXPECT_EQ(after.tiers.n_accesses, before.tiers.n_accesses);
  EXPECT_EQ(after.tiers.device.hits, before.tiers.device.hits);
  EXPECT_EQ(after.tiers.device.used_bytes, before.tiers.device.used_bytes);
  EXPECT_EQ(after.tiers.host.used_bytes, before.tiers.host.used_bytes);
  EXPECT_EQ(after.tiers.device.admissions, before.tiers.device.admissions);
  ASSERT_EQ(snap_after.nodes.size(), snap_before.nodes.size());
  for (size_t i = 0; i < snap_after.nodes.size(); ++i) {
    EXPECT_EQ(snap_after.nodes[i].hits, snap_before.nodes[i].hits);
    EXPECT_EQ(snap_after.nodes[i].last_access, snap_before.nodes[i].last_access);
    EXPECT_EQ(snap_after.nodes[i].score, snap_before.nodes[i].score);
    EXPECT_FALSE(snap_after.nodes[i].locked);
  }

  // Device budget to 0: everything is demoted to host.
  s->SetTierBudget(Tier::kDevice, 0);
  r = s->Residency(a);
  EXPECT_EQ(r.tokens_host, 150u);
  EXPECT_EQ(r.chunks_host, chunks_a);
  rs = ReadLayers(*s, a, {0, 1, 2});  // served from host (and promoted nowhere: device has no room)
  EXPECT_EQ(rs.chunks_host, chunks_a);
  // Host budget to 0 too: back to SSD.
  s->SetTierBudget(Tier::kHost, 0);
  r = s->Residency(a);
  EXPECT_EQ(r.tokens_ssd_only, 150u);
  EXPECT_EQ(r.chunks_ssd_only, chunks_a);
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(PrefixStoreAdmin, PinSurvivesReopenAndBlocksEvictionUntilUnpinned) {
  const std::string dir = TempDir("admin-pin");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(23);
  auto o = Options(dir);
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto a = RandomTokens(rng, 120);
  const auto a_long = Concat(a, RandomTokens(rng, 40));         // extends a
  const auto c = Concat(Prefix(a, 50), RandomTokens(rng, 70));  // branches off a at 50
  const auto u = RandomTokens(rng, 90);                         // unrelated
  for (const auto* q : {&a, &a_long, &c, &u}) ASSERT_TRUE(kv.Insert(*s, *q, 0).ok());

  EXPECT_EQ(s->Pin(RandomTokens(rng, 5)).code(), Status::Code::kNotFound);
  EXPECT_EQ(s->Unpin(RandomTokens(rng, 5)).code(), Status::Code::kNotFound);
  ASSERT_TRUE(s->Pin(a).ok());
  EXPECT_TRUE(s->Residency(a).pinned);
  EXPECT_TRUE(s->Residency(Prefix(a, 30)).pinned);
  EXPECT_FALSE(s->Residency(a_long).pinned);  // its tail node is not pinned
  EXPECT_FALSE(s->Residency(c).pinned);
  {
    TreeSnapshot snap = s->SnapshotTree();
    EXPECT_TRUE(WellFormed(snap));
    std::vector<int> path;
    ASSERT_TRUE(Spells(snap, a, &path));
    const std::set<int> on(path.begin(), path.end());
    for (int i = 0; i < int(snap.nodes.size()); ++i) EXPECT_EQ(snap.nodes[size_t(i)].pinned, on.count(i) != 0) << i;
  }
  ASSERT_TRUE(s->CheckConsistency().ok());

  // Reopen: still pinned; EvictNodes takes everything else but a.
  s.reset();
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->Residency(a).pinned);
  auto ev = s->EvictNodes(100);
  ASSERT_TRUE(ev.ok());
  EXPECT_GT(*ev, 0u);
  EXPECT_EQ(s->Residency(a_long).n_matched, 120u);
  EXPECT_EQ(s->Residency(c).n_matched, 50u);
  EXPECT_EQ(s->Residency(u).n_matched, 0u);
  EXPECT_TRUE(ReadsExact(*s, kv, a, 120));
  EXPECT_EQ(*s->EvictNodes(100), 0u);
  // DropFrom refuses, dropping nothing.
  auto d = s->DropFrom(a, 60);
  EXPECT_EQ(d.status().code(), Status::Code::kInvalidArgument) << d.status().ToString();
  EXPECT_NE(d.status().message().find("pinned"), std::string::npos);
  EXPECT_EQ(s->Residency(a).n_matched, 120u);
  ASSERT_TRUE(s->CheckConsistency().ok());

  // Pins are closed upwards: pinning a longer path and unpinning a keeps a (still needed).
  ASSERT_TRUE(kv.Insert(*s, a_long, 0).ok());
  ASSERT_TRUE(s->Pin(a_long).ok());
  ASSERT_TRUE(s->Unpin(a).ok());
  EXPECT_TRUE(s->Residency(a).pinned);
  ASSERT_TRUE(s->Unpin(a_long).ok());
  EXPECT_FALSE(s->Residency(a_long).pinned);
  EXPECT_FALSE(s->Residency(a).pinned);
  // Unpinned survives reopen too, and eviction now takes it.
  s.reset();
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->Residency(a).pinned);
  EXPECT_GT(*s->EvictNodes(100), 0u);
  EXPECT_EQ(s->Residency(a).n_matched, 0u);
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(PrefixStoreAdmin, PinnedDataBlocksSsdBudgetEvictionAndInsertFailsClearly) {
  const std::string dir = TempDir("admin-pinssd");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(24);
  auto o = Options(dir);
  o.ssd_bytes = 6ull << 20;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  std::vector<std::vector<int32_t>> seqs;
  while (s->Stats().nodes_evicted == 0) {  // fill to the budget
    seqs.push_back(RandomTokens(rng, 150));
    auto r = kv.Insert(*s, seqs.back(), 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_LT(seqs.size(), 200u);
  }
  std::vector<std::vector<int32_t>> cached;
  for (const auto& q : seqs)
    if (s->Residency(q).n_matched == q.size()) cached.push_back(q);
  ASSERT_GT(cached.size(), 2u);
  for (const auto& q : cached) ASSERT_TRUE(s->Pin(q).ok());
  const auto inserts = s->Stats().inserts;
  const auto extra = RandomTokens(rng, 150);
  auto r = kv.Insert(*s, extra, 0);
  EXPECT_EQ(r.status().code(), Status::Code::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("pinned"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(s->Residency(extra).n_matched, 0u);  // nothing visible
  EXPECT_EQ(s->Stats().inserts, inserts);
  for (const auto& q : cached) EXPECT_EQ(s->Residency(q).n_matched, q.size());
  EXPECT_FALSE(s->SetSsdBudget(1ull << 20).ok());  // shrinking cannot evict pinned data either
  ASSERT_TRUE(s->SetSsdBudget(o.ssd_bytes).ok());
  EXPECT_TRUE(s->CheckConsistency().ok());
  // Unpin one: the insert now succeeds by evicting it, the others stay.
  ASSERT_TRUE(s->Unpin(cached[0]).ok());
  ASSERT_TRUE(s->Unpin(cached[1]).ok());
  r = kv.Insert(*s, extra, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(s->Residency(cached[0]).n_matched, 0u);
  for (size_t i = 2; i < cached.size(); ++i) EXPECT_EQ(s->Residency(cached[i]).n_matched, cached[i].size());
  EXPECT_TRUE(ReadsExact(*s, kv, extra, extra.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(PrefixStoreAdmin, PinnedChunksArePreferredByTheDeviceTier) {
  const std::string dir = TempDir("admin-pintier");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(25);
  auto o = Options(dir);
  // Room for exactly one 64-token sequence's chunks (all layers) in device; no host tier.
  const uint64_t seq_bytes = uint64_t(kLayers) * 64 * 2 * kHeads * kDim * 2;
  o.device_bytes = seq_bytes;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto p = RandomTokens(rng, 64), q = RandomTokens(rng, 64);
  ASSERT_TRUE(kv.Insert(*s, p, 0).ok());
  ASSERT_TRUE(kv.Insert(*s, q, 0).ok());
  for (int i = 0; i < 3; ++i) ReadLayers(*s, q, {0, 1, 2});  // q: hot, fills the device tier
  EXPECT_EQ(s->Residency(q).tokens_device, 64u);
  ReadLayers(*s, p, {0, 1, 2});  // p: read once, cannot beat q's frequency
  EXPECT_EQ(s->Residency(p).tokens_device, 0u);
  ASSERT_TRUE(s->Pin(p).ok());
  ReadLayers(*s, p, {0, 1, 2});  // pinned: beats every unpinned chunk
  EXPECT_EQ(s->Residency(p).tokens_device, 64u);
  EXPECT_EQ(s->Residency(q).tokens_device, 0u);
  for (int i = 0; i < 3; ++i) ReadLayers(*s, q, {0, 1, 2});  // q cannot push p out
  EXPECT_EQ(s->Residency(p).tokens_device, 64u);
  // Control: unpinned, the hotter q takes the device tier back.
  ASSERT_TRUE(s->Unpin(p).ok());
  for (int i = 0; i < 3; ++i) ReadLayers(*s, q, {0, 1, 2});
  EXPECT_EQ(s->Residency(q).tokens_device, 64u);
  EXPECT_EQ(s->Residency(p).tokens_device, 0u);
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(PrefixStoreAdmin, DropFromSplitsKeepsThePrefixAndFreesDisk) {
  const std::string dir = TempDir("admin-drop");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(26);
  auto o = Options(dir);
  o.device_bytes = 16ull << 20;
  o.host_bytes = 16ull << 20;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto a = RandomTokens(rng, 300);
  const auto b = Concat(Prefix(a, 200), RandomTokens(rng, 100));  // branches at 200
  const auto c = Concat(Prefix(a, 50), RandomTokens(rng, 90));    // branches at 50
  auto u = RandomTokens(rng, 80);                                 // another first token
  while (u[0] == a[0]) u = RandomTokens(rng, 80);
  std::vector<std::vector<int32_t>> seqs = {a, b, c, u};
  for (const auto& q : seqs) ASSERT_TRUE(kv.Insert(*s, q, 0).ok());
  ReadLayers(*s, a, {0, 1, 2});  // some tier copies to drop too
  const uint64_t tokens_before = s->Stats().n_tokens;
  const uint64_t live_before = LiveDiskBytes(*s);

  // Not cached at that position: nothing to drop.
  auto d0 = s->DropFrom(Concat(Prefix(a, 10), {-1, -2}), 11);
  ASSERT_TRUE(d0.ok());
  EXPECT_EQ(*d0, 0u);

  // A request in flight below the split point: refused, nothing dropped.
  MatchHandle h = s->Match(b);
  auto dl = s->DropFrom(a, 120);
  EXPECT_EQ(dl.status().code(), Status::Code::kResourceExhausted) << dl.status().ToString();
  EXPECT_EQ(s->Stats().n_tokens, tokens_before);
  ASSERT_TRUE(s->Release(h).ok());

  // Naive reference: every distinct prefix that contains a[0..120] is dropped.
  const auto keep_prefix = Prefix(a, 121);
  std::set<std::vector<int32_t>> gone;
  for (const auto& q : seqs)
    if (q.size() >= 121 && Prefix(q, 121) == keep_prefix)
      for (size_t n = 121; n <= q.size(); ++n) gone.insert(Prefix(q, n));
  auto d = s->DropFrom(a, 120);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, gone.size());
  EXPECT_EQ(s->Stats().n_tokens, tokens_before - gone.size());
  EXPECT_TRUE(s->CheckConsistency().ok());
  EXPECT_EQ(s->Residency(a).n_matched, 120u);
  EXPECT_EQ(s->Residency(b).n_matched, 120u);
  EXPECT_TRUE(ReadsExact(*s, kv, a, 120));
  EXPECT_TRUE(ReadsExact(*s, kv, c, c.size()));
  EXPECT_TRUE(ReadsExact(*s, kv, u, u.size()));
  // Disk: at most one partly kept chunk per layer of a's segment stays behind.
  const uint64_t per_token = uint64_t(kLayers) * 2 * kHeads * kDim * 2;
  const uint64_t live_after = LiveDiskBytes(*s);
  ASSERT_LT(live_after, live_before);
  EXPECT_GE(live_before - live_after, (gone.size() - kC) * per_token);
  TreeSnapshot snap = s->SnapshotTree();
  EXPECT_TRUE(WellFormed(snap));
  uint64_t sum_tokens = 0;
  for (const auto& n : snap.nodes) sum_tokens += n.n_tokens;
  EXPECT_EQ(sum_tokens, DistinctPrefixes({Prefix(a, 120), c, u}));

  // Survives reopen.
  s.reset();
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->CheckConsistency().ok());
  EXPECT_TRUE(ReadsExact(*s, kv, a, 120));
  EXPECT_EQ(s->Residency(b).n_matched, 120u);

  // At a node boundary (c branches at 50): only c's tail goes.
  auto dc = s->DropFrom(c, 50);
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  EXPECT_EQ(*dc, c.size() - 50);
  EXPECT_TRUE(ReadsExact(*s, kv, a, 120));
  EXPECT_EQ(s->Residency(c).n_matched, 50u);
  EXPECT_TRUE(s->CheckConsistency().ok());

  // begin == 0: everything that starts with a[0] goes; u stays. Inserting again works.
  auto dall = s->DropFrom(a, 0);
  ASSERT_TRUE(dall.ok());
  EXPECT_EQ(*dall, 120u);
  EXPECT_EQ(s->Residency(a).n_matched, 0u);
  EXPECT_EQ(s->Stats().n_tokens, u.size());
  EXPECT_TRUE(ReadsExact(*s, kv, u, u.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
  EXPECT_TRUE(ReadsExact(*s, kv, a, a.size()));
  s.reset();
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->CheckConsistency().ok());
  EXPECT_EQ(s->Stats().n_tokens, u.size() + a.size());
  s.reset();
  std::filesystem::remove_all(dir);
}

// The catalog layout before pins (schema 1): nodes without `pinned` and `hits`, no schema_version.
TEST(PrefixStoreAdmin, CatalogFromThePreviousSchemaIsMigrated) {
  const std::string dir = TempDir("admin-migrate");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(27);
  auto o = Options(dir);
  const auto a = RandomTokens(rng, 100), b = Concat(Prefix(a, 40), RandomTokens(rng, 30));
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
    ASSERT_TRUE(kv.Insert(*s, b, 0).ok());
  }
  const std::string db_path = dir + "/catalog.db";
  auto exec = [&](const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    char* msg = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << (msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(db);
  };
  auto query = [&](const std::string& sql) {
    sqlite3* db = nullptr;
    std::string out;
    EXPECT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  };
  EXPECT_EQ(query("SELECT value FROM meta WHERE key = 'schema_version'"), std::to_string(kCatalogSchemaVersion));
  // Rewrite the nodes table in the old layout, exactly as the previous version created it.
  exec(R"(BEGIN;
CREATE TABLE nodes_old(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, segment INTEGER NOT NULL,
  seg_begin INTEGER NOT NULL, tokens BLOB NOT NULL, last_access INTEGER NOT NULL, user_data INTEGER NOT NULL);
INSERT INTO nodes_old SELECT id, parent, segment, seg_begin, tokens, last_access, user_data FROM nodes;
DROP TABLE nodes;
ALTER TABLE nodes_old RENAME TO nodes;
DELETE FROM meta WHERE key = 'schema_version';
COMMIT;)");
  EXPECT_EQ(query("SELECT COUNT(*) FROM pragma_table_info('nodes') WHERE name = 'pinned'"), "0");
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->CheckConsistency().ok());
    EXPECT_TRUE(ReadsExact(*s, kv, a, a.size()));
    EXPECT_TRUE(ReadsExact(*s, kv, b, b.size()));
    EXPECT_FALSE(s->Residency(a).pinned);
    ASSERT_TRUE(s->Pin(b).ok());
  }
  EXPECT_EQ(query("SELECT value FROM meta WHERE key = 'schema_version'"), std::to_string(kCatalogSchemaVersion));
  EXPECT_EQ(query("SELECT COUNT(*) FROM pragma_table_info('nodes') WHERE name = 'pinned'"), "1");
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->Residency(b).pinned);
    EXPECT_FALSE(s->Residency(a).pinned);  // a's tail is its own node
    EXPECT_TRUE(s->Residency(Prefix(a, 40)).pinned);
    for (const auto& n : s->SnapshotTree().nodes) EXPECT_GE(n.hits, n.pinned ? 1u : 0u);  // b was read before
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
