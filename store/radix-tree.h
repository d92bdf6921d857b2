// RadixTree: the token-exact prefix index of the KV store (SGLang RadixAttention style).
//
// Owns: the in-memory tree of token spans, one root per namespace (the model fingerprint, so KV
// of one model is never matched for another), lock references, the evictable-leaf set, and the
// bookkeeping of which part of each KV *segment* is still referenced. It does no I/O and knows
// nothing about bytes, tiers or files: the store (store/prefix-store.*) turns its answers into
// chunk reads, writes and catalog rows.
//
// Pins: a pinned node is never evicted by EvictLeaves (the store also refuses to drop it). Pins
// are closed upwards (a pinned node's ancestors are pinned: KV is useless without its prefix):
// Pin() pins a node and its ancestors, Unpin() unpins a node and then its ancestors for as long
// as no other pinned child needs them. A split copies the pin to both halves. Truncate() ignores
// pins (it is the corruption path); callers that must honour them check first.
//
// Thread contract: requires external synchronization (the store's mutex). Nothing here blocks.
//
// ---- Segments: why a node split never moves data ----------------------------------------------
// KV is written once, per insert, into an immutable *segment*: segment S holds the KV of the
// inserted sequence's positions [segment_start, n) at segment offsets [0, n - segment_start).
// Chunks are per (segment, layer, chunk index), chunk i covering segment offsets [i*C, (i+1)*C)
// (see ChunkKey in store/cache-policy.h). A tree node does not own bytes; it names a token range
// of one segment: (segment, seg_begin, length).
//
// When an insert diverges inside node X = (S, b, L) at offset m, X is split:
//   - a NEW node U (new id) takes tokens [0, m) of X: (S, b, m), parent = X's old parent;
//   - X KEEPS ITS ID and becomes the lower part: (S, b + m, L - m), parent = U; X's children,
//     lock count and user data stay with X (U copies lock count, last access and user data).
// Because both halves still name the same segment bytes, a split changes no chunk, and a
// MatchResult taken before the split stays valid (its spans are segment ranges). The catalog
// mirrors a split with one INSERT (U) and one UPDATE (X: parent, seg_begin, tokens); Insert()
// returns the SplitEvents to apply. Lock handles stay valid because X keeps its id and the
// walk X -> root now passes through U.
//
// Invariant (checked by the property test): the nodes naming segment S form a path, top to
// bottom in segment order, and their union is [live_begin, live_end). Eviction only removes
// leaves, so it only ever shrinks live_end: an Eviction reports the segment's live range after
// it, and chunks lying wholly outside [live_begin, live_end) may be freed; when nothing of the
// segment is referenced any more (segment_dead) all its chunks may be freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"

namespace impress::store {

using Token = int32_t;
using NodeId = uint64_t;     // stable for the node's lifetime, never reused; 0 = no node / the root
using SegmentId = uint64_t;  // from the same id counter as nodes (never collides with a node id)
inline constexpr NodeId kNoNode = 0;

// Tokens [seg_begin, seg_begin + length) of a segment: what one node contributes to a match.
struct PathSpan {
  NodeId node = kNoNode;
  SegmentId segment = 0;
  uint64_t seg_begin = 0;  // segment offset of this span's first token
  uint64_t length = 0;     // tokens of this node that matched (the last span may be partial)
  uint64_t depth = 0;      // sequence position of the span's first token
};

struct MatchResult {
  uint64_t n_matched = 0;      // longest cached prefix of the query, in tokens
  std::vector<PathSpan> path;  // root to leaf; sum of lengths == n_matched
  NodeId last_node = kNoNode;  // the node holding the last matched token: the handle for Lock()
};

struct SplitEvent {
  NodeId upper = kNoNode;  // the new node: first `upper_length` tokens of the old node
  NodeId lower = kNoNode;  // the old node (same id), now the rest, child of `upper`
  SegmentId segment = 0;
  uint64_t upper_seg_begin = 0;  // upper = [upper_seg_begin, + upper_length) of the segment
  uint64_t upper_length = 0;
  uint64_t lower_length = 0;  // lower = [upper_seg_begin + upper_length, + lower_length)
};

struct InsertResult {
  uint64_t n_cached_before = 0;    // tokens of the sequence that were already in the tree
  uint64_t n_inserted = 0;         // new tokens now in the tree (0: nothing new, segment unused)
  NodeId new_node = kNoNode;       // the node created for them (kNoNode if n_inserted == 0)
  uint64_t new_seg_begin = 0;      // new_node = [new_seg_begin, + n_inserted) of the segment
  NodeId last_node = kNoNode;      // node holding the sequence's last token (for Lock())
  std::vector<SplitEvent> splits;  // at most one today; apply in order
};

// A copy of one node's state; cheap (no tokens).
struct NodeInfo {
  NodeId id = kNoNode;
  NodeId parent = kNoNode;      // kNoNode: child of its namespace's root
  std::string_view name_space;  // points into the tree; valid while the namespace exists
  SegmentId segment = 0;
  uint64_t seg_begin = 0;
  uint64_t length = 0;  // tokens in this node (>= 1)
  uint64_t depth = 0;   // sequence position of the node's first token
  uint32_t lock_ref = 0;
  uint32_t n_children = 0;
  uint64_t last_access = 0;  // logical clock of the last Match/Insert that walked it
  uint64_t user_data = 0;    // the store's own field (e.g. tier residency bits)
  bool pinned = false;       // never evicted (see Pin())
  uint64_t hits = 0;         // Match(touch = true) calls whose match used this node
};

// One row of the catalog; Export() and Rebuild() use it.
struct NodeRecord {
  NodeId id = kNoNode;
  NodeId parent = kNoNode;  // kNoNode: child of the namespace root
  SegmentId segment = 0;
  uint64_t seg_begin = 0;
  std::vector<Token> tokens;  // the node's span (non-empty)
  uint64_t last_access = 0;
  uint64_t user_data = 0;
  bool pinned = false;
  uint64_t hits = 0;
};

struct RebuildReport {
  uint64_t n_restored = 0;
  // Records not restored, with the reason (orphan, empty span, duplicate id, sibling clash,
  // segment ranges that do not form a path...). Descendants of a dropped node are dropped too.
  std::vector<std::pair<NodeId, std::string>> dropped;
};

struct Eviction {
  NodeInfo node;                // the removed node, as it was
  uint64_t seg_live_begin = 0;  // the segment's referenced range after the removal ...
  uint64_t seg_live_end = 0;    // ... (empty when segment_dead)
  bool segment_dead = false;    // no node names the segment any more: free all its chunks
};

struct EvictOptions {
  // Stop once the summed `units` of removed nodes reaches this (e.g. node count or bytes).
  uint64_t target = 1;
  // Lower value = evicted first; ties go to the smaller node id. Default: last_access (LRU).
  std::function<double(const NodeInfo&)> priority;
  // What removing a node frees. Default: 1 per node.
  std::function<uint64_t(const NodeInfo&)> units;
  // Only evict within this namespace (empty: any namespace).
  std::string name_space;
};

class RadixTree {
 public:
  RadixTree();
  ~RadixTree();
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  // A fresh segment id for the KV the store is about to write.
  SegmentId NewSegmentId() { return next_id_++; }
  // Ids below `next` are taken (by rows this tree does not hold): never handed out.
  void ReserveIds(uint64_t next) { next_id_ = next > next_id_ ? next : next_id_; }

  // Longest cached prefix of `tokens` in namespace `ns` (an unknown namespace matches nothing).
  // Token-exact: the last span may end inside a node (no split happens on match). With `touch`
  // the walked nodes' last_access is set to a new clock value.
  MatchResult Match(std::string_view ns, std::span<const Token> tokens, bool touch = true);

  // Adds `tokens` (a whole sequence from position 0) to namespace `ns` (created on first use).
  // `segment` (from NewSegmentId(), never used before) holds the KV of positions
  // [segment_start, tokens.size()). Positions the tree already has keep their existing KV; the
  // rest becomes one new node naming the segment. Errors (tree unchanged): the cached prefix is
  // shorter than segment_start (the KV for the gap no longer exists: re-match and recompute),
  // a reused segment id, segment_start > tokens.size().
  Result<InsertResult> Insert(std::string_view ns, std::span<const Token> tokens, SegmentId segment,
                              uint64_t segment_start);

  // Lock references, walked from `node` to the root: a locked node (and its ancestors) is never
  // evicted or truncated. Every Lock must be paired with one Unlock of the same id; the id stays
  // valid across splits. kNoNode is accepted and does nothing.
  Status Lock(NodeId node);
  Status Unlock(NodeId node);

  // Pins `node` and every ancestor; returns the nodes whose pin changed (bottom-up).
  Result<std::vector<NodeId>> Pin(NodeId node);
  // Unpins `node`, then each ancestor in turn until one still has a pinned child (it is needed
  // by another pinned path) or was not pinned; a node that itself has a pinned child stays
  // pinned. Returns the nodes whose pin changed (bottom-up).
  Result<std::vector<NodeId>> Unpin(NodeId node);

  // Removes evictable leaves (unlocked, childless) in priority order until `target` units are
  // freed or nothing is evictable; a parent that becomes an evictable leaf joins the candidates.
  std::vector<Eviction> EvictLeaves(const EvictOptions& options);

  // Drops tokens [keep, length) of `node` and its whole subtree (e.g. a chunk failed its
  // checksum); keep == 0 removes the node. Fails (nothing changed) if the node or any node of its
  // subtree is locked, or keep >= length. Returns what was removed, bottom-up; a truncated (not
  // removed) node appears last with its new length in `node.length`.
  Result<std::vector<Eviction>> Truncate(NodeId node, uint64_t keep);

  // Rebuilds namespace `ns` from catalog rows (any order). The namespace must be empty. The id
  // counter moves past every restored node and segment id.
  Result<RebuildReport> Rebuild(std::string_view ns, const std::vector<NodeRecord>& records);
  // All nodes of `ns`, parents before children.
  std::vector<NodeRecord> Export(std::string_view ns) const;
  // Nodes of `ns` in pre-order (a parent before its children, siblings by first token), at most
  // `max_nodes` of them: the subtree of `from` (itself first), or the whole namespace (kNoNode).
  std::vector<NodeInfo> PreOrder(std::string_view ns, NodeId from = kNoNode, size_t max_nodes = SIZE_MAX) const;

  std::optional<NodeInfo> Get(NodeId node) const;
  std::span<const Token> Tokens(NodeId node) const;  // empty for an unknown id
  Status SetUserData(NodeId node, uint64_t value);
  // The referenced range [begin, end) of a live segment.
  std::optional<std::pair<uint64_t, uint64_t>> SegmentLiveRange(SegmentId segment) const;

  std::vector<NodeId> EvictableLeaves() const;  // sorted by id
  uint64_t n_nodes() const { return nodes_.size(); }
  uint64_t n_tokens() const { return n_tokens_; }
  uint64_t clock() const { return clock_; }
  std::vector<std::string> Namespaces() const;

  // Checks every structural invariant (parent/child links, depths, lock counts, evictable set,
  // segment paths); for tests. Returns the first violation.
  Status Validate() const;

 private:
  struct Node;
  struct Segment {
    uint64_t live_begin = 0;
    uint64_t live_end = 0;
    uint32_t n_nodes = 0;
  };
  struct Root;

  Root* FindRoot(std::string_view ns) const;
  Root& GetOrCreateRoot(std::string_view ns);
  NodeInfo InfoOf(const Node& n) const;
  void UpdateEvictable(Node* n);
  Eviction RemoveLeaf(Node* n);
  Node* SplitNode(Node* x, uint64_t m, SplitEvent* event);

  std::unordered_map<NodeId, std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, std::unique_ptr<Root>> roots_;
  std::unordered_map<SegmentId, Segment> segments_;
  std::unordered_set<NodeId> evictable_;
  uint64_t next_id_ = 1;
  uint64_t clock_ = 0;
  uint64_t n_tokens_ = 0;
};

// Chunks [first, end) of a segment covered by segment offsets [seg_begin, seg_begin + length),
// with `chunk_tokens` tokens per chunk (C, default 64).
inline std::pair<uint64_t, uint64_t> ChunksOfSpan(uint64_t seg_begin, uint64_t length, uint64_t chunk_tokens) {
  if (length == 0 || chunk_tokens == 0) return {0, 0};
  return {seg_begin / chunk_tokens, (seg_begin + length + chunk_tokens - 1) / chunk_tokens};
}

}  // namespace impress::store
