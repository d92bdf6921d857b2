// A KV read told at submit where its rows go (ReadInto) has each chunk checked and copied there
// as its blocks arrive, while the rest of the read is in flight: the rows placed are exactly a
// plain read's, in the order asked, on both read engines; a chunk that fails its checksum is
// never served.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

namespace tu = testing;

// 3 KV heads of 64 dims: a K (or V) record is 384 bytes, so records straddle 4 KiB blocks; chunks
// of 16 tokens.
constexpr int kLayers = 3, kHeads = 3, kDim = 64;

// A store in a fresh directory holding the synthetic KV of n random tokens (st null if it failed);
// the directory goes with it.
struct Filled {
  std::string dir;
  tu::SyntheticKV kv{kLayers, kHeads, kDim};
  std::vector<int32_t> t;
  std::unique_ptr<PrefixStore> st;
  Filled(const std::string& tag, std::mt19937& rng, size_t n, bool pread = false) : dir(tu::TempDir(tag)) {
    t = tu::RandomTokens(rng, n);
    PrefixStoreOptions o = tu::TestOptions(dir, "model-read-into", kLayers, kHeads, kDim, {0, 2}, 16);
    o.force_pread = pread;
    auto opened = PrefixStore::Open(o);
    if (opened.ok() && kv.Insert(**opened, t, 0).ok()) st = std::move(*opened);
  }
  ~Filled() {
    st.reset();
    std::filesystem::remove_all(dir);
  }
};

// The same rows as a plain read, in the order asked (rows skipped stay untouched), from the SSD and,
// the second time, partly from the memory tiers. A wait into other buffers is refused and leaves
// the read to be waited properly.
TEST(ReadInto, PlacesExactlyTheRowsAPlainReadGives) {
  for (bool pread : {false, true}) {
    std::mt19937 rng(21);
    Filled f("read-into", rng, 333, pread);
    ASSERT_TRUE(f.st);
    PrefixStore* st = f.st.get();
    const auto& t = f.t;
    const size_t row = size_t(kHeads) * kDim;
    for (int round = 0; round < 2; ++round) {
      MatchHandle h = st->Match(t);
      std::vector<uint32_t> pos = tu::RandomPositions(rng, h.n_matched, 0.4);
      auto plain = st->Wait(*st->SubmitReadKV(h, 1, pos, true, true));
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      // Row r goes to out row (n - 1 - r), every third one nowhere.
      const size_t n = pos.size();
      std::vector<uint32_t> rows(n);
      for (size_t r = 0; r < n; ++r) rows[r] = r % 3 == 2 ? PrefixStore::kSkipRow : uint32_t(n - 1 - r);
      const f16_t kUntouched = f16_t(0x7bff);
      std::vector<f16_t> k(n * row, kUntouched), v(n * row, kUntouched);
      auto tk = st->SubmitReadKV(h, 1, pos, true, true, ReadInto{k.data(), v.data(), rows});
      ASSERT_TRUE(tk.ok()) << tk.status().ToString();
      std::vector<f16_t> other(n * row);
      auto refused = st->WaitInto(*tk, other.data(), v.data(), rows);
      EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
      auto r = st->WaitInto(*tk, k.data(), v.data(), rows);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (size_t x = 0; x < n; ++x) {
        const size_t to = rows[x] == PrefixStore::kSkipRow ? SIZE_MAX : rows[x];
        if (to == SIZE_MAX) continue;
        ASSERT_TRUE(std::equal(plain->k.begin() + x * row, plain->k.begin() + (x + 1) * row, k.begin() + to * row))
            << "K row " << x << (pread ? " (pread)" : "");
        ASSERT_TRUE(std::equal(plain->v.begin() + x * row, plain->v.begin() + (x + 1) * row, v.begin() + to * row))
            << "V row " << x << (pread ? " (pread)" : "");
      }
      for (size_t x = 0; x < n; ++x) {  // the out rows no read row went to
        if (std::find(rows.begin(), rows.end(), uint32_t(x)) != rows.end()) continue;
        EXPECT_TRUE(
            std::all_of(k.begin() + x * row, k.begin() + (x + 1) * row, [&](f16_t x16) { return x16 == kUntouched; }));
      }
      EXPECT_TRUE(f.kv.Check(t, 1, pos, *plain, true, true));
      ASSERT_TRUE(st->Release(h).ok());
    }
  }
}

// A chunk that fails its checksum is never served: its rows are never reported (a reader waiting
// for them is let go once the read finished, the other chunks' rows do come) and the wait reports
// the corruption and truncates the prefix before it.
TEST(ReadInto, NeverServesAFlippedChunk) {
  std::mt19937 rng(23);
  Filled f("read-into-flip", rng, 200);
  ASSERT_TRUE(f.st);
  PrefixStore* st = f.st.get();
  const auto& t = f.t;
  ASSERT_TRUE(tu::FlipByteInData(f.dir, 3));  // layer 0, chunk 0: a V block
  MatchHandle h = st->Match(t);
  std::vector<uint32_t> all(t.size());
  std::iota(all.begin(), all.end(), 0u);
  const size_t row = size_t(kHeads) * kDim;
  std::vector<f16_t> k(all.size() * row), v(all.size() * row);
  RowArrivals arrivals;  // its rows never arrive: a reader waiting for them is let go with false
  arrivals.Reset(uint32_t(all.size()));
  auto tk = st->SubmitReadKV(h, 0, all, true, true, ReadInto{k.data(), v.data(), {}, &arrivals});
  ASSERT_TRUE(tk.ok());
  EXPECT_FALSE(arrivals.WaitAll());
  EXPECT_TRUE(arrivals.Wait(uint32_t(all.size()) - 16, uint32_t(all.size())));  // the last chunk's rows came
  auto r = st->WaitInto(*tk, k.data(), v.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  ASSERT_TRUE(st->Release(h).ok());
  MatchHandle h2 = st->Match(t);  // truncated before the bad chunk
  EXPECT_LT(h2.n_matched, t.size());
  ASSERT_TRUE(st->Release(h2).ok());
}

// With a RowArrivals, every row is reported once it is in place: a reader that waited for all rows
// finds exactly a plain read's rows before WaitInto, and WaitInto changes nothing of them; from
// the SSD and, the second time, partly from the memory tiers, on both read engines.
TEST(ReadInto, ReportsEveryRowOnceItIsInPlace) {
  for (bool pread : {false, true}) {
    std::mt19937 rng(31);
    Filled f("read-into-arrivals", rng, 333, pread);
    ASSERT_TRUE(f.st);
    PrefixStore* st = f.st.get();
    const size_t row = size_t(kHeads) * kDim;
    for (int round = 0; round < 2; ++round) {
      MatchHandle h = st->Match(f.t);
      const std::vector<uint32_t> pos = tu::RandomPositions(rng, h.n_matched, 0.4);
      auto plain = st->Wait(*st->SubmitReadKV(h, 1, pos, true, true));
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      const size_t n = pos.size();
      std::vector<uint32_t> rows(n);  // row r to out row (n - 1 - r)
      for (size_t r = 0; r < n; ++r) rows[r] = uint32_t(n - 1 - r);
      std::vector<f16_t> k(n * row, f16_t(0)), v(n * row, f16_t(0));
      RowArrivals arrivals;
      arrivals.Reset(uint32_t(n));
      auto tk = st->SubmitReadKV(h, 1, pos, true, true, ReadInto{k.data(), v.data(), rows, &arrivals});
      ASSERT_TRUE(tk.ok()) << tk.status().ToString();
      ASSERT_TRUE(arrivals.WaitAll()) << (pread ? "pread" : "io_uring") << " round " << round;
      ReadResult seen;  // what a reader finds once the rows arrived, before the wait
      seen.k.resize(n * row);
      seen.v.resize(n * row);
      for (size_t x = 0; x < n; ++x) {
        std::copy_n(k.begin() + rows[x] * row, row, seen.k.begin() + x * row);
        std::copy_n(v.begin() + rows[x] * row, row, seen.v.begin() + x * row);
      }
      EXPECT_EQ(seen.k, plain->k) << (pread ? "pread" : "io_uring") << " round " << round;
      EXPECT_EQ(seen.v, plain->v) << (pread ? "pread" : "io_uring") << " round " << round;
      const std::vector<f16_t> k_before = k, v_before = v;
      auto r = st->WaitInto(*tk, k.data(), v.data(), rows);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(k, k_before);
      EXPECT_EQ(v, v_before);
      ASSERT_TRUE(st->Release(h).ok());
    }
  }
}

// A read told where its rows go and never waited: closing the store waits for it (its reads and
// its copies finish before the store's memory goes), and the rows are where it was told.
TEST(ReadInto, AStoreClosedWithTheReadInFlightWaitsForIt) {
  std::mt19937 rng(29);
  Filled f("read-into-close", rng, 300);
  ASSERT_TRUE(f.st);
  const size_t row = size_t(kHeads) * kDim;
  MatchHandle h = f.st->Match(f.t);
  const std::vector<uint32_t> pos = tu::RandomPositions(rng, h.n_matched, 0.5);
  ReadResult got;
  got.k.assign(pos.size() * row, f16_t(0));
  got.v.assign(pos.size() * row, f16_t(0));
  ASSERT_TRUE(f.st->SubmitReadKV(h, 2, pos, true, true, ReadInto{got.k.data(), got.v.data(), {}}).ok());
  f.st.reset();  // closed with the read never waited
  EXPECT_TRUE(f.kv.Check(f.t, 2, pos, got, true, true));
}

// A probe read told where its records go (SubmitProbeKeys' records_into) puts there exactly the
// records a plain WaitProbeRecords gives, from the SSD and, the second time, from wherever the
// tiers hold them, on both read engines; waiting it with Wait or into another buffer is refused
// and leaves the read to be waited properly.
TEST(ReadInto, ProbeRecordsGoWhereTheReadWasTold) {
  for (bool pread : {false, true}) {
    std::mt19937 rng(37);
    Filled f("read-into-probe", rng, 333, pread);
    ASSERT_TRUE(f.st);
    PrefixStore* st = f.st.get();
    const size_t rec = RecordBytes(ProbeEncoding(st->options()), 2, kDim);
    for (int round = 0; round < 2; ++round) {
      MatchHandle h = st->Match(f.t);
      for (int il = 0; il < kLayers; ++il) {
        std::vector<uint8_t> plain(h.n_matched * rec), got(h.n_matched * rec, 0xa5), other(got.size());
        ASSERT_TRUE(st->WaitProbeRecords(*st->SubmitProbeKeys(h, il), plain.data()).ok());
        auto tk = st->SubmitProbeKeys(h, il, got.data());
        ASSERT_TRUE(tk.ok()) << tk.status().ToString();
        EXPECT_EQ(st->Wait(*tk).status().code(), Status::Code::kInvalidArgument);
        EXPECT_EQ(st->WaitProbeRecords(*tk, other.data()).status().code(), Status::Code::kInvalidArgument);
        auto r = st->WaitProbeRecords(*tk, got.data());
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(got, plain) << "layer " << il << (pread ? " (pread)" : "") << " round " << round;
      }
      ASSERT_TRUE(st->Release(h).ok());
    }
  }
}

// Probe records that fail their checksum are never placed: the buffer keeps what it held and the
// wait reports the corruption.
TEST(ReadInto, NeverPlacesFlippedProbeRecords) {
  std::mt19937 rng(41);
  Filled f("read-into-probe-flip", rng, 200);
  ASSERT_TRUE(f.st);
  PrefixStore* st = f.st.get();
  const size_t rec = RecordBytes(ProbeEncoding(st->options()), 2, kDim);
  uint64_t data_bytes = 0;
  for (auto& e : std::filesystem::directory_iterator(f.dir))
    if (e.path().filename().string().rfind("data-", 0) == 0) data_bytes += std::filesystem::file_size(e.path());
  ASSERT_GT(data_bytes, 0u);
  for (uint64_t b = 0; b < data_bytes / 4096; ++b) ASSERT_TRUE(tu::FlipByteInData(f.dir, b));  // every block
  MatchHandle h = st->Match(f.t);
  ASSERT_EQ(h.n_matched, f.t.size());
  std::vector<uint8_t> got(h.n_matched * rec, 0xa5);
  auto tk = st->SubmitProbeKeys(h, 0, got.data());
  ASSERT_TRUE(tk.ok()) << tk.status().ToString();
  auto r = st->WaitProbeRecords(*tk, got.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0xa5; }));
  (void)st->Release(h);
}

// A probe read told where its records go and never waited: closing the store waits for it, and
// the records are where it was told.
TEST(ReadInto, AStoreClosedWithAProbeReadInFlightWaitsForIt) {
  std::mt19937 rng(43);
  Filled f("read-into-probe-close", rng, 300);
  ASSERT_TRUE(f.st);
  const size_t rec = RecordBytes(ProbeEncoding(f.st->options()), 2, kDim);
  MatchHandle h = f.st->Match(f.t);
  std::vector<uint8_t> plain(h.n_matched * rec), got(plain.size(), 0xa5);
  ASSERT_TRUE(f.st->WaitProbeRecords(*f.st->SubmitProbeKeys(h, 1), plain.data()).ok());
  ASSERT_TRUE(f.st->SubmitProbeKeys(h, 1, got.data()).ok());
  f.st.reset();  // closed with the read never waited
  EXPECT_EQ(got, plain);
}

}  // namespace
}  // namespace impress::store
