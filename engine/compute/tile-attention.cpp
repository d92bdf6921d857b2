// The tiled attention on AVX2 + FMA + F16C (the baseline the project compiles for); its two
// inner loops also run on AVX-512 (tile-kernels-inl.h holds them once for both).
#include "engine/compute/tile-attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/kv-codes.h"
#include "base/mutex.h"
#include "engine/compute/simd-math.h"
#include "engine/compute/tile-kernels-inl.h"
#include "engine/quant/code-scores.h"
#include "engine/quant/key-scores.h"

namespace impress {

namespace {

// Rows r[0..8) (eight dims of eight keys) to columns: d[c * ldk + x] = r[x][c].
inline void StoreTransposed8x8(const __m256 r[8], float* d, int ldk) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d + 0 * ldk, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + 1 * ldk, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ldk, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ldk, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ldk, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ldk, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ldk, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ldk, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// Eight codes (int8 in the low 8 bytes) times s, as base/kv-codes.cpp decodes them (clamped to the
// halves, rounded to the nearest half), then back to floats: the values the fp16 path would see.
inline __m256 CodesToHalfFloats(__m128i q8, __m256 vs) {
  __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vs);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-65504.0f)), _mm256_set1_ps(65504.0f));
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

// Dims [c, c + 8) of one head's codes (bits 8 or 4; int4 stored as q + 8, the even dim low).
inline __m128i EightCodes(const uint8_t* hc, int bits, int c) {
  if (bits == 8) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(hc + c));
  int32_t word;
  std::memcpy(&word, hc + c / 2, 4);
  const __m128i b = _mm_cvtsi32_si128(word), low4 = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
  return _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));
}

}  // namespace

void TransposeKeysF32(const f16_t* k, int64_t stride, int n, int hd, float* kt, int ldk) {
  const int n16 = RoundUpTile(n);
  // Eight keys at a time: eight rows of eight dims converted, then an 8x8 transpose in registers.
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int c = 0; c + 8 <= hd; c += 8) {
      __m256 r[8];
      for (int x = 0; x < 8; ++x)
        r[x] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + (j + x) * stride + c)));
      StoreTransposed8x8(r, kt + int64_t(c) * ldk + j, ldk);
    }
    for (int c = hd / 8 * 8; c < hd; ++c)
      for (int x = 0; x < 8; ++x) kt[int64_t(c) * ldk + j + x] = Fp16ToFp32(k[(j + x) * stride + c]);
  }
  for (; j < n; ++j)
    for (int c = 0; c < hd; ++c) kt[int64_t(c) * ldk + j] = Fp16ToFp32(k[j * stride + c]);
  if (n16 > n)
    for (int c = 0; c < hd; ++c) std::memset(kt + int64_t(c) * ldk + n, 0, sizeof(float) * size_t(n16 - n));
}

void TransposeCodedKeysF32(const uint8_t* rec, int64_t rec_bytes, int bits, int n_heads, int head, int n, int hd,
                           float* kt, int ldk) {
  const int64_t codes_at = 2 * int64_t(n_heads) + int64_t(head) * int64_t(HeadCodeBytes(bits, hd));
  auto scale_of = [&](int j) {
    f16_t s16;
    std::memcpy(&s16, rec + j * rec_bytes + 2 * head, 2);  // records are only byte-aligned
    return Fp16ToFp32(s16);
  };
  int j = 0;
  if (hd % 8 == 0) {
    for (; j + 8 <= n; j += 8) {
      __m256 vs[8];
      for (int x = 0; x < 8; ++x) vs[x] = _mm256_set1_ps(scale_of(j + x));
      for (int c = 0; c < hd; c += 8) {
        __m256 r[8];
        for (int x = 0; x < 8; ++x)
          r[x] = CodesToHalfFloats(EightCodes(rec + (j + x) * rec_bytes + codes_at, bits, c), vs[x]);
        StoreTransposed8x8(r, kt + int64_t(c) * ldk + j, ldk);
      }
    }
  }
  f16_t one[512];
  for (; j < n; ++j) {
    DecodeRecordHead(bits, rec + j * rec_bytes, n_heads, hd, head, one);
    for (int c = 0; c < hd; ++c) kt[int64_t(c) * ldk + j] = Fp16ToFp32(one[c]);
  }
  const int n16 = RoundUpTile(n);
  if (n16 > n)
    for (int c = 0; c < hd; ++c) std::memset(kt + int64_t(c) * ldk + n, 0, sizeof(float) * size_t(n16 - n));
}

void ValuesF32(const f16_t* v, int64_t stride, int n, int hd, float* v32) {
  for (int j = 0; j < n; ++j) Fp16ToFp32Row(v + j * stride, v32 + int64_t(j) * hd, size_t(hd));
}

namespace {
// The AVX-512 twins of the two below (tile-kernels-avx512.cpp), when the kernel path is AVX-512.
const bool kTilesAvx512 = quant::ActiveKernelPath() == quant::KernelPath::kAvx512;
}  // namespace

void TileScores(const float* q, int rows, int hd, const float* kt, int ldk, int n, float* s, int ld) {
  if (kTilesAvx512) return TileScoresAvx512(q, rows, hd, kt, ldk, n, s, ld);
  TileScoresWith<Avx2Vec>(q, rows, hd, kt, ldk, RoundUpTile(n), s, ld);
}

float TileExpShift(const float* row, int n, float* dst, float* sum) {
  if (kTilesAvx512) return ExpShiftToAvx512(row, n, dst, sum);
  return ExpShiftTo(row, n, dst, sum);
}

void TileWeightedValues(const float* p, int rows, int ld, const float* v32, int n, int hd, float* acc) {
  if (kTilesAvx512) return TileWeightedValuesAvx512(p, rows, ld, v32, n, hd, acc);
  TileWeightedValuesWith<Avx2Vec>(p, rows, ld, v32, n, hd, acc);
}

namespace {

// Where one call's pieces live: rows r = i * n_heads + x (token i, the group's x-th head),
// blocks of keys b; parts (g, b, r) and raw scores (g, r, key - raw_from) of the keys whose
// importance is wanted.
struct TileLayout {
  int n_keys = 0, n_blocks = 0, rows = 0;  // rows: the most any group has
  int raw_from = 0;
  size_t Part(int g, int b, int r) const { return (size_t(g) * n_blocks + size_t(b)) * rows + size_t(r); }
  // Raw(g, r) + j - raw_from: key j of row r.
  size_t Raw(int g, int r) const { return (size_t(g) * rows + size_t(r)) * size_t(n_keys - raw_from); }
  // Block b holds keys [BlockStart(b), BlockStart(b + 1)).
  int BlockStart(int b) const { return TileBlockStart(n_keys, n_blocks, b); }
  int BlockOf(int j) const {
    int b = int(int64_t(j) * n_blocks / n_keys);
    while (b > 0 && BlockStart(b) > j) --b;
    while (b + 1 < n_blocks && BlockStart(b + 1) <= j) ++b;
    return b;
  }
};

// Scores of group g's rows against its keys [j0, j0 + n) (n_pre of them from the prefix, at pre
// with stride pre_stride), from int8 codes: the block's keys quantized per channel and packed once
// for all the rows, the rows quantized with those channel scales folded in. s has ld >= the
// padded width.
void Int8BlockScores(const TileAttentionArgs& a, const TileScratch& sc, int g, int max_rows, int j0, int n, int n_pre,
                     const f16_t* pre, int64_t pre_stride, float* s, int ld) {
  const TileGroup& grp = a.groups[size_t(g)];
  const int hd = a.head_dim, rows = int(grp.heads.size()) * a.n_new;
  const quant::KernelPath path = *a.int8_scores;
  const int n_pad = quant::KeyScorePad(n);
  thread_local ScratchArray<int8_t> codes_buf;
  thread_local ScratchArray<int32_t> k_sum_buf;
  thread_local ScratchArray<float> amax_buf, ch_scale_buf, ch_inv_buf, q_scale_buf;
  thread_local ScratchArray<uint8_t> q_u8_buf;
  int8_t* codes = codes_buf.Grow(size_t(hd) * n_pad);
  int32_t* k_sum = k_sum_buf.Grow(size_t(n_pad));
  for (int c = 0; c < hd / 4; ++c) std::memset(codes + (int64_t(c) * n_pad + n) * 4, 0, size_t(n_pad - n) * 4);
  std::fill(k_sum + n, k_sum + n_pad, 0);
  const f16_t* fresh = grp.k_new + int64_t(j0 + n_pre - a.n_prefix) * grp.new_stride;
  float* amax = amax_buf.Grow(size_t(hd));
  std::fill(amax, amax + hd, 0.0f);
  if (n_pre > 0) quant::KeyChannelAbsMax(path, pre, pre_stride, n_pre, hd, amax);
  if (n > n_pre) quant::KeyChannelAbsMax(path, fresh, grp.new_stride, n - n_pre, hd, amax);
  float* ch_scale = ch_scale_buf.Grow(size_t(hd));
  float* ch_inv = ch_inv_buf.Grow(size_t(hd));
  quant::KeyChannelScales(amax, hd, ch_scale, ch_inv);
  if (n_pre > 0) quant::PackKeysInt8(path, pre, pre_stride, n_pre, hd, ch_inv, codes, n_pad, 0, k_sum);
  if (n > n_pre)
    quant::PackKeysInt8(path, fresh, grp.new_stride, n - n_pre, hd, ch_inv, codes, n_pad, n_pre, k_sum + n_pre);
  uint8_t* q_u8 = q_u8_buf.Grow(size_t(rows) * hd);
  float* q_scale = q_scale_buf.Grow(size_t(rows));
  quant::QuantizeQueriesInt8(sc.q.data() + size_t(g) * size_t(max_rows) * hd, rows, hd, ch_scale, q_u8, q_scale);
  quant::KeyScoresInt8(path, q_u8, q_scale, rows, hd, codes, n_pad, k_sum, s, ld);
}

// Scores of group g's rows against the block's n_pre prefix keys, from their int4 records
// (engine/quant/code-scores.h), into s[r * ld + j] for j < n_pre (and zeros up to the padding).
void Int4BlockScores(const TileAttentionArgs& a, const TileScratch& sc, int g, int max_rows, int n_pre,
                     const uint8_t* k_rec, float* s, int ld) {
  const TileGroup& grp = a.groups[size_t(g)];
  const int hd = a.head_dim, rows = int(grp.heads.size()) * a.n_new;
  const int n_pad = quant::CodeScorePad(n_pre);
  thread_local ScratchArray<uint8_t> codes_buf;
  thread_local ScratchArray<float> ks_buf;
  const int words = quant::CodeWords(hd);
  uint8_t* codes = codes_buf.Grow(size_t(words) * 4 * n_pad);
  float* ks = ks_buf.Grow(size_t(n_pad));
  const int scale_at = 2 * grp.code_head;
  const int codes_at = 2 * grp.code_heads + grp.code_head * int(HeadCodeBytes(4, hd));
  quant::PackInt4Keys(k_rec, grp.code_record_bytes, scale_at, codes_at, n_pre, hd, codes, n_pad, ks);
  const size_t first = size_t(g) * size_t(max_rows);  // the group's first row
  quant::Int4KeyScores(*a.int4_code_scores, sc.q8.data() + first * 4 * words, sc.q8_scale.data() + first,
                       sc.q8_sum.data() + first, rows, hd, codes, n_pad, ks, s, ld);
}

// One task: the scores of block b of group g, their per-row softmax parts and, with values,
// the block's weighted value sums.
// False (and nothing computed) when the block's prefix rows never arrived.
bool TileBlock(const TileAttentionArgs& a, const TileLayout& L, TileScratch& sc, int g, int b) {
  const TileGroup& grp = a.groups[size_t(g)];
  const int hd = a.head_dim, nh = int(grp.heads.size()), rows = nh * a.n_new;
  const int j0 = L.BlockStart(b), j1 = L.BlockStart(b + 1);
  const int n = j1 - j0, n16 = RoundUpTile(n);
  const int n_pre_rows = std::clamp(a.n_prefix - j0, 0, n);
  if (a.prefix_arrivals && n_pre_rows > 0 && !a.prefix_arrivals->Ready(uint32_t(j0), uint32_t(j0 + n_pre_rows)))
    return false;
  // The row stride is not a multiple of 4 KiB, so rows do not alias in the caches.
  const int ldk = n16 + kTileCols;
  thread_local ScratchArray<float> kt, vb, s;
  kt.Grow(size_t(hd) * ldk);
  s.Grow(size_t(rows) * ldk);
  // Keys [j0, j1) as two runs: the prefix part, then the new tokens.
  const int n_pre = std::clamp(a.n_prefix - j0, 0, n);
  auto run_ptr = [&](const f16_t* prefix, const f16_t* fresh, bool first) {
    return first ? prefix + int64_t(j0) * grp.prefix_stride : fresh + int64_t(j0 + n_pre - a.n_prefix) * grp.new_stride;
  };
  // The block's prefix keys: in place, or, for int8 scores, decoded from their codes into a buffer
  // that stays in L2 (fp32 scores take the codes straight into the transposed block).
  const uint8_t* k_rec = grp.k_codes ? grp.k_codes + int64_t(j0) * grp.code_record_bytes : nullptr;
  const bool code_scores = !a.out && a.int4_code_scores && k_rec && grp.code_bits == 4 && n_pre > 0;
  const bool int8_scores = a.int8_scores && !a.out && !code_scores;
  const f16_t* k_pre = n_pre > 0 && !grp.k_codes ? run_ptr(grp.k_prefix, grp.k_new, true) : nullptr;
  int64_t k_pre_stride = grp.prefix_stride;
  if (n_pre > 0 && grp.k_codes && int8_scores) {
    thread_local ScratchArray<f16_t> decoded;
    decoded.Grow(size_t(n_pre) * hd);
    const uint8_t* rec = k_rec;
    for (int j = 0; j < n_pre; ++j, rec += grp.code_record_bytes)
      DecodeRecordHead(grp.code_bits, rec, grp.code_heads, hd, grp.code_head, decoded.data() + size_t(j) * hd);
    k_pre = decoded.data();
    k_pre_stride = hd;
  }
  if (code_scores) {
    Int4BlockScores(a, sc, g, L.rows, n_pre, k_rec, s.data(), ldk);
    if (n > n_pre) {  // the new tokens' keys (halves) in fp32, into the columns after the prefix's
      TransposeKeysF32(run_ptr(grp.k_prefix, grp.k_new, false), grp.new_stride, n - n_pre, hd, kt.data(), ldk);
      TileScores(sc.q.data() + size_t(g) * L.rows * hd, rows, hd, kt.data(), ldk, n - n_pre, s.data() + n_pre, ldk);
    }
  } else if (int8_scores) {
    Int8BlockScores(a, sc, g, L.rows, j0, n, n_pre, k_pre, k_pre_stride, s.data(), ldk);
  } else {
    if (n_pre > 0 && k_rec) {
      TransposeCodedKeysF32(k_rec, grp.code_record_bytes, grp.code_bits, grp.code_heads, grp.code_head, n_pre, hd,
                            kt.data(), ldk);
    } else if (n_pre > 0) {
      TransposeKeysF32(k_pre, k_pre_stride, n_pre, hd, kt.data(), ldk);
    }
    if (n > n_pre)
      TransposeKeysF32(run_ptr(grp.k_prefix, grp.k_new, false), grp.new_stride, n - n_pre, hd, kt.data() + n_pre, ldk);
    for (int c = 0; c < hd; ++c) std::fill(kt.data() + int64_t(c) * ldk + n, kt.data() + int64_t(c) * ldk + n16, 0.0f);
    const float* q = sc.q.data() + size_t(g) * L.rows * hd;
    TileScores(q, rows, hd, kt.data(), ldk, n, s.data(), ldk);
  }
  for (int i = 0; i < a.n_new; ++i) {
    const int valid = std::clamp(a.n_prefix + a.q_first + i + 1 - j0, 0, n);  // causal among the new tokens
    for (int x = 0; x < nh; ++x) {
      const int r = i * nh + x;
      float* row = s.data() + int64_t(r) * ldk;
      const size_t idx = L.Part(g, b, r);
      float sum = 0;
      // exp(score - the block's max): MergeRows finds the factor that makes them probabilities.
      // Scores only, they go straight to the importance's buffer where it takes the whole row.
      const int skip = std::max(0, L.raw_from - j0);  // keys of the block before raw_from
      const bool keep = grp.heads[size_t(x)].importance && valid > skip;
      float* raw = keep ? sc.raw.data() + L.Raw(g, r) + (j0 + skip - L.raw_from) : nullptr;
      const bool direct = keep && skip == 0 && !a.out;
      sc.part_max[idx] = valid > 0 ? TileExpShift(row, valid, direct ? raw : row, &sum) : -INFINITY;
      sc.part_sum[idx] = sum;
      if (keep && !direct) std::memcpy(raw, row + skip, sizeof(float) * size_t(valid - skip));
      if (a.out) std::fill(row + valid, row + n, 0.0f);  // masked out of the values' sums
    }
  }
  if (!a.out) return true;
  vb.Grow(size_t(n) * hd);
  if (n_pre > 0) ValuesF32(run_ptr(grp.v_prefix, grp.v_new, true), grp.prefix_stride, n_pre, hd, vb.data());
  if (n > n_pre)
    ValuesF32(run_ptr(grp.v_prefix, grp.v_new, false), grp.new_stride, n - n_pre, hd, vb.data() + int64_t(n_pre) * hd);
  float* acc = sc.part_acc.data() + L.Part(g, b, 0) * hd;
  std::fill(acc, acc + size_t(rows) * hd, 0.0f);
  TileWeightedValues(s.data(), rows, ldk, vb.data(), n, hd, acc);
  return true;
}

// Attend while reading: hands out the (group, block) tasks in the order their blocks' prefix rows
// complete, so no thread waits for a block while another one's rows are there (a layer's chunks
// arrive in whatever order the disk finishes them). Task t = b * n_groups + g.
class ArrivalOrder {
 public:
  ArrivalOrder(const TileAttentionArgs& a, const TileLayout& L, int n_groups) : rows_(*a.prefix_arrivals) {
    for (int64_t t = 0; t < int64_t(n_groups) * L.n_blocks; ++t) {
      const int b = int(t / n_groups), j0 = L.BlockStart(b);
      const int n_pre = std::clamp(a.n_prefix - j0, 0, L.BlockStart(b + 1) - j0);
      ranges_.push_back({uint32_t(j0), uint32_t(j0 + n_pre)});
    }
    taken_.assign(ranges_.size(), 0);
  }
  // The next task whose rows are all there, waiting for arrivals while none is; when the rows
  // never come, any task left (its block then fails, TileBlock's check).
  int64_t Next() {
    for (;;) {
      const uint64_t seen = rows_.reports();
      if (const int64_t t = Take(/*ready_only=*/true); t >= 0) return t;
      if (!rows_.WaitForMore(seen)) return Take(/*ready_only=*/false);
    }
  }

 private:
  int64_t Take(bool ready_only) {
    MutexLock lk(&mu_);
    while (first_ < taken_.size() && taken_[first_]) ++first_;
    const size_t first = first_;
    const uint8_t* taken = taken_.data();
    const std::span<const std::pair<uint32_t, uint32_t>> left(ranges_.data() + first, ranges_.size() - first);
    size_t task = first;
    if (ready_only) {
      const int i = rows_.FirstReady(left, [&](int x) { return taken[first + size_t(x)] != 0; });
      if (i < 0) return -1;
      task += size_t(i);
    }
    if (task >= taken_.size()) return -1;
    taken_[task] = 1;
    return int64_t(task);
  }

  RowArrivals& rows_;
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // per task: its prefix rows
  Mutex mu_;
  std::vector<uint8_t> taken_ GUARDED_BY(mu_);
  size_t first_ GUARDED_BY(mu_) = 0;  // tasks before it are all taken
};

// Merges the blocks of every row: its max and 1 / total (kept for the importance), and, with
// values, the output row.
void MergeRows(const TileAttentionArgs& a, const TileLayout& L, TileScratch& sc) {
  const int hd = a.head_dim;
  for (size_t g = 0; g < a.groups.size(); ++g) {
    const TileGroup& grp = a.groups[g];
    const int nh = int(grp.heads.size());
    for (int r = 0; r < nh * a.n_new; ++r) {
      float mx = -INFINITY;
      for (int b = 0; b < L.n_blocks; ++b) mx = std::max(mx, sc.part_max[L.Part(int(g), b, r)]);
      float total = 0;
      float* out = a.out ? a.out + int64_t(r / nh) * a.ldo + int64_t(grp.heads[size_t(r % nh)].head) * hd : nullptr;
      if (out) std::fill(out, out + hd, 0.0f);
      for (int b = 0; b < L.n_blocks; ++b) {
        const size_t idx = L.Part(int(g), b, r);
        if (sc.part_sum[idx] == 0) {
          sc.part_w[idx] = 0;
          continue;
        }
        const float w = std::exp(sc.part_max[idx] - mx);
        sc.part_w[idx] = w;
        total += sc.part_sum[idx] * w;
        if (!out) continue;
        const float* acc = sc.part_acc.data() + idx * hd;
        for (int c = 0; c < hd; ++c) out[c] += w * acc[c];
      }
      const float inv = 1.0f / total;
      if (out)
        for (int c = 0; c < hd; ++c) out[c] *= inv;
      // A block's exp(score - block max) times this is the probability.
      for (int b = 0; b < L.n_blocks; ++b) sc.part_w[L.Part(int(g), b, r)] *= inv;
    }
  }
}

// Importance columns [c0, c1): each requested head's column sums of its rows' probabilities,
// block by block (raw holds exp(score - the block's max), part_w the factor to a probability).
// Every column adds its rows in row order. The columns every row sees (below the first row's
// causal end) keep their sums in registers across the rows; the new tokens' columns after them
// take the rows that see them one by one.
void ImportanceColumns(const TileAttentionArgs& a, const TileLayout& L, const TileScratch& sc, int c0, int c1) {
  const size_t n_raw = size_t(L.n_keys - L.raw_from);
  for (size_t g = 0; g < a.groups.size(); ++g) {
    const TileGroup& grp = a.groups[g];
    const int nh = int(grp.heads.size());
    for (int x = 0; x < nh; ++x) {
      float* imp = grp.heads[size_t(x)].importance;
      if (!imp || a.n_new == 0) continue;
      auto row_end = [&](int i) {
        const int n_valid = a.n_prefix + a.q_first + i + 1;
        return std::min(c1, a.importance_include_new ? n_valid : std::min(n_valid, a.n_prefix));
      };
      const size_t row_step = size_t(nh) * n_raw;             // raw of row (i + 1, x) after row (i, x)
      const float* raw_x = sc.raw.data() + L.Raw(int(g), x);  // key j of row (0, x) at raw_x[j - raw_from]
      const int common = row_end(0);
      for (int b = L.BlockOf(c0); b < L.n_blocks && c0 < common; ++b) {
        const int lo = std::max(c0, L.BlockStart(b)), hi = std::min(common, L.BlockStart(b + 1));
        if (lo >= common) break;
        const float* w = sc.part_w.data() + L.Part(int(g), b, x);  // row i's at w[i * nh]
        int j = lo;
        for (; j + 32 <= hi; j += 32) {
          __m256 acc[4];
          for (int k = 0; k < 4; ++k) acc[k] = _mm256_loadu_ps(imp + j + 8 * k);
          const float* src = raw_x + (j - L.raw_from);
          for (int i = 0; i < a.n_new; ++i, src += row_step) {
            const __m256 vw = _mm256_broadcast_ss(w + size_t(i) * nh);
            for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_loadu_ps(src + 8 * k), vw));
          }
          for (int k = 0; k < 4; ++k) _mm256_storeu_ps(imp + j + 8 * k, acc[k]);
        }
        for (; j + 8 <= hi; j += 8) {
          __m256 acc = _mm256_loadu_ps(imp + j);
          const float* src = raw_x + (j - L.raw_from);
          for (int i = 0; i < a.n_new; ++i, src += row_step)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(src), _mm256_broadcast_ss(w + size_t(i) * nh)));
          _mm256_storeu_ps(imp + j, acc);
        }
        for (; j < hi; ++j) {
          float acc = imp[j];
          const float* src = raw_x + (j - L.raw_from);
          for (int i = 0; i < a.n_new; ++i, src += row_step) acc += *src * w[size_t(i) * nh];
          imp[j] = acc;
        }
      }
      const int from = std::max(c0, common);  // the new tokens' columns: row i sees them up to its end
      for (int i = 0; i < a.n_new; ++i) {
        const int end = row_end(i);
        const float* raw = raw_x + size_t(i) * row_step;
        for (int b = L.BlockOf(from); b < L.n_blocks && from < end; ++b) {
          const int lo = std::max(from, L.BlockStart(b)), hi = std::min(end, L.BlockStart(b + 1));
          if (lo >= end) break;
          const float w = sc.part_w[L.Part(int(g), b, i * nh + x)];
          for (int j = lo; j < hi; ++j) imp[j] += raw[j - L.raw_from] * w;
        }
      }
    }
  }
}

}  // namespace

bool AwaitPrefixRows(RowArrivals* arrivals, bool by_block, int tasks, int threads) {
  if (!arrivals) return true;
  arrivals->SetReaders(by_block ? std::min(threads, tasks) : threads);
  return by_block || arrivals->WaitAll();
}

bool TileAttention(const TileAttentionArgs& a, TileScratch& sc, const TileParallelFor& parallel_for) {
  const int hd = a.head_dim, n_groups = int(a.groups.size());
  TileLayout L;
  L.n_keys = a.n_prefix + a.q_first + a.n_new;
  L.n_blocks = TileBlocks(L.n_keys);
  bool any_importance = false;
  for (const TileGroup& grp : a.groups) {
    L.rows = std::max(L.rows, int(grp.heads.size()) * a.n_new);
    for (const TileHead& h : grp.heads) any_importance |= h.importance != nullptr;
  }
  if (n_groups == 0 || L.rows == 0) return a.prefix_arrivals ? a.prefix_arrivals->WaitAll() : true;
  // The queries, pre-scaled, rows (i, x) of each group adjacent.
  sc.q.Grow(size_t(n_groups) * L.rows * hd);
  for (int g = 0; g < n_groups; ++g) {
    const TileGroup& grp = a.groups[size_t(g)];
    const int nh = int(grp.heads.size());
    for (int i = 0; i < a.n_new; ++i)
      for (int x = 0; x < nh; ++x) {
        const float* src = a.q + int64_t(i) * a.ldq + int64_t(grp.heads[size_t(x)].head) * hd;
        float* dst = sc.q.data() + (size_t(g) * L.rows + size_t(i * nh + x)) * hd;
        for (int c = 0; c < hd; ++c) dst[c] = src[c] * a.scale;
      }
  }
  if (a.int4_code_scores && !a.out) {  // once per call, for every block of int4 records
    const size_t words = size_t(quant::CodeWords(hd));
    sc.q8.Grow(size_t(n_groups) * L.rows * 4 * words);
    sc.q8_scale.Grow(size_t(n_groups) * L.rows);
    sc.q8_sum.Grow(size_t(n_groups) * L.rows);
    for (int g = 0; g < n_groups; ++g) {
      const size_t first = size_t(g) * L.rows;
      quant::QuantizeQueriesForCodes(sc.q.data() + first * hd, int(a.groups[size_t(g)].heads.size()) * a.n_new, hd,
                                     sc.q8.data() + first * 4 * words, sc.q8_scale.data() + first,
                                     sc.q8_sum.data() + first);
    }
  }
  const size_t n_part = size_t(n_groups) * L.n_blocks * L.rows;
  sc.part_max.Grow(n_part);
  sc.part_sum.Grow(n_part);
  if (a.out) sc.part_acc.Grow(n_part * hd);
  L.raw_from = std::clamp(a.importance_from, 0, L.n_keys);
  if (any_importance) sc.raw.Grow(size_t(n_groups) * L.rows * size_t(L.n_keys - L.raw_from));
  sc.part_w.Grow(n_part);
  // Task t = b * n_groups + g: block by block, or, with the prefix still arriving, in the order
  // blocks complete. Each task writes only its own parts, so the order changes no bit.
  std::atomic<bool> missing{false};
  std::optional<ArrivalOrder> order;
  if (a.prefix_arrivals) order.emplace(a, L, n_groups);
  parallel_for(int64_t(n_groups) * L.n_blocks, [&](int64_t t) {
    if (missing.load(std::memory_order_relaxed)) return;  // the call fails: no task left is worth its wait
    if (order && (t = order->Next()) < 0) return;         // (never: one task per call)
    if (!TileBlock(a, L, sc, int(t % n_groups), int(t / n_groups))) missing.store(true, std::memory_order_relaxed);
  });
  if (missing.load()) return false;
  MergeRows(a, L, sc);
  if (!any_importance) return true;
  const int n_cols = a.importance_include_new ? L.n_keys : a.n_prefix;
  const int from = std::min(L.raw_from, n_cols);
  constexpr int kChunk = 512;
  parallel_for((n_cols - from + kChunk - 1) / kChunk, [&](int64_t c) {
    ImportanceColumns(a, L, sc, from + int(c) * kChunk, std::min(n_cols, from + int(c + 1) * kChunk));
  });
  return true;
}

}  // namespace impress
