// The int8 GEMM's AVX2 kernel (gemm.h): strips of decoded weight rows against interleaved
// activation rows, at every batch size. AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by
// signed bytes into saturating 16-bit pair sums and vpmaddwd adds those pairs into 32-bit lanes.
// With weights below 2^b (b = 4, 5, 6: every type but Q8_0, whose shifted bytes reach 255) a pair
// sum is at most 2 * (2^b - 1) * 128 < 2^15 in magnitude, so nothing saturates; and 2^(7 - b)
// quads' pair sums (8 for 4-bit weights, 4 for 5-bit, 2 for 6-bit) still fit 16 bits, so they
// are added with vpaddw and widened by one vpmaddwd: the 32-bit lanes are vpdpbusd's exactly, at
// a fraction of the widening instructions (which share the multiplier ports with vpmaddubsw).
// Compiled with the project's baseline (x86-64-v3: AVX2 + FMA).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/quant/gemm-tail-inl.h"
#include "engine/quant/gemm.h"

namespace impress::quant::gemm_internal {
namespace {

// Quads per 16-bit run for weights of `bits` bits (see the top of the file), at most the quads of
// a span (8 / halves).
constexpr int RunQuads(int bits, int halves) { return std::min(8 / halves, 1 << (7 - bits)); }

// The small-batch kernel: weight rows [r0, r0 + RW) of a decoded strip times 8-row lane vectors
// [v0, v0 + V) of x (lanes = activation rows; vector v is half v % 2 of lane group v / 2) over
// groups [c.g0, c.g1), H spans per group, P quads per 16-bit run; out[r * ldo + 8 v + l] (added
// onto when c.more). RW x V is 2 x 2 or 4 x 1; the activations are vpmaddubsw's memory operands.
template <int RW, int V, int H, int P>
void StripTile(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, int r0, int v0, float* out,
               int64_t ldo) {
  constexpr int kSpanQuads = 8 / H;
  static_assert(kSpanQuads % P == 0);
  const int64_t nb = w.k / kQK32, n_spans = nb * H;
  const float* lane_ds = H == 1 ? x.LaneDSum() : x.LaneDSum16();
  const __m256i ones = _mm256_set1_epi16(1);
  // Offset of vector v's lanes in a lane group's 16 (x 4 bytes for the quads).
  int64_t group[V], half[V];
  for (int v = 0; v < V; ++v) {
    group[v] = (v0 + v) / 2;
    half[v] = 8 * ((v0 + v) % 2);
  }
  __m256 f[RW][V];
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < V; ++v)
      f[r][v] = c.more ? _mm256_loadu_ps(out + (r0 + r) * ldo + 8 * (v0 + v)) : _mm256_setzero_ps();
  for (int64_t g = c.g0; g < c.g1; ++g) {
    FetchSlice(c, g);
    // The 16-bit pair sums of quads [q0, q0 + P) into p, added in order: GCC would otherwise
    // regroup the adds as a tree over all the run's products, holding them at once and spilling
    // them to the stack (the empty asm keeps each sum where it is).
    auto run = [&](int q0, __m256i(&p)[RW][V]) {
#pragma GCC unroll 8
      for (int q = q0; q < q0 + P; ++q)
        for (int r = 0; r < RW; ++r) {
          const __m256i wv = _mm256_broadcastd_epi32(_mm_loadu_si32(w.u + (r0 + r) * w.k + 32 * g + 4 * q));
          for (int v = 0; v < V; ++v) {
            const __m256i t =
                _mm256_maddubs_epi16(wv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                             x.LaneQs() + ((group[v] * nb + g) * 8 + q) * 64 + 4 * half[v])));
            p[r][v] = q == q0 ? t : _mm256_add_epi16(p[r][v], t);
            if constexpr (P > 2) asm("" : "+x"(p[r][v]));
          }
        }
    };
    for (int h = 0; h < H; ++h) {
      __m256i s[RW][V], p[RW][V];  // the span's 32-bit sums, a run's 16-bit ones
      run(h * kSpanQuads, p);
      for (int r = 0; r < RW; ++r)
        for (int v = 0; v < V; ++v) s[r][v] = _mm256_madd_epi16(p[r][v], ones);
#pragma GCC unroll 8
      for (int q0 = h * kSpanQuads + P; q0 < (h + 1) * kSpanQuads; q0 += P) {
        run(q0, p);
        for (int r = 0; r < RW; ++r)
          for (int v = 0; v < V; ++v) s[r][v] = _mm256_add_epi32(s[r][v], _mm256_madd_epi16(p[r][v], ones));
      }
      const int64_t span = g * H + h;
      for (int v = 0; v < V; ++v) {
        const __m256 da = _mm256_loadu_ps(x.LaneD() + (group[v] * nb + g) * 16 + half[v]);
        const __m256 ds = _mm256_loadu_ps(lane_ds + (group[v] * n_spans + span) * 16 + half[v]);
        for (int r = 0; r < RW; ++r) {
          const __m256 dw = _mm256_set1_ps(w.dw[(r0 + r) * n_spans + span]);
          const __m256 mw = _mm256_set1_ps(w.mw[(r0 + r) * n_spans + span]);
          f[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][v]), _mm256_mul_ps(dw, da), f[r][v]);
          f[r][v] = _mm256_fmadd_ps(mw, ds, f[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < RW; ++r)
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + (r0 + r) * ldo + 8 * (v0 + v), f[r][v]);
}

// A last 8-row vector that holds T <= 4 activation rows, the strip's weight rows as lanes: lane r
// is weight row r at quad q (the group's quads transposed once in registers), each tail row's quad
// broadcast to match, so one vpmaddubsw + vpmaddwd covers a quad of all 8 weight rows for one
// activation row. The int32 sums are StripTile's exactly; the folds are its operations per (row,
// weight row), bit for bit. Lanes T..7 of vector v are left alone.
template <int H, int P, int T>
void WeightLaneTailTile(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, int v, float* out,
                        int64_t ldo) {
  static_assert(kStripRows == 8 && T >= 1 && T <= 4);
  constexpr int kSpanQuads = 8 / H;
  const int64_t nb = w.k / kQK32, n_spans = nb * H, group = v / 2, half = 8 * (v % 2);
  const float* lane_ds = H == 1 ? x.LaneDSum() : x.LaneDSum16();
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i row_at = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(int(ldo)));
  const __m256i span_at = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(int(n_spans)));
  float* col = out + 8 * int64_t(v);  // column i: activation row 8 v + i
  __m256 f[T];
  for (int i = 0; i < T; ++i) f[i] = c.more ? _mm256_i32gather_ps(col + i, row_at, 4) : _mm256_setzero_ps();
  for (int64_t g = c.g0; g < c.g1; ++g) {
    FetchSlice(c, g);
    __m256i wq[8];  // wq[q]: quad q of weight rows 0..7
    StripQuadsByRow(w.u, w.k, g, wq);
    const int8_t* lq = x.LaneQs() + (group * nb + g) * 8 * 64 + 4 * half;
    for (int h = 0; h < H; ++h) {
      __m256i s[T], p[T];  // as StripTile's
      auto run = [&](int q0) {
        for (int q = q0; q < q0 + P; ++q)
          for (int i = 0; i < T; ++i) {
            const __m256i t = _mm256_maddubs_epi16(wq[q], _mm256_broadcastd_epi32(_mm_loadu_si32(lq + q * 64 + 4 * i)));
            p[i] = q == q0 ? t : _mm256_add_epi16(p[i], t);
            if constexpr (P > 2) asm("" : "+x"(p[i]));
          }
      };
      run(h * kSpanQuads);
      for (int i = 0; i < T; ++i) s[i] = _mm256_madd_epi16(p[i], ones);
      for (int q0 = h * kSpanQuads + P; q0 < (h + 1) * kSpanQuads; q0 += P) {
        run(q0);
        for (int i = 0; i < T; ++i) s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(p[i], ones));
      }
      const int64_t span = g * H + h;
      const __m256 dw = _mm256_i32gather_ps(w.dw + span, span_at, 4), mw = _mm256_i32gather_ps(w.mw + span, span_at, 4);
      for (int i = 0; i < T; ++i) {
        const __m256 da = _mm256_set1_ps(x.LaneD()[(group * nb + g) * 16 + half + i]);
        const __m256 ds = _mm256_set1_ps(lane_ds[(group * n_spans + span) * 16 + half + i]);
        f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(dw, da), f[i]);
        f[i] = _mm256_fmadd_ps(mw, ds, f[i]);
      }
    }
  }
  for (int i = 0; i < T; ++i) {
    alignas(32) float y[8];
    _mm256_store_ps(y, f[i]);
    for (int r = 0; r < kStripRows; ++r) col[r * ldo + i] = y[r];
  }
}

// Pairs of 8-row vectors, then a last vector alone (a 17-row question pays for 24 rows, not 32),
// the weight rows as lanes when it holds 4 rows or fewer.
template <int H, int P>
void StripTiles(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo) {
  static_assert(kStripRows % 4 == 0);
  const int n_vectors = (x.m() + 7) / 8;
  StripChunk later = c;  // the first tile alone prefetches
  later.fetch_lines = 0;
  int v = 0;
  for (; v + 2 <= n_vectors; v += 2)
    for (int r = 0; r < kStripRows; r += 2) StripTile<2, 2, H, P>(w, x, v + r == 0 ? c : later, r, v, out, ldo);
  if (v == n_vectors) return;
  const StripChunk& tc = v == 0 ? c : later;
  if (!ForTailRows(x.m() - 8 * v, [&]<int T>() { WeightLaneTailTile<H, P, T>(w, x, tc, v, out, ldo); }))
    for (int r = 0; r < kStripRows; r += 4) StripTile<4, 1, H, P>(w, x, v + r == 0 ? c : later, r, v, out, ldo);
}

}  // namespace

void GemmStripAvx2(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo) {
  if (w.halves == 2) {  // Q6_K
    StripTiles<2, RunQuads(6, 2)>(w, x, c, out, ldo);
  } else if (w.bits == 5) {
    StripTiles<1, RunQuads(5, 1)>(w, x, c, out, ldo);
  } else {  // 4-bit types (Q8_0 never comes here: GemmSupports)
    StripTiles<1, RunQuads(4, 1)>(w, x, c, out, ldo);
  }
}

void StoreStripAvx2(const float* out, int64_t ldo, int m, int n_valid, float beta, float* y, int64_t ldy) {
  int i0 = 0;
  if (n_valid == kStripRows) {
    static_assert(kStripRows == 8);
    const __m256 vb = _mm256_set1_ps(beta);
    for (; i0 + 8 <= m; i0 += 8) {
      // Rows of 8 activation lanes per weight row, transposed to 8 weight rows per activation row.
      __m256 v[8], t[8];
      for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(out + r * ldo + i0);
      for (int r = 0; r < 8; r += 2) {
        t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
        t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
      }
      for (int r = 0; r < 8; r += 4) {
        v[r] = _mm256_shuffle_ps(t[r], t[r + 2], 0x44);
        v[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], 0xee);
        v[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0x44);
        v[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0xee);
      }
      // v[0..3]: lanes (0, 4) (1, 5) (2, 6) (3, 7) of rows 0..3 per 128-bit half; v[4..7] rows 4..7.
      for (int j = 0; j < 4; ++j) {
        t[j] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x20);
        t[j + 4] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x31);
      }
      for (int j = 0; j < 8; ++j) {
        float* yi = y + (i0 + j) * ldy;
        _mm256_storeu_ps(yi, beta == 0.0f ? t[j] : _mm256_fmadd_ps(vb, _mm256_loadu_ps(yi), t[j]));
      }
    }
  }
  for (int i = i0; i < m; ++i) {
    float* yi = y + i * ldy;
    for (int r = 0; r < n_valid; ++r) {
      const float acc = out[r * ldo + i];
      yi[r] = beta == 0.0f ? acc : std::fma(beta, yi[r], acc);
    }
  }
}

}  // namespace impress::quant::gemm_internal
