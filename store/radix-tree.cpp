// RadixTree: see radix-tree.h for the segment model and the split contract.
#include "store/radix-tree.h"

#include <algorithm>
#include <deque>
#include <map>
#include <queue>
#include <tuple>

namespace impress::store {

struct RadixTree::Node {
  NodeId id = kNoNode;
  Node* parent = nullptr;  // nullptr only for a namespace root
  Root* root = nullptr;
  std::vector<Token> tokens;  // the span; empty only for a root
  SegmentId segment = 0;
  uint64_t seg_begin = 0;
  uint64_t depth = 0;
  uint32_t lock_ref = 0;   // own_locks + sum of the children's lock_ref
  uint32_t own_locks = 0;  // Lock() calls naming this node (for Validate)
  uint64_t last_access = 0;
  uint64_t user_data = 0;
  bool pinned = false;
  uint64_t hits = 0;
  std::unordered_map<Token, Node*> children;  // keyed by the child's first token

  bool is_root() const { return parent == nullptr; }
};

struct RadixTree::Root {
  std::string name;
  Node node;
};

RadixTree::RadixTree() = default;
RadixTree::~RadixTree() = default;

namespace {

uint64_t CommonPrefix(std::span<const Token> a, std::span<const Token> b) {
  const uint64_t n = std::min(a.size(), b.size());
  uint64_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

std::string Id(NodeId id) { return "node " + std::to_string(id); }

}  // namespace

RadixTree::Root* RadixTree::FindRoot(std::string_view ns) const {
  auto it = roots_.find(std::string(ns));
  return it == roots_.end() ? nullptr : it->second.get();
}

RadixTree::Root& RadixTree::GetOrCreateRoot(std::string_view ns) {
  auto& slot = roots_[std::string(ns)];
  if (!slot) {
    slot = std::make_unique<Root>();
    slot->name = std::string(ns);
    slot->node.root = slot.get();
  }
  return *slot;
}

NodeInfo RadixTree::InfoOf(const Node& n) const {
  NodeInfo info;
  info.id = n.id;
  info.parent = (n.parent == nullptr || n.parent->is_root()) ? kNoNode : n.parent->id;
  info.name_space = n.root->name;
  info.segment = n.segment;
  info.seg_begin = n.seg_begin;
  info.length = n.tokens.size();
  info.depth = n.depth;
  info.lock_ref = n.lock_ref;
  info.n_children = uint32_t(n.children.size());
  info.last_access = n.last_access;
  info.user_data = n.user_data;
  info.pinned = n.pinned;
  info.hits = n.hits;
  return info;
}

void RadixTree::UpdateEvictable(Node* n) {
  if (n->is_root()) return;
  if (n->children.empty() && n->lock_ref == 0 && !n->pinned) {
    evictable_.insert(n->id);
  } else {
    evictable_.erase(n->id);
  }
}

MatchResult RadixTree::Match(std::string_view ns, std::span<const Token> tokens, bool touch) {
  MatchResult result;
  Root* root = FindRoot(ns);
  if (root == nullptr) return result;
  if (touch) ++clock_;
  Node* cur = &root->node;
  uint64_t pos = 0;
  while (pos < tokens.size()) {
    auto it = cur->children.find(tokens[pos]);
    if (it == cur->children.end()) break;
    Node* child = it->second;
    const uint64_t k = CommonPrefix(child->tokens, tokens.subspan(pos));
    if (touch) {
      child->last_access = clock_;
      child->hits += 1;
    }
    result.path.push_back({child->id, child->segment, child->seg_begin, k, pos});
    result.last_node = child->id;
    pos += k;
    if (k < child->tokens.size()) break;
    cur = child;
  }
  result.n_matched = pos;
  return result;
}

RadixTree::Node* RadixTree::SplitNode(Node* x, uint64_t m, SplitEvent* event) {
  auto upper_owned = std::make_unique<Node>();
  Node* u = upper_owned.get();
  u->id = next_id_++;
  u->parent = x->parent;
  u->root = x->root;
  u->tokens.assign(x->tokens.begin(), x->tokens.begin() + m);
  u->segment = x->segment;
  u->seg_begin = x->seg_begin;
  u->depth = x->depth;
  u->lock_ref = x->lock_ref;  // every lock below u now passes through it
  u->last_access = x->last_access;
  u->user_data = x->user_data;
  u->pinned = x->pinned;
  u->hits = x->hits;

  x->tokens.erase(x->tokens.begin(), x->tokens.begin() + m);
  x->seg_begin += m;
  x->depth += m;
  x->parent->children[u->tokens[0]] = u;
  x->parent = u;
  u->children[x->tokens[0]] = x;
  segments_[x->segment].n_nodes += 1;

  if (event != nullptr) {
    *event = {u->id, x->id, u->segment, u->seg_begin, m, uint64_t(x->tokens.size())};
  }
  nodes_.emplace(u->id, std::move(upper_owned));
  UpdateEvictable(u);
  return u;
}

Result<InsertResult> RadixTree::Insert(std::string_view ns, std::span<const Token> tokens, SegmentId segment,
                                       uint64_t segment_start) {
  const uint64_t n = tokens.size();
  if (segment_start > n) {
    return Status::InvalidArgument("radix insert: segment_start " + std::to_string(segment_start) +
                                   " is past the sequence end " + std::to_string(n));
  }
  // Dry run: how much is cached already.
  const MatchResult dry = Match(ns, tokens, /*touch=*/false);
  if (dry.n_matched < n) {
    if (segment == 0 || segment >= next_id_ || segments_.count(segment) != 0 || nodes_.count(segment) != 0) {
      return Status::InvalidArgument("radix insert: segment " + std::to_string(segment) +
                                     " was not handed out by NewSegmentId() or is already in use");
    }
    if (dry.n_matched < segment_start) {
      return Status::NotFound("radix insert: only " + std::to_string(dry.n_matched) +
                              " tokens of the prefix are cached but segment " + std::to_string(segment) +
                              " starts at position " + std::to_string(segment_start) + "; the KV in between is gone");
    }
  }

  InsertResult result;
  result.n_cached_before = dry.n_matched;
  Root& root = GetOrCreateRoot(ns);
  ++clock_;
  Node* cur = &root.node;
  uint64_t pos = 0;
  while (pos < n) {
    auto it = cur->children.find(tokens[pos]);
    if (it == cur->children.end()) break;
    Node* child = it->second;
    const uint64_t k = CommonPrefix(child->tokens, tokens.subspan(pos));
    child->last_access = clock_;
    pos += k;
    if (k < child->tokens.size()) {
      if (pos < n) {  // diverges inside `child`: split it, the new span hangs off the upper part
        SplitEvent event;
        cur = SplitNode(child, k, &event);
        result.splits.push_back(event);
      } else {
        result.last_node = child->id;  // the sequence ends inside `child`: nothing to add
      }
      break;
    }
    cur = child;
    result.last_node = child->id;
  }
  if (pos == n) return result;

  auto owned = std::make_unique<Node>();
  Node* node = owned.get();
  node->id = next_id_++;
  node->parent = cur;
  node->root = &root;
  node->tokens.assign(tokens.begin() + pos, tokens.end());
  node->segment = segment;
  node->seg_begin = pos - segment_start;
  node->depth = pos;
  node->last_access = clock_;
  cur->children[node->tokens[0]] = node;
  nodes_.emplace(node->id, std::move(owned));
  segments_[segment] = {node->seg_begin, node->seg_begin + node->tokens.size(), 1};
  n_tokens_ += node->tokens.size();
  UpdateEvictable(cur);
  UpdateEvictable(node);

  result.n_inserted = n - pos;
  result.new_node = node->id;
  result.new_seg_begin = node->seg_begin;
  result.last_node = node->id;
  return result;
}

Status RadixTree::Lock(NodeId id) {
  if (id == kNoNode) return Status::Ok();
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix lock: no " + Id(id));
  Node* n = it->second.get();
  n->own_locks += 1;
  for (; !n->is_root(); n = n->parent) {
    n->lock_ref += 1;
    UpdateEvictable(n);
  }
  return Status::Ok();
}

Status RadixTree::Unlock(NodeId id) {
  if (id == kNoNode) return Status::Ok();
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix unlock: no " + Id(id));
  Node* n = it->second.get();
  if (n->own_locks == 0) {
    return Status::InvalidArgument("radix unlock: " + Id(id) + " is not locked");
  }
  n->own_locks -= 1;
  for (; !n->is_root(); n = n->parent) {
    n->lock_ref -= 1;
    UpdateEvictable(n);
  }
  return Status::Ok();
}

Result<std::vector<NodeId>> RadixTree::Pin(NodeId id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix pin: no " + Id(id));
  std::vector<NodeId> changed;
  for (Node* n = it->second.get(); !n->is_root(); n = n->parent) {
    if (n->pinned) continue;  // ancestors of a pinned node are pinned, but keep walking: cheap
    n->pinned = true;
    changed.push_back(n->id);
    UpdateEvictable(n);
  }
  return changed;
}

Result<std::vector<NodeId>> RadixTree::Unpin(NodeId id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix unpin: no " + Id(id));
  std::vector<NodeId> changed;
  for (Node* n = it->second.get(); !n->is_root() && n->pinned; n = n->parent) {
    bool needed = false;
    for (auto& [tok, c] : n->children) needed = needed || c->pinned;
    if (needed) break;
    n->pinned = false;
    changed.push_back(n->id);
    UpdateEvictable(n);
  }
  return changed;
}

Eviction RadixTree::RemoveLeaf(Node* n) {
  Eviction ev;
  ev.node = InfoOf(*n);
  Segment& seg = segments_[n->segment];
  // Only the lowest node of a segment's path can be a leaf, so the live range shrinks at its end.
  seg.live_end = n->seg_begin;
  seg.n_nodes -= 1;
  if (seg.n_nodes == 0) {
    ev.segment_dead = true;
    segments_.erase(n->segment);
  } else {
    ev.seg_live_begin = seg.live_begin;
    ev.seg_live_end = seg.live_end;
  }
  n_tokens_ -= n->tokens.size();
  evictable_.erase(n->id);
  Node* parent = n->parent;
  parent->children.erase(n->tokens[0]);
  nodes_.erase(n->id);  // frees n
  UpdateEvictable(parent);
  return ev;
}

std::vector<Eviction> RadixTree::EvictLeaves(const EvictOptions& options) {
  std::vector<Eviction> out;
  if (options.target == 0) return out;
  auto priority = [&](const Node& n) { return options.priority ? options.priority(InfoOf(n)) : double(n.last_access); };
  using Item = std::pair<double, NodeId>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (NodeId id : evictable_) {
    const Node& n = *nodes_.at(id);
    if (!options.name_space.empty() && n.root->name != options.name_space) continue;
    heap.push({priority(n), id});
  }
  uint64_t freed = 0;
  while (freed < options.target && !heap.empty()) {
    const NodeId id = heap.top().second;
    heap.pop();
    Node* n = nodes_.at(id).get();
    Node* parent = n->parent;
    const NodeInfo info = InfoOf(*n);
    out.push_back(RemoveLeaf(n));
    freed += options.units ? options.units(info) : 1;
    if (!parent->is_root() && evictable_.count(parent->id) != 0) {
      heap.push({priority(*parent), parent->id});
    }
  }
  return out;
}

Result<std::vector<Eviction>> RadixTree::Truncate(NodeId id, uint64_t keep) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix truncate: no " + Id(id));
  Node* node = it->second.get();
  if (keep >= node->tokens.size()) {
    return Status::InvalidArgument("radix truncate: keep " + std::to_string(keep) + " of " + Id(id) + " with " +
                                   std::to_string(node->tokens.size()) + " tokens removes nothing");
  }
  if (node->lock_ref != 0) {  // counts every lock in the subtree
    return Status::ResourceExhausted("radix truncate: " + Id(id) + " or a descendant is locked");
  }
  // Post-order: children before parents, so each is a leaf when removed.
  std::vector<Node*> order;
  std::vector<std::pair<Node*, bool>> stack = {{node, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      order.push_back(n);
      continue;
    }
    stack.push_back({n, true});
    for (auto& [tok, c] : n->children) stack.push_back({c, false});
  }
  std::vector<Eviction> out;
  for (Node* n : order) {
    if (n == node) break;  // the last one
    out.push_back(RemoveLeaf(n));
  }
  if (keep == 0) {
    out.push_back(RemoveLeaf(node));
    return out;
  }
  n_tokens_ -= node->tokens.size() - keep;
  node->tokens.resize(keep);
  Segment& seg = segments_[node->segment];
  seg.live_end = node->seg_begin + keep;
  UpdateEvictable(node);
  Eviction ev;
  ev.node = InfoOf(*node);
  ev.seg_live_begin = seg.live_begin;
  ev.seg_live_end = seg.live_end;
  out.push_back(ev);
  return out;
}

Result<RebuildReport> RadixTree::Rebuild(std::string_view ns, const std::vector<NodeRecord>& records) {
  Root* existing = FindRoot(ns);
  if (existing != nullptr && !existing->node.children.empty()) {
    return Status::InvalidArgument("radix rebuild: namespace '" + std::string(ns) + "' is not empty");
  }
  RebuildReport report;
  // Index the records; drop the ones that are malformed on their own.
  std::unordered_map<NodeId, const NodeRecord*> by_id;
  std::map<NodeId, std::vector<const NodeRecord*>> children;  // parent -> records
  std::unordered_set<NodeId> reported;
  auto drop = [&](NodeId id, std::string why) {
    if (reported.insert(id).second) report.dropped.push_back({id, std::move(why)});
  };
  for (const NodeRecord& r : records) {
    if (r.id == kNoNode) {
      drop(r.id, "node id 0 is reserved for the root");
    } else if (r.tokens.empty()) {
      drop(r.id, "empty token span");
    } else if (nodes_.count(r.id) != 0 || by_id.count(r.id) != 0) {
      drop(r.id, "duplicate node id");
    } else if (r.segment == 0 || nodes_.count(r.segment) != 0 || segments_.count(r.segment) != 0) {
      drop(r.id, "segment " + std::to_string(r.segment) + " is 0 or already in use");
    } else {
      by_id[r.id] = &r;
    }
  }
  for (auto& [id, r] : by_id) children[r->parent].push_back(r);
  for (auto& [parent, list] : children) {
    std::sort(list.begin(), list.end(), [](const NodeRecord* a, const NodeRecord* b) { return a->id < b->id; });
  }

  Root& root = GetOrCreateRoot(ns);
  std::deque<Node*> queue = {&root.node};
  std::unordered_set<NodeId> accepted;
  while (!queue.empty()) {
    Node* parent = queue.front();
    queue.pop_front();
    auto cit = children.find(parent->is_root() ? kNoNode : parent->id);
    if (cit == children.end()) continue;
    for (const NodeRecord* r : cit->second) {
      if (parent->children.count(r->tokens[0]) != 0) {
        drop(r->id, "shares its first token with a sibling");
        continue;
      }
      auto sit = segments_.find(r->segment);
      if (sit != segments_.end()) {
        // A segment seen before must continue straight down from its current lowest node.
        if (parent->is_root() || parent->segment != r->segment ||
            parent->seg_begin + parent->tokens.size() != r->seg_begin || sit->second.live_end != r->seg_begin) {
          drop(r->id, "segment " + std::to_string(r->segment) + " range does not continue its parent's");
          continue;
        }
      }
      auto owned = std::make_unique<Node>();
      Node* n = owned.get();
      n->id = r->id;
      n->parent = parent;
      n->root = &root;
      n->tokens = r->tokens;
      n->segment = r->segment;
      n->seg_begin = r->seg_begin;
      n->depth = parent->depth + parent->tokens.size();
      n->last_access = r->last_access;
      n->user_data = r->user_data;
      n->pinned = r->pinned;
      n->hits = r->hits;
      parent->children[n->tokens[0]] = n;
      if (sit != segments_.end()) {
        sit->second.live_end += n->tokens.size();
        sit->second.n_nodes += 1;
      } else {
        segments_[n->segment] = {n->seg_begin, n->seg_begin + n->tokens.size(), 1};
      }
      n_tokens_ += n->tokens.size();
      next_id_ = std::max({next_id_, n->id + 1, n->segment + 1});
      clock_ = std::max(clock_, n->last_access);
      nodes_.emplace(n->id, std::move(owned));
      accepted.insert(n->id);
      report.n_restored += 1;
      queue.push_back(n);
    }
  }
  for (const NodeRecord& r : records) {
    if (accepted.count(r.id) == 0) drop(r.id, "parent " + std::to_string(r.parent) + " missing or dropped");
  }
  // Pins are closed upwards (rows written by this code always are; repair any that are not).
  for (NodeId id : accepted) {
    Node* n = nodes_.at(id).get();
    if (!n->pinned) continue;
    for (Node* a = n->parent; !a->is_root() && !a->pinned; a = a->parent) a->pinned = true;
  }
  // Evictability, bottom-up order does not matter: it depends on children, locks and pins only.
  for (NodeId id : accepted) UpdateEvictable(nodes_.at(id).get());
  return report;
}

std::vector<NodeRecord> RadixTree::Export(std::string_view ns) const {
  std::vector<NodeRecord> out;
  Root* root = FindRoot(ns);
  if (root == nullptr) return out;
  std::deque<const Node*> queue = {&root->node};
  while (!queue.empty()) {
    const Node* n = queue.front();
    queue.pop_front();
    if (!n->is_root()) {
      out.push_back({n->id, n->parent->is_root() ? kNoNode : n->parent->id, n->segment, n->seg_begin, n->tokens,
                     n->last_access, n->user_data, n->pinned, n->hits});
    }
    std::vector<const Node*> kids;
    for (auto& [tok, c] : n->children) kids.push_back(c);
    std::sort(kids.begin(), kids.end(), [](const Node* a, const Node* b) { return a->id < b->id; });
    for (const Node* c : kids) queue.push_back(c);
  }
  return out;
}

std::vector<NodeInfo> RadixTree::PreOrder(std::string_view ns, NodeId from, size_t max_nodes) const {
  std::vector<NodeInfo> out;
  Root* root = FindRoot(ns);
  if (root == nullptr || max_nodes == 0) return out;
  const Node* start = &root->node;
  if (from != kNoNode) {
    auto it = nodes_.find(from);
    if (it == nodes_.end() || it->second->root != root) return out;
    start = it->second.get();
  }
  std::vector<const Node*> stack = {start};
  while (!stack.empty() && out.size() < max_nodes) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!n->is_root()) out.push_back(InfoOf(*n));
    std::vector<const Node*> kids;
    for (auto& [tok, c] : n->children) kids.push_back(c);
    // Reverse order on the stack so the smallest first token comes out first.
    std::sort(kids.begin(), kids.end(), [](const Node* a, const Node* b) { return a->tokens[0] > b->tokens[0]; });
    for (const Node* c : kids) stack.push_back(c);
  }
  return out;
}

std::optional<NodeInfo> RadixTree::Get(NodeId id) const {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return std::nullopt;
  return InfoOf(*it->second);
}

std::span<const Token> RadixTree::Tokens(NodeId id) const {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return {};
  return it->second->tokens;
}

Status RadixTree::SetUserData(NodeId id, uint64_t value) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("radix set user data: no " + Id(id));
  it->second->user_data = value;
  return Status::Ok();
}

std::optional<std::pair<uint64_t, uint64_t>> RadixTree::SegmentLiveRange(SegmentId s) const {
  auto it = segments_.find(s);
  if (it == segments_.end()) return std::nullopt;
  return std::make_pair(it->second.live_begin, it->second.live_end);
}

std::vector<NodeId> RadixTree::EvictableLeaves() const {
  std::vector<NodeId> out(evictable_.begin(), evictable_.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> RadixTree::Namespaces() const {
  std::vector<std::string> out;
  for (auto& [name, root] : roots_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

Status RadixTree::Validate() const {
  uint64_t n_seen = 0;
  uint64_t n_tokens = 0;
  std::unordered_map<SegmentId, std::vector<const Node*>> by_segment;
  for (auto& [name, root] : roots_) {
    std::vector<const Node*> stack = {&root->node};
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      uint64_t child_locks = 0;
      for (auto& [tok, c] : n->children) {
        if (c->parent != n) return Status::Internal(Id(c->id) + ": wrong parent link");
        if (c->tokens.empty() || c->tokens[0] != tok) {
          return Status::Internal(Id(c->id) + ": child key is not its first token");
        }
        if (c->root != root.get()) return Status::Internal(Id(c->id) + ": wrong namespace");
        if (c->depth != n->depth + n->tokens.size()) {
          return Status::Internal(Id(c->id) + ": wrong depth");
        }
        child_locks += c->lock_ref;
        stack.push_back(c);
      }
      if (n->is_root()) continue;
      ++n_seen;
      n_tokens += n->tokens.size();
      auto it = nodes_.find(n->id);
      if (it == nodes_.end() || it->second.get() != n) {
        return Status::Internal(Id(n->id) + ": not indexed");
      }
      if (n->lock_ref != n->own_locks + child_locks) {
        return Status::Internal(Id(n->id) + ": lock_ref != own locks + children's");
      }
      const bool evictable = n->children.empty() && n->lock_ref == 0 && !n->pinned;
      if (n->pinned && !n->parent->is_root() && !n->parent->pinned) {
        return Status::Internal(Id(n->id) + ": pinned under an unpinned parent");
      }
      if (evictable != (evictable_.count(n->id) != 0)) {
        return Status::Internal(Id(n->id) + ": evictable set out of date");
      }
      by_segment[n->segment].push_back(n);
    }
  }
  if (n_seen != nodes_.size()) return Status::Internal("unreachable nodes in the index");
  if (n_tokens != n_tokens_) return Status::Internal("token count out of date");
  if (by_segment.size() != segments_.size()) return Status::Internal("segment count out of date");
  for (auto& [sid, list] : by_segment) {
    auto sit = segments_.find(sid);
    if (sit == segments_.end()) return Status::Internal("segment " + std::to_string(sid) + " lost");
    std::sort(list.begin(), list.end(), [](const Node* a, const Node* b) { return a->seg_begin < b->seg_begin; });
    const Segment& seg = sit->second;
    if (seg.n_nodes != list.size() || list.front()->seg_begin != seg.live_begin) {
      return Status::Internal("segment " + std::to_string(sid) + ": live range out of date");
    }
    for (size_t i = 1; i < list.size(); ++i) {
      if (list[i]->parent != list[i - 1] || list[i]->seg_begin != list[i - 1]->seg_begin + list[i - 1]->tokens.size()) {
        return Status::Internal("segment " + std::to_string(sid) + ": nodes are not a path");
      }
    }
    if (list.back()->seg_begin + list.back()->tokens.size() != seg.live_end) {
      return Status::Internal("segment " + std::to_string(sid) + ": live end out of date");
    }
  }
  return Status::Ok();
}

}  // namespace impress::store
