// A chunk admitted to a memory tier from the SSD costs the blocks the request wanted, not a read
// of the whole chunk: the tier keeps the records that read brought, serves them from memory
// afterwards, and brings the missing ones from the SSD when a later request wants them. The tier
// budgets count the bytes the tiers hold in the store's encoding (int8 records are smaller).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "store/chunk-format.h"
#include "store/kv-codec.h"
#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

// One layer, 2 KV heads of 32 dims: a K (or V) record is 128 bytes, so a 64-token chunk's K region
// is two 4 KiB blocks (slots 0-31, 32-63), and so is its V region.
constexpr int kHeads = 2, kDim = 32;
constexpr uint32_t kChunk = 64;

PrefixStoreOptions Options(const std::string& dir, KVEncoding enc, uint64_t device_bytes) {
  PrefixStoreOptions o = TestOptions(dir, "model-partial-admission", 1, kHeads, kDim, {0}, kChunk);
  o.kv_encoding = enc;
  o.device_bytes = device_bytes;
  o.admit_on_insert = false;  // every chunk starts on the SSD only
  return o;
}

std::vector<uint32_t> Range(uint32_t a, uint32_t b) {
  std::vector<uint32_t> v(b - a);
  std::iota(v.begin(), v.end(), a);
  return v;
}

// A store in a fresh directory (device tier of 16 MiB, f16) holding two chunks of random tokens,
// and a match of them; the directory goes with it.
struct TwoChunks {
  std::string dir;
  SyntheticKV kv{1, kHeads, kDim};
  std::vector<int32_t> t;
  std::unique_ptr<PrefixStore> s;
  MatchHandle h;
  TwoChunks(const std::string& tag, std::mt19937& rng) : dir(TempDir(tag)) {
    s = OpenOrDie(Options(dir, KVEncoding::kF16, 16ull << 20));
    t = RandomTokens(rng, 2 * kChunk);
    if (!s || !kv.Insert(*s, t, 0).ok()) s.reset();
    if (s) h = s->Match(t);
  }
  ~TwoChunks() {
    s.reset();
    std::filesystem::remove_all(dir);
  }
};

TEST(PartialAdmission, AdmitsWhatWasReadAndFillsInLater) {
  const std::string dir = TempDir("partial-admission");
  SyntheticKV kv{1, kHeads, kDim};
  std::mt19937 rng(11);
  auto s = OpenOrDie(Options(dir, KVEncoding::kF16, 16ull << 20));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, kChunk);  // one chunk
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  ASSERT_EQ(s->Stats().tiers.device.n_chunks, 0u);

  auto read = [&](const std::vector<uint32_t>& pos, bool want_k, bool want_v) {
    MatchHandle h = s->Match(t);
    EXPECT_EQ(h.n_matched, t.size());
    auto r = s->Wait(*s->SubmitReadKV(h, 0, pos, want_k, want_v));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kv.Check(t, 0, pos, *r, want_k, want_v));
    EXPECT_TRUE(s->Release(h).ok());
    return r.ok() ? r->stats : ReadStats{};
  };

  // An eighth of the chunk (slots 0-7, in the first K block and the first V block): those two
  // blocks, not the chunk's five (header, two K, two V).
  ReadStats a = read(Range(0, 8), true, true);
  EXPECT_EQ(a.ssd_bytes, 2u * kBlockBytes);
  EXPECT_EQ(a.chunks_ssd, 1u);
  const TierStats ts = s->Stats().tiers;
  EXPECT_EQ(ts.device.n_chunks, 1u) << "the chunk is admitted with what was read";
  EXPECT_EQ(ts.device.used_bytes, uint64_t(kChunk) * 2 * kHeads * kDim * 2) << "the tier reserves the whole chunk";

  // The same records again: from the device tier, nothing from the SSD.
  ReadStats b = read(Range(0, 8), true, true);
  EXPECT_EQ(b.ssd_bytes, 0u);
  EXPECT_EQ(b.chunks_device, 1u);
  EXPECT_EQ(b.chunks_ssd, 0u);

  // Keys only of slots 0-15: 0-7 in memory, 8-15 in the first K block.
  ReadStats c = read(Range(0, 16), true, false);
  EXPECT_EQ(c.ssd_bytes, 1u * kBlockBytes);
  EXPECT_EQ(c.chunks_ssd, 1u);

  // Every record: the missing ones come from the SSD (K blocks 1 and 2: slots 16-63; V blocks 1
  // and 2: slots 8-63), the ones held from memory, and the values are the written ones.
  ReadStats d = read(Range(0, kChunk), true, true);
  EXPECT_EQ(d.ssd_bytes, 4u * kBlockBytes);
  EXPECT_EQ(d.chunks_ssd, 1u);

  // Now the tier holds the whole chunk: no more SSD reads of any kind.
  ReadStats e = read(Range(0, kChunk), true, true);
  EXPECT_EQ(e.ssd_bytes, 0u);
  EXPECT_EQ(e.chunks_device, 1u);
  EXPECT_EQ(read(Range(40, 50), false, true).ssd_bytes, 0u);
  s.reset();
  std::filesystem::remove_all(dir);
}

// A partly held chunk pushed from the device to the host keeps what it holds and what it lacks:
// the host copy serves the records the device held and the SSD the rest, with the written values.
TEST(PartialAdmission, ADemotedPartialChunkStillReadsWhatItLacks) {
  const std::string dir = TempDir("partial-admission-demote");
  SyntheticKV kv{1, kHeads, kDim};
  std::mt19937 rng(13);
  const uint64_t chunk_bytes = uint64_t(kChunk) * 2 * kHeads * kDim * 2;
  PrefixStoreOptions o = Options(dir, KVEncoding::kF16, chunk_bytes);  // the device holds one chunk
  o.host_bytes = 2 * chunk_bytes;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 2 * kChunk);
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  auto read = [&](const std::vector<uint32_t>& pos) {
    MatchHandle h = s->Match(t);
    auto r = s->Wait(*s->SubmitReadKV(h, 0, pos, true, true));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kv.Check(t, 0, pos, *r, true, true));
    EXPECT_TRUE(s->Release(h).ok());
    return r.ok() ? r->stats : ReadStats{};
  };
  EXPECT_EQ(read(Range(0, 8)).ssd_bytes, 2u * kBlockBytes);  // chunk 0, an eighth: admitted to the device
  ASSERT_EQ(s->Stats().tiers.device.n_chunks, 1u);
  // Chunk 1 whole ranks above chunk 0 (score 1 x 1.0 against 1 x 0.125) and takes the device;
  // chunk 0 moves to the host.
  read(Range(kChunk, 2 * kChunk));
  TierStats ts = s->Stats().tiers;
  ASSERT_EQ(ts.device.n_chunks, 1u);
  ASSERT_EQ(ts.host.n_chunks, 1u);
  // Chunk 0 whole: slots 0-7 from the host, the rest (K and V blocks 1 and 2) from the SSD.
  ReadStats c = read(Range(0, kChunk));
  EXPECT_EQ(c.ssd_bytes, 4u * kBlockBytes);
  EXPECT_EQ(read(Range(0, kChunk)).ssd_bytes, 0u);
  s.reset();
  std::filesystem::remove_all(dir);
}

// The device budget holds two int8 chunks, less than two fp16 ones: both are admitted, and the
// tier serves the same values the SSD did.
TEST(PartialAdmission, BudgetsCountTheEncodedBytes) {
  const std::string dir = TempDir("partial-admission-int8");
  SyntheticKV kv{1, kHeads, kDim};
  std::mt19937 rng(12);
  const uint64_t int8_chunk = uint64_t(kChunk) * 2 * RecordBytes(KVEncoding::kInt8, kHeads, kDim);
  const uint64_t f16_chunk = uint64_t(kChunk) * 2 * RecordBytes(KVEncoding::kF16, kHeads, kDim);
  ASSERT_LT(2 * int8_chunk, f16_chunk + f16_chunk / 2);
  // Room for two int8 chunks: less than two fp16 chunks.
  auto s = OpenOrDie(Options(dir, KVEncoding::kInt8, 2 * int8_chunk));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 2 * kChunk);
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  MatchHandle h = s->Match(t);
  ASSERT_EQ(h.n_matched, t.size());
  auto r = s->Wait(*s->SubmitReadKV(h, 0, Range(0, 2 * kChunk), true, true));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stats.chunks_ssd, 2u);
  const TierStats ts = s->Stats().tiers;
  EXPECT_EQ(ts.device.n_chunks, 2u) << "both int8 chunks fit the budget of two int8 chunks";
  EXPECT_EQ(ts.device.used_bytes, 2 * int8_chunk);
  auto again = s->Wait(*s->SubmitReadKV(h, 0, Range(0, 2 * kChunk), true, true));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->stats.ssd_bytes, 0u);
  EXPECT_EQ(again->stats.chunks_device, 2u);
  EXPECT_EQ(again->k, r->k) << "the tier returns what the SSD did";
  EXPECT_EQ(again->v, r->v);
  ASSERT_TRUE(s->Release(h).ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

// WaitInto with output rows puts row r of a read at out_rows[r] and skips kSkipRow: two reads (one
// from the SSD, one after the tier kept part of the chunk) merge into one buffer in the order the
// caller wants, with the bytes a plain Wait gives. Output rows that do not match the read are a
// clear error, and the ticket can still be waited.
TEST(PartialAdmission, WaitIntoPlacesRowsWhereTold) {
  std::mt19937 rng(13);
  TwoChunks f("partial-admission-rows", rng);
  ASSERT_TRUE(f.s);
  PrefixStore* s = f.s.get();
  const auto& t = f.t;
  auto& kv = f.kv;
  MatchHandle& h = f.h;
  const size_t row = size_t(kHeads) * kDim;
  ASSERT_EQ(h.n_matched, t.size());
  for (int round = 0; round < 2; ++round) {  // the first reads the SSD only; the tier keeps some of it
    SCOPED_TRACE(round);
    // Read A: positions 5, 70, 9, 100 (ascending: 5, 9, 70, 100); read B: 3, 64. Merged into six
    // rows in the order 100, 3, 9, 64, 5 and nothing for 70.
    const std::vector<uint32_t> pa = {5, 9, 70, 100}, pb = {3, 64};
    const std::vector<uint32_t> ra = {4, 2, PrefixStore::kSkipRow, 0}, rb = {1, 3};
    const std::vector<uint32_t> want = {100, 3, 9, 64, 5};
    const f16_t sentinel = Fp32ToFp16(-7.0f);
    std::vector<f16_t> k(6 * row, sentinel), v(6 * row, sentinel);
    auto ta = s->SubmitReadKV(h, 0, pa, true, true);
    auto tb = s->SubmitReadKV(h, 0, pb, true, true);
    ASSERT_TRUE(ta.ok() && tb.ok());
    EXPECT_EQ(s->WaitInto(*ta, k.data(), v.data(), std::vector<uint32_t>{0, 1}).status().code(),
              Status::Code::kInvalidArgument);
    ASSERT_TRUE(s->WaitInto(*ta, k.data(), v.data(), ra).ok());
    ASSERT_TRUE(s->WaitInto(*tb, k.data(), v.data(), rb).ok());
    ReadResult merged;
    merged.k.assign(k.begin(), k.begin() + 5 * row);
    merged.v.assign(v.begin(), v.begin() + 5 * row);
    EXPECT_TRUE(kv.Check(t, 0, want, merged, true, true));
    EXPECT_TRUE(std::all_of(k.begin() + 5 * row, k.end(), [&](f16_t x) { return x == sentinel; })) << "row 5 untouched";
    EXPECT_TRUE(std::all_of(v.begin() + 5 * row, v.end(), [&](f16_t x) { return x == sentinel; })) << "row 5 untouched";
  }
  ASSERT_TRUE(s->Release(h).ok());
}

// While admissions are held (a prefill in progress) what a read brought waits to enter the tier:
// the same records read again under the same match come from the SSD again. A wait for the
// admissions (the statistics) lets them through at once, hold or not; after the release the tier
// serves them.
TEST(PartialAdmission, HeldAdmissionsWaitForTheReleaseOrAWaiter) {
  std::mt19937 rng(17);
  TwoChunks f("held-admission", rng);
  ASSERT_TRUE(f.s);
  PrefixStore* s = f.s.get();
  auto read = [&](const std::vector<uint32_t>& pos) {
    auto r = s->Wait(*s->SubmitReadKV(f.h, 0, pos, true, true));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r.ok() && f.kv.Check(f.t, 0, pos, *r, true, true));
    return r.ok() ? r->stats : ReadStats{};
  };
  s->HoldAdmissions();
  EXPECT_EQ(read(Range(0, 8)).chunks_ssd, 1u);
  EXPECT_EQ(read(Range(0, 8)).chunks_ssd, 1u) << "held: not in the tier yet";
  EXPECT_EQ(s->Stats().tiers.device.n_chunks, 1u) << "a wait for the admissions lets them through";
  EXPECT_EQ(read(Range(0, 8)).chunks_device, 1u);
  EXPECT_EQ(read(Range(kChunk, kChunk + 8)).chunks_ssd, 1u);  // the second chunk, still held
  s->ReleaseAdmissions();
  ASSERT_TRUE(s->Release(f.h).ok());
  f.h = s->Match(f.t);  // a match waits for the admissions
  EXPECT_EQ(read(Range(kChunk, kChunk + 8)).chunks_device, 1u);
  ASSERT_TRUE(s->Release(f.h).ok());
}

}  // namespace
}  // namespace impress::store
