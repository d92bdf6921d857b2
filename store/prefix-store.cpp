// PrefixStore: the public facade. Every method forwards to the PrefixStore::Impl method of the
// same name (store/prefix-store-impl.h says which file holds which job).
#include "store/prefix-store.h"

#include "store/prefix-store-impl.h"

namespace impress::store {

PrefixStore::PrefixStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PrefixStore>> PrefixStore::Open(PrefixStoreOptions options) {
  IMPRESS_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Impl::Open(std::move(options)));
  return std::unique_ptr<PrefixStore>(new PrefixStore(std::move(impl)));
}

PrefixStore::~PrefixStore() { impl_->Close(); }

const PrefixStoreOptions& PrefixStore::options() const { return impl_->opt; }

MatchHandle PrefixStore::Match(std::span<const Token> tokens) { return impl_->Match(tokens); }
Status PrefixStore::Release(MatchHandle& handle) { return impl_->Release(handle); }

Result<ReadTicket> PrefixStore::SubmitProbeKeys(const MatchHandle& h, int il, uint8_t* records_into) {
  return impl_->SubmitProbeKeys(h, il, records_into);
}
Result<ReadTicket> PrefixStore::SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions,
                                             bool want_k, bool want_v) {
  return impl_->SubmitReadKV(h, il, positions, want_k, want_v, std::nullopt);
}
Result<ReadTicket> PrefixStore::SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions,
                                             bool want_k, bool want_v, ReadInto into) {
  return impl_->SubmitReadKV(h, il, positions, want_k, want_v, std::move(into));
}
Result<ReadTicket> PrefixStore::SubmitReadAllKeys(const MatchHandle& h, int il) {
  return impl_->SubmitReadAllKeys(h, il);
}
Result<std::vector<uint32_t>> PrefixStore::ReadGroups(const MatchHandle& h, int il, uint32_t group_tokens) {
  return impl_->ReadGroups(h, il, group_tokens);
}
uint32_t PrefixStore::BlockGroupTokens() const { return impl_->BlockGroupTokens(); }
void PrefixStore::HoldAdmissions() { impl_->HoldAdmissions(true); }
void PrefixStore::ReleaseAdmissions() { impl_->HoldAdmissions(false); }
Result<ReadResult> PrefixStore::Wait(ReadTicket t) { return impl_->Wait(t); }
Result<ReadStats> PrefixStore::WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out) {
  return impl_->WaitInto(t, k_out, v_out);
}

Result<ReadStats> PrefixStore::WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out, std::span<const uint32_t> out_rows) {
  return impl_->WaitInto(t, k_out, v_out, nullptr, out_rows);
}
Result<ReadStats> PrefixStore::WaitProbeRecords(ReadTicket t, uint8_t* records_out) {
  if (!records_out) return Status::InvalidArgument("store: WaitProbeRecords without a buffer");
  return impl_->WaitInto(t, nullptr, nullptr, records_out);
}

Result<InsertSummary> PrefixStore::Insert(std::span<const Token> tokens, uint64_t start,
                                          std::span<const LayerKV> layers, const InsertOptions& io) {
  auto r = impl_->Insert(tokens, start, layers, io.shared_prefix);
  if (r.ok() && r->n_written > 0) impl_->PublishToTeam(tokens, start, layers, io);
  // KV past a prefix this request read from the team tier: stored once the background fill has
  // brought the prefix here.
  if (!r.ok() && r.status().code() == Status::Code::kNotFound && impl_->DeferInsert(tokens, start, layers, io))
    return InsertSummary{.n_cached_before = start, .n_written = 0, .bytes_written = 0};
  return r;
}
TeamFill PrefixStore::FillFromTeam(std::span<const Token> tokens) { return impl_->FillFromTeam(tokens); }
Result<uint64_t> PrefixStore::PublishCached(std::span<const Token> tokens) { return impl_->PublishCached(tokens); }
bool PrefixStore::WaitTeamPublished(std::chrono::milliseconds timeout) { return impl_->WaitTeamPublished(timeout); }
Status PrefixStore::ReportImportance(const MatchHandle& h, int il, std::span<const uint32_t> selected,
                                     std::span<const float> scores) {
  return impl_->ReportImportance(h, il, selected, scores);
}

StoreStats PrefixStore::Stats() { return impl_->Stats(); }
Result<ReorderReport> PrefixStore::ReorderNow() { return impl_->ReorderNow(); }
Result<uint64_t> PrefixStore::EvictNodes(uint64_t n) { return impl_->EvictNodes(n); }
std::vector<TierMove> PrefixStore::SetTierBudget(Tier tier, uint64_t bytes) {
  return impl_->SetTierBudget(tier, bytes);
}
Status PrefixStore::SetSsdBudget(uint64_t bytes) { return impl_->SetSsdBudget(bytes); }
void PrefixStore::SetPolicy(PolicyKind kind) { impl_->SetPolicy(kind); }
void PrefixStore::SetReorderInterval(std::chrono::milliseconds interval) { impl_->SetReorderInterval(interval); }
Status PrefixStore::Flush() { return impl_->Flush(); }

TreeSnapshot PrefixStore::SnapshotTree(size_t max_nodes) { return impl_->SnapshotTree(max_nodes); }
PrefixResidency PrefixStore::Residency(std::span<const Token> tokens) { return impl_->Residency(tokens); }
Status PrefixStore::Pin(std::span<const Token> tokens) { return impl_->SetPinned(tokens, true); }
Status PrefixStore::Unpin(std::span<const Token> tokens) { return impl_->SetPinned(tokens, false); }
Result<uint64_t> PrefixStore::DropFrom(std::span<const Token> tokens, uint64_t begin) {
  return impl_->DropFrom(tokens, begin);
}
Status PrefixStore::CheckConsistency() { return impl_->CheckConsistency(); }

}  // namespace impress::store
