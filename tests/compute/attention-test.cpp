// The backend's attention-with-importance and key-scoring ops against a naive double-precision
// reference written here (explicit masks, two-pass softmax).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "engine/compute/backend.h"
#include "engine/compute/cpu-backend.h"
#include "engine/compute/simd-math.h"
#include "engine/compute/tile-attention.h"

namespace impress {
namespace {

struct Case {
  int n_new, n_head, n_head_kv, head_dim, n_ctx;  // n_ctx earlier tokens exist
};

// Random fp16 K/V for n_ctx earlier tokens and n_new new tokens, fp32 Q for the new ones.
struct Data {
  Case c;
  std::vector<float> q;             // (n_new, n_head, hd)
  std::vector<f16_t> k_ctx, v_ctx;  // (n_ctx, n_head_kv, hd)
  std::vector<f16_t> k_new, v_new;  // (n_new, n_head_kv, hd)
};

Data MakeData(const Case& c, uint32_t seed, float q_scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Data d{c, {}, {}, {}, {}, {}};
  const size_t kv = size_t(c.n_head_kv) * c.head_dim;
  d.q.resize(size_t(c.n_new) * c.n_head * c.head_dim);
  for (auto& x : d.q) x = nd(rng) * q_scale;
  auto fill16 = [&](std::vector<f16_t>& v, size_t n) {
    v.resize(n);
    for (auto& x : v) x = Fp32ToFp16(nd(rng));
  };
  fill16(d.k_ctx, size_t(c.n_ctx) * kv);
  fill16(d.v_ctx, size_t(c.n_ctx) * kv);
  fill16(d.k_new, size_t(c.n_new) * kv);
  fill16(d.v_new, size_t(c.n_new) * kv);
  return d;
}

// Naive: new token i attends to the earlier tokens in `visible` and to new tokens 0..i.
// Returns out (n_new, n_head, hd) and importance (n_head, visible.size() + n_new).
void Naive(const Data& d, const std::vector<int>& visible, std::vector<double>* out, std::vector<double>* imp) {
  const Case& c = d.c;
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv, nv = int(visible.size());
  const int n_cols = nv + c.n_new;
  out->assign(size_t(c.n_new) * c.n_head * hd, 0.0);
  imp->assign(size_t(c.n_head) * n_cols, 0.0);
  auto key = [&](int col, int g, int x) {
    return col < nv ? Fp16ToFp32(d.k_ctx[(size_t(visible[col]) * c.n_head_kv + g) * hd + x])
                    : Fp16ToFp32(d.k_new[(size_t(col - nv) * c.n_head_kv + g) * hd + x]);
  };
  auto val = [&](int col, int g, int x) {
    return col < nv ? Fp16ToFp32(d.v_ctx[(size_t(visible[col]) * c.n_head_kv + g) * hd + x])
                    : Fp16ToFp32(d.v_new[(size_t(col - nv) * c.n_head_kv + g) * hd + x]);
  };
  std::vector<double> s(n_cols);
  for (int h = 0; h < c.n_head; ++h) {
    const int g = h / group;
    for (int i = 0; i < c.n_new; ++i) {
      const int n_valid = nv + i + 1;
      double mx = -1e300;
      for (int j = 0; j < n_valid; ++j) {
        double dot = 0;
        for (int x = 0; x < hd; ++x) dot += double(d.q[(size_t(i) * c.n_head + h) * hd + x]) * key(j, g, x);
        s[j] = dot / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < n_valid; ++j) sum += s[j] = std::exp(s[j] - mx);
      for (int j = 0; j < n_valid; ++j) {
        const double p = s[j] / sum;
        (*imp)[size_t(h) * n_cols + j] += p;
        for (int x = 0; x < hd; ++x) (*out)[(size_t(i) * c.n_head + h) * hd + x] += p * val(j, g, x);
      }
    }
  }
}

// Gathers the chosen earlier tokens' K/V rows (all kv heads) into a prefix set.
std::vector<f16_t> Gather(const std::vector<f16_t>& src, const std::vector<int>& rows, size_t row_len) {
  std::vector<f16_t> out;
  for (int r : rows) out.insert(out.end(), src.begin() + r * row_len, src.begin() + (r + 1) * row_len);
  return out;
}

struct AttnRun {
  std::vector<float> out, imp;
};

// The query side of d's attention arguments (CPU backend: host memory is device memory).
AttentionQuery HostQuery(const Data& d) {
  return MakeAttentionQuery(d.c.n_new, d.c.n_head, d.c.n_head_kv, d.c.head_dim, DevPtr<const float>(d.q.data()),
                            DevPtr<const f16_t>(d.k_new.data()));
}

// A prefix that arrives while the attention runs (AttentionArgs::prefix_arrivals): its rows start
// as NaN and another thread copies them in, kRows at a time in order (from the last rows back with
// from_end), reporting each batch; with stop_short it stops halfway. status: what the attention
// returned.
struct Arriving {
  static constexpr int kRows = 50;
  bool stop_short = false;
  bool from_end = false;
  Status status;
};

AttnRun RunAttention(Backend& be, const Data& d, const std::vector<int>& visible, const std::vector<int>& heads,
                     bool include_new, int importance_from = 0, Arriving* arriving = nullptr) {
  const Case& c = d.c;
  const size_t kv = size_t(c.n_head_kv) * c.head_dim;
  const std::vector<f16_t> k_src = Gather(d.k_ctx, visible, kv), v_src = Gather(d.v_ctx, visible, kv);
  std::vector<f16_t> kp = k_src, vp = v_src;
  RowArrivals arrivals;
  std::atomic<bool> filled{false};
  std::thread filler;
  if (arriving) {
    std::fill(kp.begin(), kp.end(), f16_t(0x7e00));
    std::fill(vp.begin(), vp.end(), f16_t(0x7e00));
    arrivals.Reset(uint32_t(visible.size()));
    arrivals.SetFinishedProbe([&] { return filled.load(); });
    filler = std::thread([&] {
      const size_t n = arriving->stop_short ? visible.size() / 2 : visible.size();
      for (size_t x = 0; x < n; x += Arriving::kRows) {
        const size_t len = std::min(n - x, size_t(Arriving::kRows));
        const size_t j = arriving->from_end ? visible.size() - x - len : x, e = j + len;
        std::copy(k_src.begin() + j * kv, k_src.begin() + e * kv, kp.begin() + j * kv);
        std::copy(v_src.begin() + j * kv, v_src.begin() + e * kv, vp.begin() + j * kv);
        arrivals.ArrivedRange(uint32_t(j), uint32_t(e));
      }
      filled.store(true);
    });
  }
  AttnRun r;
  r.out.assign(size_t(c.n_new) * c.n_head * c.head_dim, -1.0f);
  const size_t ld = visible.size() + (include_new ? c.n_new : 0);
  r.imp.assign(heads.size() * ld, -1.0f);
  AttentionArgs a;
  static_cast<AttentionQuery&>(a) = HostQuery(d);
  a.v_new = DevPtr<const f16_t>(d.v_new.data());
  a.n_prefix = int(visible.size());
  a.k_prefix = DevPtr<const f16_t>(kp.data());
  a.v_prefix = DevPtr<const f16_t>(vp.data());
  a.out = DevPtr<float>(r.out.data());
  a.importance_heads = heads;
  a.importance_include_new = include_new;
  a.importance_from = importance_from;
  a.importance = DevPtr<float>(r.imp.data());
  a.prefix_arrivals = arriving ? &arrivals : nullptr;
  const Status st = be.Attention(a);
  if (arriving) {
    filler.join();
    arriving->status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

class AttentionTest : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Backend> be_ = MakeCpuBackend({2});
};

TEST_P(AttentionTest, FullPrefixEqualsCausalAttentionOverEverything) {
  const Case c = GetParam();
  const Data d = MakeData(c, 7);
  std::vector<int> all(c.n_ctx);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> heads(c.n_head);
  std::iota(heads.begin(), heads.end(), 0);
  const AttnRun r = RunAttention(*be_, d, all, heads, true);
  std::vector<double> out, imp;
  Naive(d, all, &out, &imp);
  EXPECT_LT(MaxAbsDiff(r.out, out), 2e-5);
  EXPECT_LT(MaxAbsDiff(r.imp, imp), 2e-4 * std::max(1, c.n_new / 16));
}

TEST_P(AttentionTest, SubsetEqualsReferenceMaskingMissingTokens) {
  const Case c = GetParam();
  const Data d = MakeData(c, 11);
  // Keep about 40% of the earlier tokens, shuffled (the op must not care about order).
  std::mt19937 rng(3);
  std::vector<int> sub;
  for (int t = 0; t < c.n_ctx; ++t)
    if (rng() % 5 < 2) sub.push_back(t);
  std::shuffle(sub.begin(), sub.end(), rng);
  const std::vector<int> heads = {c.n_head - 1, 0};
  const AttnRun r = RunAttention(*be_, d, sub, heads, false);
  std::vector<double> out, imp;
  Naive(d, sub, &out, &imp);
  EXPECT_LT(MaxAbsDiff(r.out, out), 2e-5);
  // Importance restricted to the prefix columns, in request order.
  const size_t n_cols = sub.size() + c.n_new;
  std::vector<double> want;
  for (int h : heads) want.insert(want.end(), imp.begin() + h * n_cols, imp.begin() + h * n_cols + sub.size());
  EXPECT_LT(MaxAbsDiff(r.imp, want), 2e-4 * std::max(1, c.n_new / 16));
}

TEST_P(AttentionTest, EachHeadsImportanceOverAllColumnsSumsToNewRows) {
  const Case c = GetParam();
  const Data d = MakeData(c, 5);
  std::vector<int> all(c.n_ctx);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> heads(c.n_head);
  std::iota(heads.begin(), heads.end(), 0);
  const AttnRun r = RunAttention(*be_, d, all, heads, true);
  const size_t ld = c.n_ctx + c.n_new;
  for (size_t x = 0; x < heads.size(); ++x) {
    double sum = 0;
    for (size_t j = 0; j < ld; ++j) sum += r.imp[x * ld + j];
    EXPECT_NEAR(sum, c.n_new, 1e-4 * c.n_new) << "head " << heads[x];
  }
}

// Importance asked from a column on (the question ordering its own new tokens): those columns are
// exactly what the whole request gives, the output unchanged.
TEST_P(AttentionTest, ImportanceFromAColumnOnEqualsTheWholeRequestThere) {
  const Case c = GetParam();
  const Data d = MakeData(c, 13);
  std::vector<int> all(c.n_ctx);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> heads(c.n_head);
  std::iota(heads.begin(), heads.end(), 0);
  const AttnRun whole = RunAttention(*be_, d, all, heads, true);
  const size_t ld = c.n_ctx + c.n_new;
  for (const int from : {c.n_ctx, c.n_ctx / 2, c.n_ctx + c.n_new / 2}) {
    const AttnRun part = RunAttention(*be_, d, all, heads, true, from);
    EXPECT_EQ(part.out, whole.out);
    for (size_t x = 0; x < heads.size(); ++x)
      for (size_t j = size_t(from); j < ld; ++j)
        ASSERT_EQ(part.imp[x * ld + j], whole.imp[x * ld + j]) << "head " << x << " column " << j << " from " << from;
  }
}

// Attend while reading: the prefix arriving block by block while the attention runs, first rows
// first or last rows first (the blocks are then taken as they complete), gives the same bits as
// the prefix there from the start; a prefix that stops arriving halfway fails the attention
// (kIOError) instead of blocking or computing on rows that never came.
TEST_P(AttentionTest, APrefixStillArrivingGivesTheSameBitsOrFails) {
  const Case c = GetParam();
  const Data d = MakeData(c, 17);
  std::vector<int> all(c.n_ctx);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<int> heads = {0, c.n_head - 1};
  const AttnRun there = RunAttention(*be_, d, all, heads, true);
  for (const bool from_end : {false, true}) {
    Arriving arriving{.stop_short = false, .from_end = from_end, .status = {}};
    const AttnRun streamed = RunAttention(*be_, d, all, heads, true, 0, &arriving);
    ASSERT_TRUE(arriving.status.ok()) << arriving.status.ToString();
    EXPECT_EQ(streamed.out, there.out) << (from_end ? "last rows first" : "first rows first");
    EXPECT_EQ(streamed.imp, there.imp) << (from_end ? "last rows first" : "first rows first");
  }
  if (c.n_ctx < 2) return;
  Arriving short_of{.stop_short = true, .from_end = false, .status = {}};
  RunAttention(*be_, d, all, heads, true, 0, &short_of);
  EXPECT_EQ(short_of.status.code(), Status::Code::kIOError) << short_of.status.ToString();
}

// The probe's shape: the query heads of the last kv head (and of kv head 0 when there are
// several), every other one.
struct ProbeHeads {
  std::vector<int> kv_heads, q_heads;
};

ProbeHeads ProbeHeadsFor(const Case& c) {
  ProbeHeads p;
  const int group = c.n_head / c.n_head_kv;
  p.kv_heads = {c.n_head_kv - 1};
  if (c.n_head_kv > 1) p.kv_heads.push_back(0);
  for (int g : p.kv_heads)
    for (int h = g * group; h < (g + 1) * group; h += 2) p.q_heads.push_back(h);
  return p;
}

// The probe's importance from the records (bits 8 or 4) or, with bits 0, from the halves `keys`.
std::vector<float> ScoreRecordsOrKeys(Backend& be, const Data& d, const ProbeHeads& p, int bits,
                                      const std::vector<uint8_t>& recs, const std::vector<f16_t>& keys) {
  const int n_ctx = d.c.n_ctx;
  std::vector<float> imp(p.q_heads.size() * n_ctx, -1.0f);
  ScoreKeysArgs a;
  static_cast<AttentionQuery&>(a) = HostQuery(d);
  a.n_prefix = n_ctx;
  if (bits) {
    a.code_bits = bits;
    a.key_codes = recs.data();
  } else {
    a.k_prefix = DevPtr<const f16_t>(keys.data());
  }
  a.prefix_kv_heads = p.kv_heads;
  a.query_heads = p.q_heads;
  a.importance = DevPtr<float>(imp.data());
  const Status st = be.ScoreKeys(a);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return imp;
}

// ScoreKeys over all earlier tokens with the probe's keys only, (q_heads, n_ctx) importance.
std::vector<float> ScoreProbe(Backend& be, const Data& d, const ProbeHeads& p) {
  const Case& c = d.c;
  // Keys of just those kv heads, (n_ctx, kv_heads.size(), hd).
  std::vector<f16_t> keys;
  for (int t = 0; t < c.n_ctx; ++t)
    for (int g : p.kv_heads) {
      const auto* src = d.k_ctx.data() + (size_t(t) * c.n_head_kv + g) * c.head_dim;
      keys.insert(keys.end(), src, src + c.head_dim);
    }
  return ScoreRecordsOrKeys(be, d, p, 0, {}, keys);
}

TEST_P(AttentionTest, ScoreKeysEqualsAttentionImportance) {
  const Case c = GetParam();
  const Data d = MakeData(c, 9);
  std::vector<int> all(c.n_ctx);
  std::iota(all.begin(), all.end(), 0);
  const ProbeHeads p = ProbeHeadsFor(c);
  // fp32 scores, as attention computes them (int8 scores: the next test).
  auto be = MakeCpuBackend({.n_threads = 2, .int8_key_scores = false});
  const AttnRun full = RunAttention(*be, d, all, p.q_heads, false);
  const std::vector<float> imp = ScoreProbe(*be, d, p);
  ASSERT_EQ(imp.size(), full.imp.size());
  for (size_t i = 0; i < imp.size(); ++i) ASSERT_NEAR(imp[i], full.imp[i], 1e-6 + 1e-5 * std::abs(full.imp[i])) << i;
}

// Probe keys scored straight from the int8/int4 records they are stored in (ScoreKeysArgs::
// key_codes) give the importance of scoring the keys those records decode to, bit for bit: on
// the tiled path, on the per-head sgemm path and with int8 scores (int4 codes scored as codes:
// the test after this one). The records are random codes
// and scales; the decoding here is the format's definition, written out element by element.
std::vector<uint8_t> RandomRecords(int bits, int n, int n_slots, int hd, std::mt19937& rng) {
  const size_t code_bytes = bits == 4 ? size_t(hd + 1) / 2 : size_t(hd);
  const size_t rec = size_t(n_slots) * (2 + code_bytes);
  std::vector<uint8_t> out(size_t(n) * rec);
  std::uniform_real_distribution<float> scale(0.0f, bits == 4 ? 0.3f : 0.02f);
  std::uniform_int_distribution<int> byte(0, 255), code8(-127, 127);
  for (int t = 0; t < n; ++t) {
    uint8_t* r = out.data() + size_t(t) * rec;
    for (int s = 0; s < n_slots; ++s) {
      const f16_t h = Fp32ToFp16(scale(rng));
      std::memcpy(r + 2 * s, &h, 2);
      uint8_t* codes = r + 2 * n_slots + size_t(s) * code_bytes;
      for (size_t x = 0; x < code_bytes; ++x) codes[x] = uint8_t(bits == 4 ? byte(rng) : uint8_t(int8_t(code8(rng))));
    }
  }
  return out;
}

std::vector<f16_t> DecodeRecordsByDefinition(int bits, const std::vector<uint8_t>& recs, int n, int n_slots, int hd) {
  const size_t code_bytes = bits == 4 ? size_t(hd + 1) / 2 : size_t(hd);
  const size_t rec = size_t(n_slots) * (2 + code_bytes);
  std::vector<f16_t> out(size_t(n) * n_slots * hd);
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < n_slots; ++s) {
      const uint8_t* r = recs.data() + size_t(t) * rec;
      f16_t h;
      std::memcpy(&h, r + 2 * s, 2);
      const float scale = Fp16ToFp32(h);
      const uint8_t* codes = r + 2 * n_slots + size_t(s) * code_bytes;
      for (int x = 0; x < hd; ++x) {
        const int q = bits == 4 ? ((x % 2 ? codes[x / 2] >> 4 : codes[x / 2] & 0x0f) - 8) : int(int8_t(codes[x]));
        const float v = std::clamp(float(q) * scale, -65504.0f, 65504.0f);
        out[(size_t(t) * n_slots + s) * hd + x] = Fp32ToFp16(v);
      }
    }
  return out;
}

TEST_P(AttentionTest, ScoreKeysFromCodesEqualsScoringTheDecodedKeys) {
  const Case c = GetParam();
  if (c.n_ctx == 0) return;  // no prefix: nothing to score
  const Data d = MakeData(c, 13);
  const ProbeHeads p = ProbeHeadsFor(c);
  const int n_slots = int(p.kv_heads.size());
  std::mt19937 rng(17);
  for (int bits : {8, 4}) {
    const std::vector<uint8_t> recs = RandomRecords(bits, c.n_ctx, n_slots, c.head_dim, rng);
    const std::vector<f16_t> keys = DecodeRecordsByDefinition(bits, recs, c.n_ctx, n_slots, c.head_dim);
    for (const CpuBackendOptions& o :
         {CpuBackendOptions{.n_threads = 2, .int8_key_scores = false, .int4_code_scores = false},
          CpuBackendOptions{.n_threads = 2, .tile_attention = false},
          CpuBackendOptions{.n_threads = 2, .key_score_path = quant::KernelPath::kScalar, .int4_code_scores = false}}) {
      auto be = MakeCpuBackend(o);
      const std::vector<float> want = ScoreRecordsOrKeys(*be, d, p, 0, recs, keys),
                               got = ScoreRecordsOrKeys(*be, d, p, bits, recs, keys);
      ASSERT_EQ(got, want) << bits << "-bit codes on " << be->Name();
      ASSERT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return x >= 0; }));
    }
  }
}

// Each importance of `got` within a factor exp(+-2D) of `want`'s (every score within D), plus fp32
// rounding; *worst: the largest relative difference (recorded with the allowed one).
void ExpectWithinScoreBound(const std::vector<float>& want, const std::vector<float>& got, double bound,
                            double* worst) {
  const double factor = std::exp(2 * bound * 1.01) - 1;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    *worst = std::max(*worst, want[i] > 0 ? err / want[i] : 0.0);
    ASSERT_LE(err, want[i] * factor + 1e-6 + 2e-5 * std::fabs(want[i])) << i;
  }
  ::testing::Test::RecordProperty("worst_relative_error", std::to_string(*worst));
  ::testing::Test::RecordProperty("allowed_relative_error", std::to_string(factor));
}

// Each head's top quarter by importance `got` is its top quarter by `want` but for a few tokens
// near the boundary (at most 5% of it, or one).
void ExpectSameTopQuarter(const std::vector<float>& want, const std::vector<float>& got, const Case& c,
                          const ProbeHeads& p) {
  for (size_t x = 0; x < p.q_heads.size() && c.n_ctx >= 8; ++x) {
    auto top = [&](const std::vector<float>& imp) {
      std::vector<int> idx(size_t(c.n_ctx));
      std::iota(idx.begin(), idx.end(), 0);
      const float* row = imp.data() + x * size_t(c.n_ctx);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return row[a] > row[b]; });
      idx.resize(size_t(c.n_ctx) / 4);
      std::sort(idx.begin(), idx.end());
      return idx;
    };
    const std::vector<int> a = top(want), b = top(got);
    std::vector<int> both;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    EXPECT_LE(a.size() - both.size(), std::max<size_t>(1, a.size() / 20)) << "head " << p.q_heads[x];
  }
}

// The most query rows any probed KV group has (the tiles take a shape up to kTileMaxRows).
int MostRowsPerGroup(const Case& c, const ProbeHeads& p) {
  const int group = c.n_head / c.n_head_kv;
  int most_rows = 0;
  for (int g : p.kv_heads)
    most_rows = std::max(
        most_rows,
        int(std::count_if(p.q_heads.begin(), p.q_heads.end(), [&](int h) { return h / group == g; })) * c.n_new);
  return most_rows;
}

// Int4 records scored as codes (engine/quant/code-scores.h) through the whole op: the scalar
// reference, the AVX2 and the AVX-512 paths give the same bits, and the importance is within
// what the two roundings allow of scoring the decoded keys in fp32. A score moves by at most
//   D = qs / 2 * ks_j * sum_c |code_jc - 8|   (the int8 query's rounding; qs = max |q| / 127)
//     + sum_c |q_c k_c| * 2^-11               (the decoded path's rounding of each key to a half)
// plus fp32 rounding, so each importance within a factor exp(+-2D).
TEST_P(AttentionTest, Int4CodeScoresStayWithinARoundingOfTheDecodedKeys) {
  const Case c = GetParam();
  if (c.n_ctx == 0) return;
  const Data d = MakeData(c, 13);
  const ProbeHeads p = ProbeHeadsFor(c);
  const int n_slots = int(p.kv_heads.size()), hd = c.head_dim, group = c.n_head / c.n_head_kv;
  std::mt19937 rng(23);
  const std::vector<uint8_t> recs = RandomRecords(4, c.n_ctx, n_slots, hd, rng);
  const std::vector<f16_t> keys = DecodeRecordsByDefinition(4, recs, c.n_ctx, n_slots, hd);
  auto score = [&](const CpuBackendOptions& o, bool from_codes) {
    return ScoreRecordsOrKeys(*MakeCpuBackend(o), d, p, from_codes ? 4 : 0, recs, keys);
  };
  const std::vector<float> want = score({.n_threads = 2, .int8_key_scores = false}, false);
  const std::vector<float> got = score({.n_threads = 2, .code_score_path = quant::KernelPath::kScalar}, true);
  EXPECT_EQ(score({.n_threads = 2, .code_score_path = quant::KernelPath::kAvx2}, true), got) << "AVX2 against scalar";
  if (!quant::MissingCpuFeature(quant::KernelPath::kAvx512)) {
    EXPECT_EQ(score({.n_threads = 2, .code_score_path = quant::KernelPath::kAvx512}, true), got)
        << "AVX-512 against scalar";
  }
  const double scale = HostQuery(d).scale;
  const size_t rec = size_t(n_slots) * (2 + size_t(hd + 1) / 2);
  double bound = 0;  // D
  for (int h : p.q_heads) {
    const int slot = int(std::find(p.kv_heads.begin(), p.kv_heads.end(), h / group) - p.kv_heads.begin());
    for (int i = 0; i < c.n_new; ++i) {
      const float* q = d.q.data() + (size_t(i) * c.n_head + h) * hd;
      double qs = 0;
      for (int x = 0; x < hd; ++x) qs = std::max(qs, std::fabs(double(q[x] * float(scale))) / 127);
      for (int t = 0; t < c.n_ctx; ++t) {
        const uint8_t* r = recs.data() + size_t(t) * rec;
        f16_t h16;
        std::memcpy(&h16, r + 2 * slot, 2);
        const double ks = Fp16ToFp32(h16);
        const uint8_t* codes = r + 2 * n_slots + size_t(slot) * size_t(hd + 1) / 2;
        double e = 0;
        for (int x = 0; x < hd; ++x) {
          const int code = (x % 2 ? codes[x / 2] >> 4 : codes[x / 2] & 0x0f) - 8;
          e += qs / 2 * ks * std::abs(code) + std::fabs(q[x] * scale * code * ks) * std::ldexp(1.0, -11);
        }
        bound = std::max(bound, e);
      }
    }
  }
  double worst = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectWithinScoreBound(want, got, bound, &worst));
  ExpectSameTopQuarter(want, got, c, p);
  if (TileAttentionFits(MostRowsPerGroup(c, p), hd)) {
    EXPECT_GT(worst, 0.0) << "equal exactly: the codes were decoded";
  }
}

// Int8 scores (engine/quant/key-scores.h) through the whole op: the scalar reference and the
// AVX-512 kernel give bit-identical importance, and it is within what the quantization allows of
// the fp32 importance. Every score s_rj moves by at most D, so each probability moves by a factor
// within exp(+-2D) and so does each column sum: |imp8 - imp32| <= imp32 * (exp(2D) - 1), plus fp32
// rounding. D is the largest of key-scores-test's per-score bounds, here over the blocks the op
// quantizes keys in (tile-attention.h: channel scales ks_c per block, the row's qs per block):
//   |error| <= sum_c (|q_c| ks_c / 2 + qs |k_c| / (2 ks_c) + 3 qs / 4).
TEST_P(AttentionTest, Int8ScoreKeysStayWithinTheirQuantizationBound) {
  const Case c = GetParam();
  const Data d = MakeData(c, 9);
  const ProbeHeads p = ProbeHeadsFor(c);
  auto fp32 = MakeCpuBackend({.n_threads = 2, .int8_key_scores = false});
  auto scalar = MakeCpuBackend({.n_threads = 2, .key_score_path = quant::KernelPath::kScalar});
  const std::vector<float> want = ScoreProbe(*fp32, d, p), got = ScoreProbe(*scalar, d, p);
  if (!quant::MissingCpuFeature(quant::KernelPath::kAvx512)) {
    auto avx512 = MakeCpuBackend({.n_threads = 2, .key_score_path = quant::KernelPath::kAvx512});
    EXPECT_EQ(ScoreProbe(*avx512, d, p), got) << "AVX-512 against the scalar reference";
  }
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
  const int n_keys = c.n_ctx + c.n_new, n_blocks = TileBlocks(n_keys);
  const double scale = HostQuery(d).scale;
  double bound = 0;  // D
  for (int h : p.q_heads) {
    const int g = h / group;
    auto key = [&](int t) {
      return t < c.n_ctx ? d.k_ctx.data() + (size_t(t) * c.n_head_kv + g) * hd
                         : d.k_new.data() + (size_t(t - c.n_ctx) * c.n_head_kv + g) * hd;
    };
    for (int b = 0; b < n_blocks; ++b) {
      const int t0 = TileBlockStart(n_keys, n_blocks, b), t1 = TileBlockStart(n_keys, n_blocks, b + 1);
      std::vector<double> ks(size_t(hd), 0.0);
      for (int t = t0; t < t1; ++t)
        for (int x = 0; x < hd; ++x)
          ks[size_t(x)] = std::max(ks[size_t(x)], std::fabs(double(Fp16ToFp32(key(t)[x]))) / 127);
      for (int i = 0; i < c.n_new; ++i) {
        const float* q = d.q.data() + (size_t(i) * c.n_head + h) * hd;
        double qs = 0;
        for (int x = 0; x < hd; ++x) qs = std::max(qs, std::fabs(q[x] * scale) * ks[size_t(x)] / 127);
        for (int t = t0; t < std::min(t1, c.n_ctx + i + 1); ++t) {
          double e = 0;
          for (int x = 0; x < hd; ++x) {
            const double kx = std::fabs(double(Fp16ToFp32(key(t)[x]))), kss = ks[size_t(x)];
            e += std::fabs(q[x] * scale) * kss / 2 + (kss > 0 ? qs * kx / (2 * kss) : 0.0) + 0.75 * qs;
          }
          bound = std::max(bound, e);
        }
      }
    }
  }
  double worst = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectWithinScoreBound(want, got, bound, &worst));
  // What the scores are for, ranking (int8 importance against fp32).
  ExpectSameTopQuarter(want, got, c, p);
  // The int8 scores are the tiled path's; shapes it does not take score in fp32 as before.
  const int most_rows = MostRowsPerGroup(c, p);
  if (got.empty()) return;
  if (TileAttentionFits(most_rows, hd)) EXPECT_GT(worst, 0.0) << "equal to fp32 exactly: the int8 path did not run";
  else EXPECT_EQ(worst, 0.0) << "a shape the tiles do not take";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{1, 4, 2, 16, 40},      // decode step
                                           Case{7, 6, 2, 32, 0},       // no prefix at all
                                           Case{19, 9, 3, 64, 37},     // SmolLM2's heads
                                           Case{150, 4, 4, 32, 300},   // MHA, several token blocks
                                           Case{100, 6, 2, 16, 4500},  // keys converted in chunks
                                           // A question over a selected prefix (blocked tiles):
                                           Case{25, 9, 3, 64, 1925},   // SmolLM2, many key blocks
                                           Case{13, 8, 2, 128, 700},   // Llama-3's group of 4
                                           Case{30, 14, 2, 64, 257},   // Qwen2.5's group of 7
                                           Case{9, 4, 2, 24, 300},     // head size of three vectors
                                           Case{300, 2, 1, 16, 3000},  // long prefix, MQA
                                           // A prefill, more rows than a tile takes: slices of rows
                                           Case{130, 12, 2, 128, 600},  // Qwen2.5-1.5B's group of 6
                                           Case{140, 4, 2, 24, 200},    // head size of three vectors
                                           // Decode over a long prefix split into key blocks:
                                           Case{1, 9, 3, 64, 5000},   // SmolLM2
                                           Case{2, 8, 2, 128, 1500},  // two rows, Llama-3's group of 4
                                           Case{1, 14, 2, 64, 777},   // Qwen2.5's group of 7
                                           Case{1, 3, 1, 20, 613},    // head size not whole vectors
                                           Case{1, 5, 5, 8, 5}));     // fewer keys than a vector

TEST(AttentionArgs, BadHeadsAreRejected) {
  auto be = MakeCpuBackend({1});
  const Data d = MakeData({2, 4, 2, 8, 3}, 1);
  std::vector<float> out(2 * 4 * 8), imp(100);
  AttentionArgs a;
  a.n_new = 2;
  a.n_head = 4;
  a.n_head_kv = 2;
  a.head_dim = 8;
  a.scale = 0.3f;
  a.q = DevPtr<const float>(d.q.data());
  a.k_new = DevPtr<const f16_t>(d.k_new.data());
  a.v_new = DevPtr<const f16_t>(d.v_new.data());
  a.out = DevPtr<float>(out.data());
  a.importance = DevPtr<float>(imp.data());
  const std::vector<int> bad = {4};
  a.importance_heads = bad;
  EXPECT_EQ(be->Attention(a).code(), Status::Code::kInvalidArgument);
  a.importance_heads = {};
  a.n_head_kv = 3;  // 4 % 3 != 0
  EXPECT_EQ(be->Attention(a).code(), Status::Code::kInvalidArgument);

  ScoreKeysArgs s;
  s.n_new = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 8;
  s.q = a.q;
  s.k_new = a.k_new;
  s.n_prefix = 3;
  s.k_prefix = DevPtr<const f16_t>(d.k_ctx.data());
  const std::vector<int> kvh = {0}, qh = {2};  // head 2 uses kv head 1: not supplied
  s.prefix_kv_heads = kvh;
  s.query_heads = qh;
  s.importance = DevPtr<float>(imp.data());
  const Status st = be->ScoreKeys(s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("kv head 1"), std::string::npos) << st.message();
}

// The eight-lane exp against exp in double over the whole float range it covers, and the clamp
// at its ends: below -87 it returns e^-87, above 88 e^88.
TEST(TileExpShift, ExpIsWithinTwoTenthsOfAMillionthOfExp) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-87.0f, 88.0f);
  double worst = 0;
  for (int it = 0; it < 20000; ++it) {
    alignas(32) float x[8], e[8];
    for (float& v : x) v = it < 10 ? float(it - 5) * 0.173f : u(rng);
    _mm256_store_ps(e, Exp8(_mm256_load_ps(x)));
    for (int l = 0; l < 8; ++l) worst = std::max(worst, std::fabs(double(e[l]) / std::exp(double(x[l])) - 1));
  }
  EXPECT_LT(worst, 3e-7);
  alignas(32) const float ends[8] = {-1000.0f, -87.5f, -87.0f, 88.0f, 88.5f, 1000.0f, 0.0f, -0.0f};
  alignas(32) float e[8];
  _mm256_store_ps(e, Exp8(_mm256_load_ps(ends)));
  for (int l : {0, 1, 2}) EXPECT_NEAR(e[l] / std::exp(-87.0), 1.0, 3e-7) << ends[l];
  for (int l : {3, 4, 5}) EXPECT_NEAR(e[l] / std::exp(88.0), 1.0, 3e-7) << ends[l];
  EXPECT_EQ(e[6], 1.0f);  // a row's largest
  EXPECT_EQ(e[7], 1.0f);
}

// A row's shifted exponentials and their sum against double precision, for lengths that end in
// every kind of tail (the four sums of eight lanes, a last eight, the last n % 8 on masked lanes).
TEST(TileExpShift, RowExponentialsAndTheirSumMatchDoublePrecision) {
  std::mt19937 rng(9);
  for (int n : {1, 2, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 47, 63, 255, 257, 1001}) {
    std::uniform_real_distribution<float> u(-6.0f, 6.0f);
    std::vector<float> row(size_t(n) + 8, 12345.0f);  // guards past the row stay untouched
    for (int j = 0; j < n; ++j) row[size_t(j)] = u(rng);
    const double mx = *std::max_element(row.begin(), row.begin() + n);
    std::vector<float> dst = row;
    float sum = 0;
    EXPECT_EQ(ExpShiftTo(row.data(), n, dst.data(), &sum), float(mx)) << n;
    double want_sum = 0;
    for (int j = 0; j < n; ++j) {
      const double want = std::exp(double(row[size_t(j)] - float(mx)));  // of the float difference
      want_sum += want;
      EXPECT_NEAR(dst[size_t(j)], want, 3e-7 * want) << "n " << n << ", j " << j;
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << n;
    for (size_t j = size_t(n); j < dst.size(); ++j) EXPECT_EQ(dst[j], 12345.0f) << "n " << n << " wrote past the row";
  }
}

// The AVX-512 row exponentials (the tiles' softmax numerators) give the AVX2 path's bits: the
// same exp, lane for lane, and the sum added in the same order; so an AVX-512 machine's attention
// and probe rankings are the AVX2 path's.
TEST(TileExpShift, Avx512GivesTheBitsOfTheAvx2Path) {
  if (const char* missing = quant::MissingCpuFeature(quant::KernelPath::kAvx512))
    GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the avx512 path)";
  std::mt19937 rng(7);
  for (int n : {1, 5, 8, 9, 15, 16, 17, 24, 31, 33, 40, 47, 63, 256, 1000, 4099}) {
    for (float spread : {0.5f, 8.0f, 120.0f}) {  // up to exponents the clamp cuts
      std::uniform_real_distribution<float> u(-spread, spread);
      std::vector<float> row(static_cast<size_t>(n));
      for (float& x : row) x = u(rng);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
      float want_sum = 0, got_sum = 0;
      const float want_max = ExpShiftTo(row.data(), n, want.data(), &want_sum);
      const float got_max = ExpShiftToAvx512(row.data(), n, got.data(), &got_sum);
      EXPECT_EQ(std::memcmp(&want_max, &got_max, sizeof(float)), 0) << "n " << n;
      EXPECT_EQ(std::memcmp(&want_sum, &got_sum, sizeof(float)), 0)
          << "n " << n << ": " << want_sum << " vs " << got_sum;
      EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * size_t(n)), 0) << "n " << n;
      // In place, as the attention calls it.
      std::vector<float> in_place = row;
      float sum = 0;
      ExpShiftToAvx512(in_place.data(), n, in_place.data(), &sum);
      EXPECT_EQ(std::memcmp(want.data(), in_place.data(), sizeof(float) * size_t(n)), 0) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace impress
