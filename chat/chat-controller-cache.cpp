// ChatController: the store's view of the attached documents (residency, pin, drop).
#include <fmt/format.h>

#include <algorithm>

#include "chat/chat-controller.h"

namespace impress {

Status ChatController::QuiesceStore() {
  if (!session_.store()) return Status::Ok();
  if (auto w = session_.pipeline().WaitForStore(); !w.ok()) return w.status();
  return session_.pipeline().ReleaseMatch();
}

std::vector<DocumentCacheState> ChatController::DocumentCaches() const {
  std::vector<DocumentCacheState> out(docs_.size());
  store::PrefixStore* st = session_.store();
  size_t k = 0;  // index among attached documents (spans_)
  for (size_t i = 0; i < docs_.size(); ++i) {
    DocumentCacheState& d = out[i];
    if (!st) {
      d.residency = "no KV store";
      continue;
    }
    if (retrieval_) {
      d.residency = "retrieval mode: its passages are cached per question";
      continue;
    }
    if (!docs_[i].attached) {
      d.residency = "detached";
      continue;
    }
    if (k >= spans_.size()) {
      d.residency = "unknown";
      continue;
    }
    const Conversation::TokenSpan sp = spans_[k++];
    d.span_begin = sp.begin;
    d.span_end = sp.end;
    const std::span<const store::Token> all(context_prefix_);
    const store::PrefixResidency to_end = st->Residency(all.first(size_t(sp.end)));
    const store::PrefixResidency to_begin = st->Residency(all.first(size_t(sp.begin)));
    auto part = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
    d.tokens_cached = part(std::min<uint64_t>(to_end.n_matched, uint64_t(sp.end)), uint64_t(sp.begin));
    d.tokens_device = part(to_end.tokens_device, to_begin.tokens_device);
    d.tokens_host = part(to_end.tokens_host, to_begin.tokens_host);
    d.pinned = to_end.pinned && to_end.n_matched >= uint64_t(sp.end);
    const uint64_t n = uint64_t(sp.end - sp.begin);
    if (d.tokens_cached == 0) d.residency = "not cached";
    else
      d.residency = fmt::format("{}{} of {} tokens cached: device {}, host {}, SSD {}", d.pinned ? "pinned, " : "",
                                d.tokens_cached, n, d.tokens_device, d.tokens_host, d.tokens_cached);
  }
  return out;
}

Result<DocumentCacheState> ChatController::CacheTarget(size_t index) const {
  if (!session_.store()) return Status::Unsupported("no KV store");
  if (index >= docs_.size())
    return Status::OutOfRange(fmt::format("no document {} (there are {})", index, docs_.size()));
  DocumentCacheState d = DocumentCaches()[index];
  if (d.span_begin < 0) {  // detached, retrieval mode, or its place in the prompt is unknown
    const std::string why =
        fmt::format("{}: only an attached document's cache can be pinned or dropped", docs_[index].doc.name);
    Notice(why);
    return Status::InvalidArgument(why);
  }
  return d;
}

Status ChatController::PinDocument(size_t index, bool pin) {
  IMPRESS_ASSIGN_OR_RETURN(const DocumentCacheState d, CacheTarget(index));
  const std::string& name = docs_[index].doc.name;
  (void)QuiesceStore();
  const auto prefix = std::span<const store::Token>(context_prefix_).first(size_t(d.span_end));
  store::PrefixStore* st = session_.store();
  const Status r = pin ? st->Pin(prefix) : st->Unpin(prefix);
  if (!r.ok()) Notice(fmt::format("{} {}: {}", pin ? "cannot pin" : "cannot unpin", name, r.ToString()));
  else if (pin && d.tokens_cached < uint64_t(d.span_end - d.span_begin))
    Notice(fmt::format("pinned the cached part of {} ({} of {} tokens; ask a question to cache the rest)", name,
                       d.tokens_cached, d.span_end - d.span_begin));
  else Notice(fmt::format("{} {}", pin ? "pinned the cache of" : "unpinned", name));
  return r;
}

Result<uint64_t> ChatController::DropDocumentCache(size_t index) {
  IMPRESS_ASSIGN_OR_RETURN(const DocumentCacheState d, CacheTarget(index));
  const std::string& name = docs_[index].doc.name;
  (void)QuiesceStore();
  const auto prefix = std::span<const store::Token>(context_prefix_).first(size_t(d.span_end));
  auto r = session_.store()->DropFrom(prefix, uint64_t(d.span_begin));
  if (!r.ok()) Notice(fmt::format("cannot drop the cache of {}: {}", name, r.status().ToString()));
  else Notice(fmt::format("dropped {} cached tokens from {} on (what follows it in the prompt went too)", *r, name));
  return r;
}

}  // namespace impress
