// Radix tree: unit tests of each behaviour, then a 100,000-operation property test against a
// naive per-token reference trie written here.
#include "store/radix-tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

namespace impress::store {
namespace {

std::vector<Token> T(std::initializer_list<Token> t) { return t; }

// Inserts `tokens` with a fresh segment starting where the cached prefix ends.
InsertResult InsertNew(RadixTree& tree, std::string_view ns, const std::vector<Token>& tokens) {
  const uint64_t start = tree.Match(ns, tokens, false).n_matched;
  auto r = tree.Insert(ns, tokens, tree.NewSegmentId(), start);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : InsertResult{};
}

TEST(RadixTree, MatchIsTokenExactAndMayEndInsideANode) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2, 3, 4, 5}));
  EXPECT_EQ(tree.Match("m", T({1, 2, 3, 4, 5, 6})).n_matched, 5u);
  const MatchResult r = tree.Match("m", T({1, 2, 3, 9}));
  EXPECT_EQ(r.n_matched, 3u);
  ASSERT_EQ(r.path.size(), 1u);
  EXPECT_EQ(r.path[0].length, 3u);
  EXPECT_EQ(r.path[0].seg_begin, 0u);
  EXPECT_EQ(tree.Match("m", T({2, 1})).n_matched, 0u);
  EXPECT_EQ(tree.Match("m", T({})).n_matched, 0u);
  EXPECT_EQ(tree.n_nodes(), 1u);  // matching never splits
  EXPECT_TRUE(tree.Validate().ok());
}

TEST(RadixTree, InsertSplitsAtTheDivergenceAndTheOldNodeKeepsItsIdAsLowerPart) {
  RadixTree tree;
  const InsertResult a = InsertNew(tree, "m", T({1, 2, 3, 4, 5}));
  ASSERT_NE(a.new_node, kNoNode);
  const SegmentId seg_a = tree.Get(a.new_node)->segment;

  const uint64_t start = tree.Match("m", T({1, 2, 7, 8}), false).n_matched;
  ASSERT_EQ(start, 2u);
  const SegmentId seg_b = tree.NewSegmentId();
  auto b = tree.Insert("m", T({1, 2, 7, 8}), seg_b, start);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->n_cached_before, 2u);
  EXPECT_EQ(b->n_inserted, 2u);
  EXPECT_EQ(b->new_seg_begin, 0u);
  ASSERT_EQ(b->splits.size(), 1u);
  const SplitEvent& s = b->splits[0];
  EXPECT_EQ(s.lower, a.new_node);
  EXPECT_EQ(s.segment, seg_a);
  EXPECT_EQ(s.upper_seg_begin, 0u);
  EXPECT_EQ(s.upper_length, 2u);
  EXPECT_EQ(s.lower_length, 3u);

  const NodeInfo upper = *tree.Get(s.upper);
  const NodeInfo lower = *tree.Get(s.lower);
  EXPECT_EQ(lower.parent, s.upper);
  EXPECT_EQ(lower.seg_begin, 2u);
  EXPECT_EQ(lower.depth, 2u);
  EXPECT_EQ(upper.parent, kNoNode);
  EXPECT_EQ(upper.n_children, 2u);
  EXPECT_EQ(std::vector<Token>(tree.Tokens(s.lower).begin(), tree.Tokens(s.lower).end()), T({3, 4, 5}));
  // The new branch names its own segment from offset 0.
  const NodeInfo nb = *tree.Get(b->new_node);
  EXPECT_EQ(nb.segment, seg_b);
  EXPECT_EQ(nb.parent, s.upper);
  EXPECT_EQ(nb.depth, 2u);
  // Both halves still map to the original segment's offsets.
  const MatchResult m = tree.Match("m", T({1, 2, 3, 4, 5}));
  ASSERT_EQ(m.path.size(), 2u);
  EXPECT_EQ(m.path[0].segment, seg_a);
  EXPECT_EQ(m.path[1].segment, seg_a);
  EXPECT_EQ(m.path[1].seg_begin, 2u);
  EXPECT_EQ(tree.SegmentLiveRange(seg_a), std::make_pair(uint64_t(0), uint64_t(5)));
  EXPECT_TRUE(tree.Validate().ok());
}

TEST(RadixTree, InsertOfACachedSequenceChangesNothing) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2, 3, 4}));
  auto r = tree.Insert("m", T({1, 2}), tree.NewSegmentId(), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_inserted, 0u);
  EXPECT_EQ(r->n_cached_before, 2u);
  EXPECT_TRUE(r->splits.empty());
  EXPECT_EQ(tree.n_nodes(), 1u);
}

TEST(RadixTree, InsertOverlappingTheCachedPrefixUsesTheSegmentTail) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2, 3}));
  // The caller wrote KV for positions [1, 6) but [1, 3) turned out to be cached already.
  const SegmentId seg = tree.NewSegmentId();
  auto r = tree.Insert("m", T({1, 2, 3, 4, 5, 6}), seg, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_inserted, 3u);
  EXPECT_EQ(r->new_seg_begin, 2u);  // position 3 is segment offset 2
  EXPECT_EQ(tree.SegmentLiveRange(seg), std::make_pair(uint64_t(2), uint64_t(5)));
}

TEST(RadixTree, InsertRefusesAGapBeforeTheSegmentAndReusedSegments) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2}));
  auto gap = tree.Insert("m", T({1, 2, 3, 4, 5}), tree.NewSegmentId(), 3);
  EXPECT_EQ(gap.status().code(), Status::Code::kNotFound);
  auto past = tree.Insert("m", T({1}), tree.NewSegmentId(), 2);
  EXPECT_EQ(past.status().code(), Status::Code::kInvalidArgument);
  const SegmentId seg = tree.NewSegmentId();
  ASSERT_TRUE(tree.Insert("m", T({5, 6}), seg, 0).ok());
  EXPECT_EQ(tree.Insert("m", T({7, 8}), seg, 0).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(tree.Insert("m", T({9}), 999999, 0).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(tree.n_nodes(), 2u);
  EXPECT_TRUE(tree.Validate().ok());
}

TEST(RadixTree, NamespacesNeverMatchEachOther) {
  RadixTree tree;
  InsertNew(tree, "model-a", T({1, 2, 3}));
  EXPECT_EQ(tree.Match("model-b", T({1, 2, 3})).n_matched, 0u);
  InsertNew(tree, "model-b", T({1, 2}));
  EXPECT_EQ(tree.Match("model-a", T({1, 2, 3})).n_matched, 3u);
  EXPECT_EQ(tree.Match("model-b", T({1, 2, 3})).n_matched, 2u);
  EvictOptions opt;
  opt.target = 10;
  opt.name_space = "model-b";
  const auto ev = tree.EvictLeaves(opt);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].node.name_space, "model-b");
  EXPECT_EQ(tree.Match("model-a", T({1, 2, 3})).n_matched, 3u);
  EXPECT_EQ(tree.Namespaces(), (std::vector<std::string>{"model-a", "model-b"}));
}

TEST(RadixTree, LockedPathsAreNeverEvicted) {
  RadixTree tree;
  const InsertResult a = InsertNew(tree, "m", T({1, 2, 3}));
  InsertNew(tree, "m", T({1, 2, 4}));  // splits a: upper [1,2], children [3] and [4]
  ASSERT_TRUE(tree.Lock(a.last_node).ok());
  EvictOptions all;
  all.target = 100;
  const auto ev = tree.EvictLeaves(all);
  ASSERT_EQ(ev.size(), 1u);  // only the [4] branch; [3] and its ancestor [1,2] are locked
  EXPECT_EQ(tree.Match("m", T({1, 2, 3})).n_matched, 3u);
  EXPECT_TRUE(tree.EvictableLeaves().empty());
  ASSERT_TRUE(tree.Unlock(a.last_node).ok());
  EXPECT_EQ(tree.Unlock(a.last_node).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(tree.EvictLeaves(all).size(), 2u);
  EXPECT_EQ(tree.n_nodes(), 0u);
  EXPECT_EQ(tree.n_tokens(), 0u);
}

TEST(RadixTree, LockHandleStaysValidAcrossASplit) {
  RadixTree tree;
  const InsertResult a = InsertNew(tree, "m", T({1, 2, 3, 4}));
  ASSERT_TRUE(tree.Lock(a.last_node).ok());
  const InsertResult b = InsertNew(tree, "m", T({1, 2, 9}));  // splits the locked node
  ASSERT_EQ(b.splits.size(), 1u);
  EXPECT_EQ(tree.Get(b.splits[0].upper)->lock_ref, 1u);
  EvictOptions all;
  all.target = 100;
  EXPECT_EQ(tree.EvictLeaves(all).size(), 1u);  // the [9] branch only
  ASSERT_TRUE(tree.Unlock(a.last_node).ok());
  EXPECT_EQ(tree.Get(b.splits[0].upper)->lock_ref, 0u);
  EXPECT_TRUE(tree.Validate().ok());
  EXPECT_EQ(tree.EvictLeaves(all).size(), 2u);
}

TEST(RadixTree, EvictionDefaultsToLeastRecentlyUsedAndWalksUpToParents) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2, 3}));
  InsertNew(tree, "m", T({1, 2, 4}));
  InsertNew(tree, "m", T({5}));
  tree.Match("m", T({1, 2, 3}));  // [3] and [1,2] are now the most recent
  EvictOptions opt;
  opt.target = 2;
  const auto ev = tree.EvictLeaves(opt);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(tree.Tokens(ev[0].node.id).size(), 0u);  // gone
  EXPECT_EQ(ev[0].node.depth, 2u);                   // [4] (clock 2) before [5] (clock 3)
  EXPECT_EQ(tree.Match("m", T({5})).n_matched, 0u);
  EXPECT_EQ(tree.Match("m", T({1, 2, 3})).n_matched, 3u);
  // Units: evict until 3 tokens are freed: [3] (1 token) then its parent [1,2].
  opt.target = 3;
  opt.units = [](const NodeInfo& n) { return n.length; };
  EXPECT_EQ(tree.EvictLeaves(opt).size(), 2u);
  EXPECT_EQ(tree.n_nodes(), 0u);
}

TEST(RadixTree, EvictionReportsTheSegmentsLiveRange) {
  RadixTree tree;
  const InsertResult a = InsertNew(tree, "m", T({1, 2, 3, 4, 5, 6}));
  const SegmentId seg = tree.Get(a.new_node)->segment;
  InsertNew(tree, "m", T({1, 2, 3, 4, 9}));  // split at 4
  InsertNew(tree, "m", T({1, 2, 8}));        // split at 2
  EvictOptions opt;
  opt.target = 1;
  opt.priority = [&](const NodeInfo& n) { return n.segment == seg ? 0.0 : 1.0; };
  auto ev = tree.EvictLeaves(opt);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].node.segment, seg);
  EXPECT_FALSE(ev[0].segment_dead);
  EXPECT_EQ(ev[0].seg_live_begin, 0u);
  EXPECT_EQ(ev[0].seg_live_end, 4u);
  opt.target = 100;
  ev = tree.EvictLeaves(opt);
  ASSERT_EQ(ev.size(), 4u);
  int dead = 0;
  for (const auto& e : ev) dead += e.segment_dead;
  EXPECT_EQ(dead, 3);  // every segment dies exactly once
  EXPECT_FALSE(tree.SegmentLiveRange(seg).has_value());
}

TEST(RadixTree, TruncateDropsTheTailAndTheSubtreeUnlessLocked) {
  RadixTree tree;
  const InsertResult a = InsertNew(tree, "m", T({1, 2, 3, 4, 5}));
  const InsertResult b = InsertNew(tree, "m", T({1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(tree.Lock(b.last_node).ok());
  EXPECT_EQ(tree.Truncate(a.new_node, 2).status().code(), Status::Code::kResourceExhausted);
  ASSERT_TRUE(tree.Unlock(b.last_node).ok());
  auto r = tree.Truncate(a.new_node, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE((*r)[0].segment_dead);   // b's segment
  EXPECT_EQ((*r)[1].node.length, 2u);  // a kept 2 tokens
  EXPECT_EQ((*r)[1].seg_live_end, 2u);
  EXPECT_EQ(tree.Match("m", T({1, 2, 3})).n_matched, 2u);
  EXPECT_EQ(tree.n_tokens(), 2u);
  EXPECT_EQ(tree.Truncate(a.new_node, 2).status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(tree.Validate().ok());
}

TEST(RadixTree, RebuildRestoresExportAndDropsBadRecords) {
  RadixTree tree;
  InsertNew(tree, "m", T({1, 2, 3, 4}));
  InsertNew(tree, "m", T({1, 2, 5}));
  InsertNew(tree, "m", T({1, 2, 3, 4, 6, 6}));
  InsertNew(tree, "m", T({7}));
  std::vector<NodeRecord> rows = tree.Export("m");
  ASSERT_EQ(rows.size(), 5u);
  std::reverse(rows.begin(), rows.end());  // any order is accepted
  // Bad rows: an orphan, an empty span, a sibling clash, a segment that does not continue.
  rows.push_back({9001, 4242, 9002, 0, {1}, 0, 0});
  rows.push_back({9003, kNoNode, 9004, 0, {}, 0, 0});
  rows.push_back({9005, kNoNode, 9006, 0, {7, 7}, 0, 0});
  rows.push_back({9007, rows[0].id, rows[0].segment, 50, {8}, 0, 0});  // rows[0]: deepest

  RadixTree copy;
  auto rep = copy.Rebuild("m", rows);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->n_restored, 5u);
  EXPECT_EQ(rep->dropped.size(), 4u);
  EXPECT_TRUE(copy.Validate().ok()) << copy.Validate().ToString();
  for (auto q : {T({1, 2, 3, 4, 6, 6, 1}), T({1, 2, 5}), T({7, 7}), T({1, 9})}) {
    const MatchResult x = tree.Match("m", q, false);
    const MatchResult y = copy.Match("m", q, false);
    EXPECT_EQ(x.n_matched, y.n_matched);
    ASSERT_EQ(x.path.size(), y.path.size());
    for (size_t i = 0; i < x.path.size(); ++i) {
      EXPECT_EQ(x.path[i].node, y.path[i].node);
      EXPECT_EQ(x.path[i].segment, y.path[i].segment);
      EXPECT_EQ(x.path[i].seg_begin, y.path[i].seg_begin);
    }
  }
  EXPECT_EQ(tree.EvictableLeaves(), copy.EvictableLeaves());
  // New ids never collide with restored ones.
  const SegmentId fresh = copy.NewSegmentId();
  for (const NodeRecord& r : tree.Export("m")) {
    EXPECT_GT(fresh, r.id);
    EXPECT_GT(fresh, r.segment);
  }
  EXPECT_EQ(copy.Rebuild("m", rows).status().code(), Status::Code::kInvalidArgument);
}

// ---- The property test ----------------------------------------------------------------------

// A per-token trie: the simplest possible model of "which prefixes are cached", with the radix
// node boundaries tracked as flags so eviction and locking semantics can be predicted.
class RefTrie {
 public:
  struct Tok {
    Token tok = 0;
    int parent = -1;
    std::map<Token, int> kids;
    bool boundary = false;  // a radix node ends at this token
    int locks = 0;          // Lock() calls on the node that ends here
    uint64_t seg = 0, off = 0, depth = 0;
  };
  std::vector<Tok> t{Tok{}};                                   // t[0] is the root
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> seg_live;  // seg -> (begin, n tokens)
  std::set<int> live;                                          // indices of the tokens in the trie

  // Longest prefix: returns the index of the last matched token (0 = root).
  int Walk(const std::vector<Token>& q, uint64_t* matched) const {
    int cur = 0;
    uint64_t i = 0;
    while (i < q.size()) {
      auto it = t[cur].kids.find(q[i]);
      if (it == t[cur].kids.end()) break;
      cur = it->second;
      ++i;
    }
    *matched = i;
    return cur;
  }
  int EndOfNode(int x) const {
    while (!t[x].boundary) x = t[x].kids.begin()->second;
    return x;
  }
  int StartOfNode(int end) const {
    int x = end;
    while (t[x].parent != 0 && !t[t[x].parent].boundary) x = t[x].parent;
    return x;
  }
  // Returns false (and changes nothing) when the tree must refuse.
  bool Insert(const std::vector<Token>& q, uint64_t seg, uint64_t start) {
    uint64_t m = 0;
    int cur = Walk(q, &m);
    if (m == q.size()) return true;
    if (m < start) return false;
    if (cur != 0) t[cur].boundary = true;  // split point (or already a boundary)
    seg_live[seg] = {m - start, q.size() - m};
    for (uint64_t i = m; i < q.size(); ++i) {
      Tok n;
      n.tok = q[i];
      n.parent = cur;
      n.seg = seg;
      n.off = i - start;
      n.depth = i;
      t.push_back(n);
      const int id = int(t.size()) - 1;
      t[cur].kids[q[i]] = id;
      live.insert(id);
      cur = id;
    }
    t[cur].boundary = true;
    return true;
  }
  std::vector<int> EvictableEnds() const {
    std::vector<int> out;
    for (int x : live) {
      if (t[x].boundary && t[x].kids.empty() && t[x].locks == 0) out.push_back(x);
    }
    return out;
  }
  std::vector<Token> Path(int x) const {
    std::vector<Token> p;
    for (; x != 0; x = t[x].parent) p.push_back(t[x].tok);
    std::reverse(p.begin(), p.end());
    return p;
  }
  // Removes the leaf radix node ending at `end`; returns its first token.
  int RemoveNode(int end) {
    const int start = StartOfNode(end);
    t[t[start].parent].kids.erase(t[start].tok);
    auto& seg = seg_live.at(t[start].seg);
    for (int x = end;;) {
      seg.second -= 1;
      const int up = t[x].parent;
      t[x].parent = -1;  // dead
      live.erase(x);
      if (x == start) break;
      x = up;
    }
    return start;
  }
};

uint64_t PathHash(const std::vector<Token>& path) {
  uint64_t h = 1469598103934665603ull;
  for (Token x : path) {
    h ^= uint64_t(uint32_t(x));
    h *= 1099511628211ull;
  }
  h ^= h >> 29;
  return h & ((uint64_t(1) << 52) - 1);
}

std::vector<Token> TreePath(const RadixTree& tree, NodeId id) {
  std::vector<std::vector<Token>> parts;
  while (id != kNoNode) {
    auto s = tree.Tokens(id);
    parts.emplace_back(s.begin(), s.end());
    id = tree.Get(id)->parent;
  }
  std::vector<Token> out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out.insert(out.end(), it->begin(), it->end());
  return out;
}

void RunProperty(uint64_t n_ops, uint32_t seed) {
  const std::string ns = "model";
  RadixTree tree;
  RefTrie ref;
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<Token>> inserted;
  std::vector<std::pair<NodeId, int>> held;               // (tree lock handle, ref end token)
  std::map<uint64_t, std::vector<Token>> segment_tokens;  // seg -> what the segment holds
  uint64_t n_evicted = 0, n_splits = 0, n_matched_tokens = 0, n_rebuilds = 0;

  auto random_seq = [&]() {
    std::vector<Token> q;
    if (!inserted.empty() && uni(0, 3) != 0) {  // usually share a prefix with an earlier one
      const auto& base = inserted[uni(0, int(inserted.size()) - 1)];
      q.assign(base.begin(), base.begin() + uni(0, int(base.size())));
    }
    const int alphabet = uni(0, 1) ? 2 : 4;  // small alphabets: prefixes collide often
    const int extra = uni(0, 12);
    for (int i = 0; i < extra; ++i) q.push_back(uni(0, alphabet - 1));
    return q;
  };
  // A node's full path (root to its last token) never changes, even when it is split (it keeps
  // its end), so both sides cache its hash.
  std::unordered_map<NodeId, double> tree_hash;
  std::unordered_map<int, uint64_t> ref_hash;
  auto priority = [&](const NodeInfo& n) {
    auto it = tree_hash.find(n.id);
    if (it == tree_hash.end()) it = tree_hash.emplace(n.id, double(PathHash(TreePath(tree, n.id)))).first;
    return it->second;
  };
  auto ref_priority = [&](int end) {
    auto it = ref_hash.find(end);
    if (it == ref_hash.end()) it = ref_hash.emplace(end, PathHash(ref.Path(end))).first;
    return it->second;
  };

  auto check_match = [&](const std::vector<Token>& q) {
    uint64_t want = 0;
    const int last = ref.Walk(q, &want);
    const MatchResult r = tree.Match(ns, q, uni(0, 1) == 0);
    ASSERT_EQ(r.n_matched, want);
    n_matched_tokens += want;
    uint64_t pos = 0;
    for (const PathSpan& s : r.path) {
      ASSERT_EQ(s.depth, pos);
      auto toks = tree.Tokens(s.node);
      ASSERT_LE(s.length, toks.size());
      ASSERT_GE(s.length, 1u);
      for (uint64_t i = 0; i < s.length; ++i) {
        ASSERT_EQ(toks[i], q[pos + i]);
        // The segment mapping: token pos+i lives at segment offset seg_begin+i.
        const auto& seg = segment_tokens.at(s.segment);
        ASSERT_LT(s.seg_begin + i, seg.size());
        ASSERT_EQ(seg[s.seg_begin + i], q[pos + i]);
      }
      pos += s.length;
    }
    ASSERT_EQ(pos, want);
    if (want > 0) {
      // The lock handle is the node holding the last matched token.
      const int end = ref.EndOfNode(last);
      ASSERT_EQ(TreePath(tree, r.last_node), ref.Path(end));
    }
  };
  auto check_evictable = [&]() {
    std::set<std::vector<Token>> a, b;
    for (NodeId id : tree.EvictableLeaves()) a.insert(TreePath(tree, id));
    for (int e : ref.EvictableEnds()) b.insert(ref.Path(e));
    ASSERT_EQ(a, b);
    ASSERT_TRUE(tree.Validate().ok()) << tree.Validate().ToString();
  };

  for (uint64_t op = 0; op < n_ops; ++op) {
    const int kind = uni(0, 99);
    if (kind < 35) {  // insert
      std::vector<Token> q = random_seq();
      uint64_t cached = 0;
      ref.Walk(q, &cached);
      uint64_t start = cached;
      const int mode = uni(0, 9);
      if (mode == 0 && cached > 0) start = uni(0, int(cached) - 1);  // overlapping write
      if (mode == 1 && cached < q.size()) start = cached + 1;        // a gap: must be refused
      const SegmentId seg = tree.NewSegmentId();
      const bool ok_ref = ref.Insert(q, seg, start);
      auto r = tree.Insert(ns, q, seg, start);
      ASSERT_EQ(r.ok(), ok_ref) << r.status().ToString();
      if (r.ok()) {
        segment_tokens[seg].assign(q.begin() + start, q.end());
        ASSERT_EQ(r->n_cached_before, cached);
        ASSERT_EQ(r->n_inserted, q.size() - cached);
        n_splits += r->splits.size();
        for (const SplitEvent& s : r->splits) {
          ASSERT_EQ(tree.Get(s.lower)->parent, s.upper);
          ASSERT_EQ(tree.Get(s.upper)->seg_begin + s.upper_length, tree.Get(s.lower)->seg_begin);
        }
        if (!q.empty()) inserted.push_back(q);
      }
    } else if (kind < 65) {  // match
      check_match(random_seq());
    } else if (kind < 75) {  // lock what a match found
      if (held.size() < 24) {
        std::vector<Token> q = random_seq();
        const MatchResult r = tree.Match(ns, q);
        if (r.n_matched > 0) {
          uint64_t m = 0;
          const int end = ref.EndOfNode(ref.Walk(q, &m));
          ASSERT_TRUE(tree.Lock(r.last_node).ok());
          ref.t[end].locks += 1;
          held.push_back({r.last_node, end});
        }
      }
    } else if (kind < 95) {  // unlock
      if (!held.empty()) {
        const size_t i = uni(0, int(held.size()) - 1);
        ASSERT_TRUE(tree.Unlock(held[i].first).ok());
        ref.t[held[i].second].locks -= 1;
        held.erase(held.begin() + i);
      }
    } else {  // evict: the reference predicts exactly which nodes go, in order
      EvictOptions opt;
      opt.target = tree.n_tokens() > 3000 ? 60 : uni(1, 4);
      opt.priority = priority;
      // The reference's candidates: every evictable node, ranked by its path hash.
      std::set<std::pair<uint64_t, int>> cand;
      for (int c : ref.EvictableEnds()) cand.insert({ref_priority(c), c});
      const auto ev = tree.EvictLeaves(opt);
      for (const Eviction& e : ev) {
        ASSERT_FALSE(cand.empty());
        const int best = cand.begin()->second;
        cand.erase(cand.begin());
        const int start = ref.StartOfNode(best);
        ASSERT_EQ(e.node.depth, ref.t[start].depth);
        ASSERT_EQ(e.node.length, ref.t[best].depth - ref.t[start].depth + 1);
        ASSERT_EQ(e.node.segment, ref.t[start].seg);
        ASSERT_EQ(e.node.seg_begin, ref.t[start].off);
        const uint64_t seg = ref.t[start].seg;
        const int up = ref.t[start].parent;  // the end of the parent node (or the root)
        ref.RemoveNode(best);
        if (up != 0 && ref.t[up].kids.empty() && ref.t[up].locks == 0) {
          cand.insert({ref_priority(up), up});
        }
        const auto live = ref.seg_live.at(seg);
        // The reference's own check of the invariant: what went was the segment's live tail.
        ASSERT_EQ(e.node.seg_begin, live.first + live.second);
        ASSERT_EQ(e.segment_dead, live.second == 0);
        if (!e.segment_dead) {
          ASSERT_EQ(e.seg_live_begin, live.first);
          ASSERT_EQ(e.seg_live_end, live.first + live.second);  // the live part is a prefix
        }
        ++n_evicted;
      }
      if (ev.size() < opt.target) {
        ASSERT_TRUE(ref.EvictableEnds().empty());
      }
    }
    if (op % 200 == 0) check_evictable();
    if (op % 20000 == 19999) {  // the catalog round trip mid-run
      RadixTree copy;
      auto rep = copy.Rebuild(ns, tree.Export(ns));
      ASSERT_TRUE(rep.ok());
      ASSERT_TRUE(rep->dropped.empty());
      ASSERT_EQ(copy.n_tokens(), tree.n_tokens());
      for (int i = 0; i < 50; ++i) {
        const auto q = random_seq();
        ASSERT_EQ(copy.Match(ns, q, false).n_matched, tree.Match(ns, q, false).n_matched);
      }
      ++n_rebuilds;
    }
  }
  check_evictable();
  std::printf(
      "radix property: %llu ops, %llu nodes, %llu tokens, %llu splits, %llu evictions, "
      "%llu matched tokens, %llu rebuilds\n",
      (unsigned long long)n_ops, (unsigned long long)tree.n_nodes(), (unsigned long long)tree.n_tokens(),
      (unsigned long long)n_splits, (unsigned long long)n_evicted, (unsigned long long)n_matched_tokens,
      (unsigned long long)n_rebuilds);
  EXPECT_GT(n_splits, 100u);
  EXPECT_GT(n_evicted, 100u);
}

// Sanitizer builds (CI's ASan pass) run a shorter trace; Release runs the full 100,000 ops.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kPropertyOps = 30000;
#else
constexpr uint64_t kPropertyOps = 100000;
#endif

TEST(RadixTreeProperty, HundredThousandRandomOpsAgreeWithANaiveTrie) {
  const auto t0 = std::chrono::steady_clock::now();
  RunProperty(kPropertyOps, 20250101);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("radix property: %.2f s\n", s);
}

TEST(RadixTreeProperty, OtherSeedsAgreeToo) {
  for (uint32_t seed : {1u, 2u, 3u}) RunProperty(5000, seed);
}

}  // namespace
}  // namespace impress::store
