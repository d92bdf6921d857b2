// The int8 GEMM's AVX-512 VNNI kernel: 4 activation rows x one packed panel of 32 weight rows
// (gemm.h). This file alone is compiled with the AVX-512 instruction sets (CMakeLists.txt); it
// runs only after CPUID said the CPU has them (GemmRows checks the path).
// Registers: 8 int32 block sums + 8 fp32 accumulators + 2 weight vectors + scales, under 32.
// GCC 12's AVX-512 intrinsics warn about their own self-initialised temporaries once inlined (a
// compiler bug fixed in GCC 13); nothing of ours is uninitialised.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/quant/gemm-tail-inl.h"
#include "engine/quant/gemm.h"

namespace impress::quant::gemm_internal {
namespace {

inline __m512i Dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Rows [i0, i0 + R) of x times the panel into out (row i at out + i * ldy, lanes < n_valid);
// H spans of 32 / H elements per group, each with its own scales (p.halves == H).
template <int R, int H>
void PanelRows(const PackedPanel& p, const GemmActivations& x, int i0, int n_valid, float beta, float* out,
               int64_t ldy) {
  const ActBlock32* a[R];
  const float* ds[R];
  for (int r = 0; r < R; ++r) {
    a[r] = x.Row(i0 + r);
    ds[r] = H == 1 ? x.DSum(i0 + r) : x.DSum16(i0 + r);
  }
  __m512 f[R][2];
  for (int r = 0; r < R; ++r) f[r][0] = f[r][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < p.n_groups; ++g) {
    const uint8_t* wp = p.data + g * 1024;
    for (int h = 0; h < H; ++h) {
      __m512i s[R][2];
      for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm512_setzero_si512();
      for (int q = h * 8 / H; q < (h + 1) * 8 / H; ++q) {
        const __m512i w0 = _mm512_loadu_si512(wp + q * 128);
        const __m512i w1 = _mm512_loadu_si512(wp + q * 128 + 64);
        for (int r = 0; r < R; ++r) {
          const __m512i av = Dword(a[r][g].qs + 4 * q);
          s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, av);
          s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, av);
        }
      }
      const float* sc = p.scale + (g * H + h) * 64;
      const __m512 dw0 = _mm512_loadu_ps(sc), dw1 = _mm512_loadu_ps(sc + 16);
      const __m512 mw0 = _mm512_loadu_ps(sc + 32), mw1 = _mm512_loadu_ps(sc + 48);
      for (int r = 0; r < R; ++r) {
        const __m512 da = _mm512_set1_ps(a[r][g].d), dsum = _mm512_set1_ps(ds[r][g * H + h]);
        f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][0]), _mm512_mul_ps(dw0, da), f[r][0]);
        f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][1]), _mm512_mul_ps(dw1, da), f[r][1]);
        f[r][0] = _mm512_fmadd_ps(mw0, dsum, f[r][0]);
        f[r][1] = _mm512_fmadd_ps(mw1, dsum, f[r][1]);
      }
    }
  }
  const __mmask16 m0 = n_valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << n_valid) - 1);
  const __mmask16 m1 = n_valid >= 32 ? __mmask16(0xffff) : n_valid <= 16 ? 0 : __mmask16((1u << (n_valid - 16)) - 1);
  const __m512 vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r) {
    float* y = out + int64_t(i0 + r) * ldy;
    __m512 v0 = f[r][0], v1 = f[r][1];
    if (beta != 0.0f) {
      v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, y), v0);
      v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, y + 16), v1);
    }
    _mm512_mask_storeu_ps(y, m0, v0);
    _mm512_mask_storeu_ps(y + 16, m1, v1);
  }
}

// Every row of x: groups of 4, then the rest.
template <int H>
void RowGroups(const PackedPanel& p, const GemmActivations& x, int n_valid, float beta, float* out, int64_t ldy) {
  int i = 0;
  for (; i + 4 <= x.m(); i += 4) PanelRows<4, H>(p, x, i, n_valid, beta, out, ldy);
  switch (x.m() - i) {
    case 3: PanelRows<3, H>(p, x, i, n_valid, beta, out, ldy); break;
    case 2: PanelRows<2, H>(p, x, i, n_valid, beta, out, ldy); break;
    case 1: PanelRows<1, H>(p, x, i, n_valid, beta, out, ldy); break;
    default: break;
  }
}

// The small-batch kernel: weight rows [r0, r0 + RW) of a decoded strip times lane groups
// [v0, v0 + V) of x (lanes = activation rows) over groups [g0, g1), H spans per group, into
// out[r * ldo + 16 v + l] (adding onto what it holds when `more`: the same fp32 sequence).
// Registers: RW * V int32 block sums + RW * V fp32 accumulators + V activation vectors, <= 26.
template <int RW, int V, int H>
void StripTile(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, int r0, int v0, float* out,
               int64_t ldo) {
  const int64_t nb = w.k / kQK32, n_spans = nb * H;
  const float* lane_ds = H == 1 ? x.LaneDSum() : x.LaneDSum16();
  __m512 f[RW][V];
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < V; ++v)
      f[r][v] = c.more ? _mm512_loadu_ps(out + (r0 + r) * ldo + 16 * (v0 + v)) : _mm512_setzero_ps();
  for (int64_t g = c.g0; g < c.g1; ++g) {
    FetchSlice(c, g);
    for (int h = 0; h < H; ++h) {
      __m512i s[RW][V];
      for (int r = 0; r < RW; ++r)
        for (int v = 0; v < V; ++v) s[r][v] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int q = h * 8 / H; q < (h + 1) * 8 / H; ++q) {
        __m512i av[V];
        for (int v = 0; v < V; ++v) av[v] = _mm512_loadu_si512(x.LaneQs() + (((v0 + v) * nb + g) * 8 + q) * 64);
        for (int r = 0; r < RW; ++r) {
          // A memory broadcast: a load, no shuffle.
          const __m512i wv = _mm512_broadcastd_epi32(_mm_loadu_si32(w.u + (r0 + r) * w.k + 32 * g + 4 * q));
          for (int v = 0; v < V; ++v) s[r][v] = _mm512_dpbusd_epi32(s[r][v], wv, av[v]);
        }
      }
      const int64_t span = g * H + h;
      for (int v = 0; v < V; ++v) {
        const __m512 da = _mm512_loadu_ps(x.LaneD() + ((v0 + v) * nb + g) * 16);
        const __m512 ds = _mm512_loadu_ps(lane_ds + ((v0 + v) * n_spans + span) * 16);
        for (int r = 0; r < RW; ++r) {
          const __m512 dw = _mm512_set1_ps(w.dw[(r0 + r) * n_spans + span]);
          const __m512 mw = _mm512_set1_ps(w.mw[(r0 + r) * n_spans + span]);
          f[r][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][v]), _mm512_mul_ps(dw, da), f[r][v]);
          f[r][v] = _mm512_fmadd_ps(mw, ds, f[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + (r0 + r) * ldo + 16 * (v0 + v), f[r][v]);
}

// A last lane group that holds 8 activation rows or fewer, two weight rows to a vector: lanes
// 0..7 are rows 0..7 of lane group vt against weight row r, lanes 8..15 the same rows against
// row r + 1, so each vpdpbusd does 16 useful lanes where a whole-group tile would do 8 or fewer.
// Each lane's block sums and folds are the same operations as StripTile's (bit for bit). All 8
// strip rows, 4 pairs; out as StripTile's (lanes 8..15 of group vt left alone).
template <int H>
void PairTailTile(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, int vt, float* out,
                  int64_t ldo) {
  constexpr int kPairs = kStripRows / 2;
  constexpr __mmask16 kHigh = 0xff00;
  const int64_t nb = w.k / kQK32, n_spans = nb * H;
  const float* lane_ds = H == 1 ? x.LaneDSum() : x.LaneDSum16();
  auto row_out = [&](int r) { return out + r * ldo + 16 * int64_t(vt); };
  __m512 f[kPairs];
  for (int p = 0; p < kPairs; ++p)
    f[p] = c.more ? _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(row_out(2 * p))),
                                       _mm256_loadu_ps(row_out(2 * p + 1)), 1)
                  : _mm512_setzero_ps();
  for (int64_t g = c.g0; g < c.g1; ++g) {
    FetchSlice(c, g);
    for (int h = 0; h < H; ++h) {
      __m512i s[kPairs];
      for (int p = 0; p < kPairs; ++p) s[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int q = h * 8 / H; q < (h + 1) * 8 / H; ++q) {
        const __m512i a = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.LaneQs() + ((vt * nb + g) * 8 + q) * 64)));
        for (int p = 0; p < kPairs; ++p) {
          int32_t w0, w1;
          std::memcpy(&w0, w.u + (2 * p) * w.k + 32 * g + 4 * q, 4);
          std::memcpy(&w1, w.u + (2 * p + 1) * w.k + 32 * g + 4 * q, 4);
          const __m512i wv = _mm512_mask_set1_epi32(_mm512_set1_epi32(w0), kHigh, w1);
          s[p] = _mm512_dpbusd_epi32(s[p], wv, a);
        }
      }
      const int64_t span = g * H + h;
      const __m512 da = _mm512_broadcast_f32x8(_mm256_loadu_ps(x.LaneD() + (vt * nb + g) * 16));
      const __m512 ds = _mm512_broadcast_f32x8(_mm256_loadu_ps(lane_ds + (vt * n_spans + span) * 16));
      for (int p = 0; p < kPairs; ++p) {
        const int64_t s0 = (2 * p) * n_spans + span, s1 = s0 + n_spans;
        const __m512 dw = _mm512_mask_mov_ps(_mm512_set1_ps(w.dw[s0]), kHigh, _mm512_set1_ps(w.dw[s1]));
        const __m512 mw = _mm512_mask_mov_ps(_mm512_set1_ps(w.mw[s0]), kHigh, _mm512_set1_ps(w.mw[s1]));
        f[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[p]), _mm512_mul_ps(dw, da), f[p]);
        f[p] = _mm512_fmadd_ps(mw, ds, f[p]);
      }
    }
  }
  for (int p = 0; p < kPairs; ++p) {
    _mm256_storeu_ps(row_out(2 * p), _mm512_castps512_ps256(f[p]));
    _mm256_storeu_ps(row_out(2 * p + 1), _mm512_extractf32x8_ps(f[p], 1));
  }
}

// A last lane group of T <= 4 activation rows, the strip's weight rows as lanes: lanes 2r and
// 2r + 1 hold quads 2p and 2p + 1 of weight row r (the group's 8-byte pairs of the 8 rows,
// transposed once per group with three rounds of vpermt2q), and each tail row's own 8 bytes of
// that pair are broadcast from its activation block, so one vpdpbusd covers two quads of all 8
// weight rows for one activation row. A row's two lanes add up to StripTile's block sum exactly;
// the folds are its operations per (row, weight row), bit for bit. Lanes T..15 of group vt are
// left alone.
template <int H, int T>
void WeightLaneTailTile(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, int vt, float* out,
                        int64_t ldo) {
  static_assert(kStripRows == 8 && T >= 1 && T <= 4);
  const int64_t nb = w.k / kQK32, n_spans = nb * H;
  const float* lane_ds = H == 1 ? x.LaneDSum() : x.LaneDSum16();
  const __m256i row_at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(ldo)));
  const __m256i span_at =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(n_spans)));
  // Qword indices of the transpose's three rounds (0..7: the first operand, 8..15: the second).
  const __m512i mix_rows = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i mix_lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11),
                mix_hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  const __m512i take_lo = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11),
                take_hi = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
  const ActBlock32* a[T];
  for (int i = 0; i < T; ++i) a[i] = x.Row(16 * vt + i);
  __m256 f[T];
  for (int i = 0; i < T; ++i)
    f[i] = c.more ? _mm256_i32gather_ps(out + 16 * int64_t(vt) + i, row_at, 4) : _mm256_setzero_ps();
  for (int64_t g = c.g0; g < c.g1; ++g) {
    FetchSlice(c, g);
    __m512i rows[8];  // row r's 32 bytes of the group in the low half
    for (int r = 0; r < 8; ++r)
      rows[r] = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.u + r * w.k + 32 * g)));
    __m512i two[4], four[4], wp[4];  // two[j]: rows 2j, 2j + 1 by pairs; wp[p]: pair p of rows 0..7
    for (int j = 0; j < 4; ++j) two[j] = _mm512_permutex2var_epi64(rows[2 * j], mix_rows, rows[2 * j + 1]);
    for (int j = 0; j < 2; ++j) {
      four[2 * j] = _mm512_permutex2var_epi64(two[2 * j], mix_lo, two[2 * j + 1]);      // pairs 0, 1
      four[2 * j + 1] = _mm512_permutex2var_epi64(two[2 * j], mix_hi, two[2 * j + 1]);  // pairs 2, 3
    }
    wp[0] = _mm512_permutex2var_epi64(four[0], take_lo, four[2]);
    wp[1] = _mm512_permutex2var_epi64(four[0], take_hi, four[2]);
    wp[2] = _mm512_permutex2var_epi64(four[1], take_lo, four[3]);
    wp[3] = _mm512_permutex2var_epi64(four[1], take_hi, four[3]);
    for (int h = 0; h < H; ++h) {
      __m512i s[T];
      for (int i = 0; i < T; ++i) s[i] = _mm512_setzero_si512();
      for (int p = h * 4 / H; p < (h + 1) * 4 / H; ++p) {
        for (int i = 0; i < T; ++i) {
          int64_t pair;
          std::memcpy(&pair, a[i][g].qs + 8 * p, 8);
          s[i] = _mm512_dpbusd_epi32(s[i], wp[p], _mm512_set1_epi64(pair));
        }
      }
      const int64_t span = g * H + h;
      const __m256 dw = _mm256_i32gather_ps(w.dw + span, span_at, 4), mw = _mm256_i32gather_ps(w.mw + span, span_at, 4);
      for (int i = 0; i < T; ++i) {
        const __m256i sum = _mm512_cvtepi64_epi32(_mm512_add_epi32(s[i], _mm512_srli_epi64(s[i], 32)));
        const __m256 da = _mm256_set1_ps(x.LaneD()[(vt * nb + g) * 16 + i]);
        const __m256 ds = _mm256_set1_ps(lane_ds[(vt * n_spans + span) * 16 + i]);
        f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, da), f[i]);
        f[i] = _mm256_fmadd_ps(mw, ds, f[i]);
      }
    }
  }
  for (int i = 0; i < T; ++i) _mm256_i32scatter_ps(out + 16 * int64_t(vt) + i, row_at, f[i], 4);
}

// The whole strip against every lane group, in tiles that fit the registers: pairs of lane
// groups against half the strip's rows, then a last lane group against all 8 rows: its rows
// against the weight rows as lanes when it holds 4 or fewer (a 17-row question), two weight rows
// to a vector when it holds 5 to 8. (At 64 rows
// 4 x 2 tiles ran 1.45x faster than 2 x 4 ones, on Q4_K and Q6_K shapes of a 1.5B model; a
// 256-bit tile for the short last group saved nothing, as vpdpbusd on 256 bits costs what it does
// on 512 on a Xeon.)
template <int H>
void StripTiles(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo) {
  static_assert(kStripRows == 8);
  StripChunk later = c;  // the first tile alone prefetches
  later.fetch_lines = 0;
  const int n = x.n_lane_groups();
  const bool short_tail = n > 0 && x.m() - 16 * (n - 1) <= 8;
  const int full = short_tail ? n - 1 : n;
  int v = 0;
  for (; v + 2 <= full; v += 2)
    for (int r = 0; r < 8; r += 4) StripTile<4, 2, H>(w, x, v + r == 0 ? c : later, r, v, out, ldo);
  if (v < full) {
    StripTile<8, 1, H>(w, x, v == 0 ? c : later, 0, v, out, ldo);
    ++v;
  }
  if (!short_tail) return;
  const StripChunk& tc = v == 0 ? c : later;
  if (!ForTailRows(x.m() - 16 * v, [&]<int T>() { WeightLaneTailTile<H, T>(w, x, tc, v, out, ldo); }))
    PairTailTile<H>(w, x, tc, v, out, ldo);
}

}  // namespace

void GemmStripAvx512(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo) {
  if (w.halves == 2) {
    StripTiles<2>(w, x, c, out, ldo);
  } else {
    StripTiles<1>(w, x, c, out, ldo);
  }
}

bool PackPanelAvx512(WeightType type, const uint8_t* rows, int64_t row_bytes, int n_valid, int64_t n_groups,
                     uint8_t* data, float* scale) {
  const bool q4_0 = type == WeightType::kQ4_0, q4_1 = type == WeightType::kQ4_1, q8_0 = type == WeightType::kQ8_0;
  if (!(q4_0 || q4_1 || q8_0) || row_bytes * kGemmPanel > (int64_t(1) << 31)) return false;
  const int64_t block = q4_0 ? sizeof(BlockQ4_0) : q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0);
  const int qs = q4_1 ? 4 : 2;  // offset of the quants in a block
  const __m512i nib = _mm512_set1_epi8(15), flip = _mm512_set1_epi8(int8_t(0x80));
  for (int part = 0; part < 2; ++part) {
    // Lanes: the 16 rows of this half panel; padding rows read nothing and pack as zero.
    const int valid = n_valid - 16 * part;
    const __mmask16 m = valid >= 16 ? __mmask16(0xffff) : valid <= 0 ? 0 : __mmask16((1u << valid) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(int32_t(row_bytes)));
    const uint8_t* base = rows + 16 * part * row_bytes;
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* b = base + g * block;
      uint8_t* dg = data + g * 1024 + 64 * part;
      if (q8_0) {
        for (int q = 0; q < 8; ++q) {
          const __m512i v = _mm512_mask_i32gather_epi32(zero, m, idx, b + qs + 4 * q, 1);
          _mm512_storeu_si512(dg + q * 128, _mm512_maskz_mov_epi32(m, _mm512_xor_si512(v, flip)));
        }
      } else {
        for (int q = 0; q < 4; ++q) {
          const __m512i v = _mm512_mask_i32gather_epi32(zero, m, idx, b + qs + 4 * q, 1);
          _mm512_storeu_si512(dg + q * 128, _mm512_and_si512(v, nib));
          _mm512_storeu_si512(dg + (q + 4) * 128, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
        }
      }
      // d (and m) as the scalar decoder converts them: exact fp16 -> fp32, then the same multiply.
      const __m512i hdr = _mm512_mask_i32gather_epi32(zero, m, idx, b, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hdr));
      const __m512 mw = q4_1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hdr, 16)))
                             : _mm512_mul_ps(_mm512_set1_ps(q4_0 ? -8.0f : -128.0f), d);
      _mm512_storeu_ps(scale + g * 64 + 16 * part, d);
      _mm512_storeu_ps(scale + g * 64 + 32 + 16 * part, mw);
    }
  }
  return true;
}

void QuantizeRow32Avx512(const float* x, int64_t n, ActBlock32* out, float* dsum, float* dsum16) {
  const __m512 sign = _mm512_set1_ps(-0.0f), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
    ActBlock32& o = out[b];
    if (amax == 0.0f) {
      o.d = 0.0f;
      o.sum = 0;
      std::memset(o.qs, 0, sizeof(o.qs));
      dsum[b] = dsum16[2 * b] = dsum16[2 * b + 1] = 0.0f;
      continue;
    }
    // As QuantizeOne: round-to-nearest-even of x * (127 / amax), clamped.
    const __m512 iscale = _mm512_set1_ps(127.0f / amax);
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 q0 = _mm512_roundscale_ps(_mm512_mul_ps(v0, iscale), kNearest);
    const __m512 q1 = _mm512_roundscale_ps(_mm512_mul_ps(v1, iscale), kNearest);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(q0, lo), hi));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(q1, lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs + 16), _mm512_cvtepi32_epi8(i1));
    o.d = amax / 127.0f;
    const int32_t sum0 = _mm512_reduce_add_epi32(i0), sum1 = _mm512_reduce_add_epi32(i1);
    o.sum = sum0 + sum1;
    dsum[b] = o.d * float(o.sum);
    dsum16[2 * b] = o.d * float(sum0);
    dsum16[2 * b + 1] = o.d * float(sum1);
  }
}

void GemmPanelAvx512(const PackedPanel& p, const GemmActivations& x, int n_valid, float beta, float* out, int64_t ldy) {
  if (p.halves == 2) {
    RowGroups<2>(p, x, n_valid, beta, out, ldy);
  } else {
    RowGroups<1>(p, x, n_valid, beta, out, ldy);
  }
}

}  // namespace impress::quant::gemm_internal
