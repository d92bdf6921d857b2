// Compact KV at rest (store/kv-codec.h): int8 records with one fp16 scale per token and head,
// and int4 probe keys next to fp16 or int8 K/V.
// Each decoded element lies within scale / 2 of its fp16 input (plus the output's fp16
// rounding), where the bound is recomputed here from the input alone; the store returns such
// values from the SSD, from the memory tiers and after a reorder; chunk headers name their
// encoding; and KV written under one encoding is never read under another.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
using testing::ReadsExact;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 2, kHeads = 3, kDim = 64;

// The largest error quantized at-rest storage (codes in [-qmax, qmax]: 127 for int8, 7 for
// int4) may add to element x of a head whose largest magnitude is amax: half a quantization step
// (the scale is at most amax / qmax rounded up by one fp16 ulp, 2^-10 relative) plus the
// rounding of the decoded value to fp16 (half an ulp, 2^-11 relative, or half the smallest
// subnormal step).
double QuantBound(double amax, double x, double qmax) {
  const double scale = amax / qmax * (1.0 + 1.0 / 1024.0) + 6e-8;
  return scale / 2.0 + std::fabs(x) * (1.0 / 2048.0) + scale * (1.0 / 2048.0) + 3e-8;
}

// fp16 rows (n, heads, dim) with a different magnitude per head and token, as real keys have.
std::vector<f16_t> RandomRows(std::mt19937& rng, size_t n, int heads, int dim) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
  std::vector<f16_t> out(n * size_t(heads) * size_t(dim));
  for (size_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      const float m = std::exp2(mag(rng));
      for (int d = 0; d < dim; ++d)
        out[(t * size_t(heads) + size_t(h)) * size_t(dim) + size_t(d)] = Fp32ToFp16(m * g(rng));
    }
  return out;
}

// Checks decoded rows against the originals, head by head: every element within QuantBound.
::testing::AssertionResult WithinBound(const f16_t* orig, const f16_t* got, size_t n, int heads, int dim, double qmax) {
  for (size_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      const f16_t* o = orig + (t * size_t(heads) + size_t(h)) * size_t(dim);
      const f16_t* r = got + (t * size_t(heads) + size_t(h)) * size_t(dim);
      double amax = 0;
      for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(double(Fp16ToFp32(o[d]))));
      for (int d = 0; d < dim; ++d) {
        const double x = Fp16ToFp32(o[d]), y = Fp16ToFp32(r[d]);
        if (!(std::fabs(x - y) <= QuantBound(amax, x, qmax)))
          return ::testing::AssertionFailure() << "token " << t << " head " << h << " dim " << d << ": " << x
                                               << " came back as " << y << " (head absmax " << amax << ")";
      }
    }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult WithinInt8Bound(const f16_t* orig, const f16_t* got, size_t n, int heads, int dim) {
  return WithinBound(orig, got, n, heads, dim, 127.0);
}

// Random rows of heads of `dim` values with edge cases (an all-zero head, the largest finite
// halves, a lone subnormal) encoded as `e` and decoded: {rows, decoded}.
std::pair<std::vector<f16_t>, std::vector<f16_t>> RoundTrip(KVEncoding e, std::mt19937& rng, size_t n, int dim) {
  std::vector<f16_t> rows = RandomRows(rng, n, kHeads, dim);
  std::fill_n(rows.begin(), dim, f16_t(0));
  rows[size_t(dim) + 3] = 0x7bff;
  rows[size_t(dim) + 4] = 0xfbff;
  rows[2 * size_t(dim) + 1] = 0x0001;
  const uint32_t rb = RecordBytes(e, kHeads, dim);
  std::vector<uint8_t> recs(n * rb);
  EncodeRecords(e, rows.data(), size_t(kHeads) * dim, n, kHeads, dim, nullptr, recs.data());
  std::vector<f16_t> back(rows.size());
  for (size_t t = 0; t < n; ++t) DecodeRecord(e, recs.data() + t * rb, kHeads, dim, back.data() + t * kHeads * dim);
  return {rows, back};
}

TEST(KVCodec, Int8ErrorIsBoundedPerElement) {
  std::mt19937 rng(7);
  const size_t n = 200;
  EXPECT_EQ(RecordBytes(KVEncoding::kInt8, kHeads, kDim), uint32_t(kHeads * (kDim + 2)));
  const auto [rows, back] = RoundTrip(KVEncoding::kInt8, rng, n, kDim);
  EXPECT_TRUE(WithinInt8Bound(rows.data(), back.data(), n, kHeads, kDim));
  for (int d = 0; d < kDim; ++d) EXPECT_EQ(back[size_t(d)], 0) << "a zero head stays zero";
  EXPECT_EQ(Fp16ToFp32(back[size_t(kDim) + 3]), 65504.0f) << "the head's absmax is exact (q = 127)";
}

TEST(KVCodec, Int4ErrorIsBoundedPerElementAndPacksTwoPerByte) {
  std::mt19937 rng(9);
  for (const int dim : {kDim, 5}) {  // an odd head size leaves the last byte half used
    const size_t n = 200;
    EXPECT_EQ(RecordBytes(KVEncoding::kInt4, kHeads, dim), uint32_t(kHeads * ((dim + 1) / 2 + 2)));
    const auto [rows, back] = RoundTrip(KVEncoding::kInt4, rng, n, dim);
    EXPECT_TRUE(WithinBound(rows.data(), back.data(), n, kHeads, dim, 7.0)) << "head size " << dim;
    for (int d = 0; d < dim; ++d) EXPECT_EQ(back[size_t(d)], 0) << "a zero head stays zero";
    EXPECT_EQ(Fp16ToFp32(back[size_t(dim) + 3]), 65504.0f) << "the head's absmax is exact (q = 7)";
    EXPECT_EQ(Fp16ToFp32(back[size_t(dim) + 4]), -65504.0f);
    // Not the int8 bound: int4 has 15 levels, and random heads use them all somewhere.
    EXPECT_FALSE(WithinInt8Bound(rows.data(), back.data(), n, kHeads, dim));
  }
}

// Decoding is exactly code * scale, clamped to the halves and rounded to nearest even, for every
// element: the vector paths (16 codes at a time, then 8) and the scalar tail agree with a
// reference built here from the record's bytes with the soft fp16 conversions. Head sizes cover
// whole vectors, a tail of each length class, and an odd int4 head; scales include the largest
// and the smallest halves.
TEST(KVCodec, DecodeIsCodeTimesScaleRoundedToHalfExactly) {
  std::mt19937 rng(12);
  for (const KVEncoding e : {KVEncoding::kInt8, KVEncoding::kInt4}) {
    for (const int dim : {64, 40, 24, 13, 7, 1}) {
      SCOPED_TRACE(::testing::Message() << KVEncodingName(e) << " head size " << dim);
      const uint32_t rb = RecordBytes(e, kHeads, dim);
      const size_t code_bytes = e == KVEncoding::kInt4 ? size_t(dim + 1) / 2 : size_t(dim);
      std::vector<uint8_t> rec(rb);
      std::vector<f16_t> got(size_t(kHeads) * dim);
      for (int trial = 0; trial < 50; ++trial) {
        for (uint8_t& b : rec) b = uint8_t(rng());
        const f16_t scales[] = {0x7bff, 0x0001, 0x3c00, f16_t(rng() & 0x7bff)};  // max, min, 1, any
        for (int h = 0; h < kHeads; ++h) std::memcpy(rec.data() + 2 * h, &scales[(trial + h) % 4], 2);
        if (e == KVEncoding::kInt4) {  // codes 1..15 (q + 8); 0 only as an odd head's padding
          for (size_t i = 2 * kHeads; i < rec.size(); ++i) {
            if ((rec[i] & 0x0f) == 0) rec[i] |= 0x01;
            if ((rec[i] >> 4) == 0) rec[i] |= 0x10;
          }
        } else {  // codes in [-127, 127]
          for (size_t i = 2 * kHeads; i < rec.size(); ++i)
            if (rec[i] == 0x80) rec[i] = 0x81;
        }
        DecodeRecord(e, rec.data(), kHeads, dim, got.data());
        for (int h = 0; h < kHeads; ++h) {
          f16_t s16;
          std::memcpy(&s16, rec.data() + 2 * h, 2);
          const float s = Fp16ToFp32Soft(s16);
          const uint8_t* codes = rec.data() + 2 * kHeads + size_t(h) * code_bytes;
          for (int d = 0; d < dim; ++d) {
            const int q = e == KVEncoding::kInt8 ? int(int8_t(codes[d]))
                                                 : ((d % 2) ? codes[d / 2] >> 4 : codes[d / 2] & 0x0f) - 8;
            const f16_t want = Fp32ToFp16Soft(std::min(std::max(float(q) * s, -65504.0f), 65504.0f));
            ASSERT_EQ(got[size_t(h) * dim + d], want) << "head " << h << " element " << d << " code " << q;
          }
        }
      }
    }
  }
}

TEST(KVCodec, Fp16IsCopiedAndHeadsArePicked) {
  std::mt19937 rng(8);
  const size_t n = 5;
  const std::vector<f16_t> rows = RandomRows(rng, n, kHeads, kDim);
  const int pick[] = {2, 0};
  std::vector<uint8_t> recs(n * RecordBytes(KVEncoding::kF16, 2, kDim));
  EncodeRecords(KVEncoding::kF16, rows.data(), size_t(kHeads) * kDim, n, 2, kDim, pick, recs.data());
  for (size_t t = 0; t < n; ++t)
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(0, std::memcmp(recs.data() + (t * 2 + size_t(j)) * kDim * 2,
                               rows.data() + (t * kHeads + size_t(pick[j])) * kDim, kDim * 2));
}

TEST(ChunkFormat, HeaderNamesTheEncoding) {
  ChunkHeader h{};
  h.kind = uint16_t(ChunkKind::kKV);
  h.n_slots = 4;
  h.n_heads = kHeads;
  h.head_dim = kDim;
  h.record_bytes = RecordBytes(KVEncoding::kInt8, kHeads, kDim);
  h.encoding = uint16_t(KVEncoding::kInt8);
  std::vector<uint8_t> recs(size_t(h.n_slots) * h.record_bytes, 1);
  std::vector<uint8_t> buf(LayoutOf(h).length);
  ChunkExtent ext;
  EncodeChunk(h, recs.data(), recs.data(), buf.data(), &ext);
  EXPECT_TRUE(VerifyChunk(buf.data(), ext, h, "int8 chunk").ok());
  ChunkHeader as_f16 = h;
  as_f16.encoding = uint16_t(KVEncoding::kF16);
  const Status s = VerifyChunk(buf.data(), ext, as_f16, "int8 chunk");
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
}

PrefixStoreOptions Options(const std::string& dir, KVEncoding enc) {
  PrefixStoreOptions o = TestOptions(dir, "model-compact", kLayers, kHeads, kDim, {0, 2}, 64);
  o.kv_encoding = enc;
  return o;
}

struct Layers {
  std::vector<std::vector<f16_t>> k, v;
  std::vector<LayerKV> Views() {
    std::vector<LayerKV> out(kLayers);
    for (int il = 0; il < kLayers; ++il) out[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data()};
    return out;
  }
};

Layers RandomLayers(std::mt19937& rng, size_t n) {
  Layers l;
  for (int il = 0; il < kLayers; ++il) {
    l.k.push_back(RandomRows(rng, n, kHeads, kDim));
    l.v.push_back(RandomRows(rng, n, kHeads, kDim));
  }
  return l;
}

// Reads K, V and probe keys of every layer at all n positions; checks them against the bound.
::testing::AssertionResult ReadsWithinBound(PrefixStore& s, const std::vector<int32_t>& t, Layers& l,
                                            uint64_t* ssd_bytes = nullptr) {
  const size_t n = t.size();
  MatchHandle h = s.Match(t);
  if (h.n_matched != n) return ::testing::AssertionFailure() << "matched " << h.n_matched << " of " << n;
  std::vector<uint32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0u);
  const std::vector<int>& probe = s.options().probe_kv_heads;
  for (int il = 0; il < kLayers; ++il) {
    auto kv = s.SubmitReadKV(h, il, pos, true, true);
    if (!kv.ok()) return ::testing::AssertionFailure() << kv.status().ToString();
    auto r = s.Wait(*kv);
    if (!r.ok()) return ::testing::AssertionFailure() << r.status().ToString();
    if (ssd_bytes) *ssd_bytes += r->stats.ssd_bytes;
    if (auto c = WithinInt8Bound(l.k[size_t(il)].data(), r->k.data(), n, kHeads, kDim); !c) return c << " (K)";
    if (auto c = WithinInt8Bound(l.v[size_t(il)].data(), r->v.data(), n, kHeads, kDim); !c) return c << " (V)";
    auto pt = s.SubmitProbeKeys(h, il);
    if (!pt.ok()) return ::testing::AssertionFailure() << pt.status().ToString();
    auto pr = s.Wait(*pt);
    if (!pr.ok()) return ::testing::AssertionFailure() << pr.status().ToString();
    // The probe heads' keys, taken from the full rows: the same bound per head.
    std::vector<f16_t> want(n * probe.size() * kDim);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < probe.size(); ++j)
        std::memcpy(want.data() + (i * probe.size() + j) * kDim,
                    l.k[size_t(il)].data() + (i * kHeads + size_t(probe[j])) * kDim, kDim * 2);
    if (auto c = WithinInt8Bound(want.data(), pr->k.data(), n, int(probe.size()), kDim); !c) return c << " (probe)";
  }
  Status rs = s.Release(h);
  if (!rs.ok()) return ::testing::AssertionFailure() << rs.ToString();
  return ::testing::AssertionSuccess();
}

TEST(CompactKV, RoundTripsThroughTheStore) {
  const std::string dir = TempDir("compact");
  std::mt19937 rng(11);
  const std::vector<int32_t> t = RandomTokens(rng, 300);
  Layers l = RandomLayers(rng, t.size());
  uint64_t int8_bytes = 0, f16_bytes = 0;
  {
    auto s = OpenOrDie(Options(dir, KVEncoding::kInt8));
    ASSERT_TRUE(s);
    auto views = l.Views();
    ASSERT_TRUE(s->Insert(t, 0, views).ok());
    EXPECT_TRUE(ReadsWithinBound(*s, t, l, &int8_bytes));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  {  // after a reopen (the catalog's extents and checksums), and after a reorder rewrote the chunks
    auto s = OpenOrDie(Options(dir, KVEncoding::kInt8));
    ASSERT_TRUE(s);
    EXPECT_TRUE(ReadsWithinBound(*s, t, l));
    MatchHandle h = s->Match(t);
    std::vector<uint32_t> sel = {0, 1, 2, 3, 200, 201, 250, 299};
    for (int il = 0; il < kLayers; ++il) ASSERT_TRUE(s->ReportImportance(h, il, sel).ok());
    ASSERT_TRUE(s->Release(h).ok());
    auto rr = s->ReorderNow();
    ASSERT_TRUE(rr.ok()) << rr.status().ToString();
    EXPECT_GT(rr->segments_reordered, 0u);
    EXPECT_TRUE(ReadsWithinBound(*s, t, l));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  std::filesystem::remove_all(dir);
  {  // the same KV as fp16: int8 reads about half the bytes
    const std::string d2 = TempDir("compact-f16");
    auto s = OpenOrDie(Options(d2, KVEncoding::kF16));
    ASSERT_TRUE(s);
    auto views = l.Views();
    ASSERT_TRUE(s->Insert(t, 0, views).ok());
    EXPECT_TRUE(ReadsWithinBound(*s, t, l, &f16_bytes));
    s.reset();
    std::filesystem::remove_all(d2);
  }
  EXPECT_GT(f16_bytes, 0u);
  EXPECT_LT(double(int8_bytes), 0.6 * double(f16_bytes)) << int8_bytes << " vs " << f16_bytes;
}

TEST(CompactKV, MemoryTiersHoldTheCompactRecords) {
  const std::string dir = TempDir("compact-tiers");
  std::mt19937 rng(12);
  const std::vector<int32_t> t = RandomTokens(rng, 130);
  Layers l = RandomLayers(rng, t.size());
  PrefixStoreOptions o = Options(dir, KVEncoding::kInt8);
  o.device_bytes = 1ull << 20;
  o.host_bytes = 1ull << 20;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  auto views = l.Views();
  ASSERT_TRUE(s->Insert(t, 0, views).ok());  // admitted to the device tier on insert
  uint64_t ssd = 0;
  EXPECT_TRUE(ReadsWithinBound(*s, t, l, &ssd));
  EXPECT_EQ(ssd, 0u) << "served from the memory tiers";
  const StoreStats st = s->Stats();
  // 130 tokens x 2 layers x (K + V) of 198 bytes, plus probe keys of 2 heads (132 bytes).
  EXPECT_EQ(st.tiers.device.used_bytes + st.tiers.host.used_bytes, uint64_t(130) * kLayers * (2 * 198 + 132));
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(CompactKV, AStoreWrittenAsFp16IsNeverReadAsInt8) {
  const std::string dir = TempDir("compact-switch");
  std::mt19937 rng(13);
  const SyntheticKV kv{kLayers, kHeads, kDim};
  const std::vector<int32_t> t = RandomTokens(rng, 150);
  {
    auto s = OpenOrDie(Options(dir, KVEncoding::kF16));
    ASSERT_TRUE(s);
    ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
    EXPECT_TRUE(ReadsExact(*s, kv, t, t.size()));
  }
  Layers l = RandomLayers(rng, t.size());
  {  // the option changed: the fp16 KV is kept but not served; new KV is written as int8
    auto s = OpenOrDie(Options(dir, KVEncoding::kInt8));
    ASSERT_TRUE(s);
    MatchHandle h = s->Match(t);
    EXPECT_EQ(h.n_matched, 0u) << "fp16 KV must not be read as int8";
    ASSERT_TRUE(s->Release(h).ok());
    auto views = l.Views();
    ASSERT_TRUE(s->Insert(t, 0, views).ok());
    EXPECT_TRUE(ReadsWithinBound(*s, t, l));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  {  // and back: the fp16 KV reads bit for bit
    auto s = OpenOrDie(Options(dir, KVEncoding::kF16));
    ASSERT_TRUE(s);
    EXPECT_TRUE(ReadsExact(*s, kv, t, t.size()));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  std::filesystem::remove_all(dir);
}

// int4 probe keys next to fp16 K/V: K and V read bit for bit, the probe keys within the int4
// bound at about a quarter of their fp16 bytes; a store of fp16 probe keys is not read under
// int4 ones (the catalog key names both encodings).
TEST(CompactKV, Int4ProbeKeysBesideFp16KV) {
  const std::string dir = TempDir("probe-int4");
  std::mt19937 rng(14);
  const SyntheticKV kv{kLayers, kHeads, kDim};
  const std::vector<int32_t> t = RandomTokens(rng, 270);
  std::vector<std::vector<f16_t>> keys, values;
  kv.Make(t, 0, &keys, &values);
  auto probe_bytes = [&](PrefixStore& s) {
    MatchHandle h = s.Match(t);
    uint64_t bytes = 0;
    for (int il = 0; il < kLayers; ++il) {
      auto pt = s.SubmitProbeKeys(h, il);
      EXPECT_TRUE(pt.ok());
      if (!pt.ok()) break;
      auto pr = s.Wait(*pt);
      EXPECT_TRUE(pr.ok());
      if (!pr.ok()) break;
      bytes += pr->stats.ssd_bytes;
      const std::vector<int>& probe = s.options().probe_kv_heads;
      std::vector<f16_t> want(t.size() * probe.size() * kDim);
      for (size_t i = 0; i < t.size(); ++i)
        for (size_t j = 0; j < probe.size(); ++j)
          std::memcpy(want.data() + (i * probe.size() + j) * kDim,
                      keys[size_t(il)].data() + (i * kHeads + size_t(probe[j])) * kDim, kDim * 2);
      const double qmax = s.options().probe_encoding == KVEncoding::kInt4 ? 7.0 : 0.0;
      if (qmax > 0) {
        EXPECT_TRUE(WithinBound(want.data(), pr->k.data(), t.size(), int(probe.size()), kDim, qmax));
      } else {
        EXPECT_EQ(0, std::memcmp(want.data(), pr->k.data(), want.size() * 2)) << "fp16 probe keys are exact";
      }
    }
    EXPECT_TRUE(s.Release(h).ok());
    return bytes;
  };
  PrefixStoreOptions o = Options(dir, KVEncoding::kF16);
  o.device_bytes = 0;
  o.host_bytes = 0;
  o.probe_encoding = KVEncoding::kInt4;
  uint64_t int4_bytes = 0, f16_bytes = 0;
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
    EXPECT_TRUE(ReadsExact(*s, kv, t, t.size())) << "K and V stay fp16";
    int4_bytes = probe_bytes(*s);
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  o.probe_encoding = KVEncoding::kF16;
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    MatchHandle h = s->Match(t);
    EXPECT_EQ(h.n_matched, 0u) << "int4 probe keys must not be served as fp16 ones";
    ASSERT_TRUE(s->Release(h).ok());
    ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
    f16_bytes = probe_bytes(*s);
  }
  // 270 tokens x 2 heads: 68 bytes per token and head in int4, 128 in fp16, in whole 4 KiB blocks.
  EXPECT_GT(int4_bytes, 0u);
  EXPECT_LT(double(int4_bytes), 0.6 * double(f16_bytes)) << int4_bytes << " vs " << f16_bytes;
  std::filesystem::remove_all(dir);
}

// WaitProbeRecords hands out the probe keys as stored: each record decodes to what Wait gives for
// the same read, whether it came from the SSD or from a memory tier; a KV ticket is refused and
// stays good for Wait.
TEST(CompactKV, ProbeRecordsAreWhatWaitDecodes) {
  for (KVEncoding pe : {KVEncoding::kInt8, KVEncoding::kInt4}) {
    const std::string dir = TempDir("probe-records");
    std::mt19937 rng(15);
    const SyntheticKV kv{kLayers, kHeads, kDim};
    const std::vector<int32_t> t = RandomTokens(rng, 300);
    PrefixStoreOptions o = Options(dir, KVEncoding::kF16);
    o.probe_encoding = pe;
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
    const int n_probe = int(s->options().probe_kv_heads.size());
    const size_t rec = RecordBytes(pe, n_probe, kDim);
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reads what the first admitted
      MatchHandle h = s->Match(t);
      ASSERT_EQ(h.n_matched, t.size());
      for (int il = 0; il < kLayers; ++il) {
        auto a = s->SubmitProbeKeys(h, il);
        auto b = s->SubmitProbeKeys(h, il);
        ASSERT_TRUE(a.ok() && b.ok());
        auto decoded = s->Wait(*a);
        ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
        std::vector<uint8_t> recs(t.size() * rec);
        auto raw = s->WaitProbeRecords(*b, recs.data());
        ASSERT_TRUE(raw.ok()) << raw.status().ToString();
        std::vector<f16_t> row(size_t(n_probe) * kDim);
        for (size_t i = 0; i < t.size(); ++i) {
          DecodeRecord(pe, recs.data() + i * rec, n_probe, kDim, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), decoded->k.data() + i * row.size(), row.size() * 2))
              << KVEncodingName(pe) << " pass " << pass << " layer " << il << " token " << i;
        }
      }
      std::vector<uint32_t> pos{0, 5, 9};
      auto kt = s->SubmitReadKV(h, 0, pos, true, true);
      ASSERT_TRUE(kt.ok());
      std::vector<uint8_t> sink(t.size() * rec);
      EXPECT_EQ(s->WaitProbeRecords(*kt, sink.data()).status().code(), Status::Code::kInvalidArgument);
      EXPECT_TRUE(s->Wait(*kt).ok()) << "the refused ticket is still the caller's";
      ASSERT_TRUE(s->Release(h).ok());
      (void)s->Stats();  // waits for the admissions of the first pass
    }
    EXPECT_TRUE(s->CheckConsistency().ok());
    s.reset();
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace impress::store
