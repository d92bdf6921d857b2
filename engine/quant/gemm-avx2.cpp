// The int8 GEMM's AVX2 kernel (gemm.h): 2 activation rows x 16 weight rows of a packed panel at a
// time. AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by signed bytes into saturating
// 16-bit pair sums and vpmaddwd adds those pairs into 32-bit lanes. With weights below 64 (every
// type but Q8_0, whose shifted bytes reach 255) a pair sum is at most 2 * 63 * 127 < 32767, so
// nothing saturates and the lanes equal vpdpbusd's exactly. Compiled with the project's baseline
// (x86-64-v3: AVX2 + FMA).
#include <immintrin.h>

#include <cstring>

#include "engine/quant/gemm.h"

namespace impress::quant::gemm_internal {
namespace {

inline __m256i Dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Lanes of the first 8 of `n` valid rows as a maskload/maskstore mask.
inline __m256i LaneMask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

// Rows [i0, i0 + R) of x times panel rows [16 * part, 16 * part + 16) into out.
template <int R, int H>
void PanelRows(const PackedPanel& p, const GemmActivations& x, int i0, int part, int n_valid, float beta, float* out,
               int64_t ldy) {
  const ActBlock32* a[R];
  const float* ds[R];
  for (int r = 0; r < R; ++r) {
    a[r] = x.Row(i0 + r);
    ds[r] = H == 1 ? x.DSum(i0 + r) : x.DSum16(i0 + r);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f[R][2];
  for (int r = 0; r < R; ++r) f[r][0] = f[r][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < p.n_groups; ++g) {
    const uint8_t* wp = p.data + g * 1024 + 64 * part;
    for (int h = 0; h < H; ++h) {
      __m256i s[R][2];
      for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm256_setzero_si256();
      for (int q = h * 8 / H; q < (h + 1) * 8 / H; ++q) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + q * 128));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + q * 128 + 32));
        for (int r = 0; r < R; ++r) {
          const __m256i av = Dword(a[r][g].qs + 4 * q);
          s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, av), ones));
          s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, av), ones));
        }
      }
      const float* sc = p.scale + (g * H + h) * 64 + 16 * part;
      const __m256 dw0 = _mm256_loadu_ps(sc), dw1 = _mm256_loadu_ps(sc + 8);
      const __m256 mw0 = _mm256_loadu_ps(sc + 32), mw1 = _mm256_loadu_ps(sc + 40);
      for (int r = 0; r < R; ++r) {
        const __m256 da = _mm256_set1_ps(a[r][g].d), dsum = _mm256_set1_ps(ds[r][g * H + h]);
        f[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][0]), _mm256_mul_ps(dw0, da), f[r][0]);
        f[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][1]), _mm256_mul_ps(dw1, da), f[r][1]);
        f[r][0] = _mm256_fmadd_ps(mw0, dsum, f[r][0]);
        f[r][1] = _mm256_fmadd_ps(mw1, dsum, f[r][1]);
      }
    }
  }
  const int valid = n_valid - 16 * part;
  const __m256i m0 = LaneMask(valid), m1 = LaneMask(valid - 8);
  const __m256 vb = _mm256_set1_ps(beta);
  for (int r = 0; r < R; ++r) {
    float* y = out + int64_t(i0 + r) * ldy + 16 * part;
    __m256 v0 = f[r][0], v1 = f[r][1];
    if (beta != 0.0f) {
      v0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(y, m0), v0);
      v1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(y + 8, m1), v1);
    }
    _mm256_maskstore_ps(y, m0, v0);
    _mm256_maskstore_ps(y + 8, m1, v1);
  }
}

template <int H>
void RowPairs(const PackedPanel& p, const GemmActivations& x, int n_valid, float beta, float* out, int64_t ldy) {
  for (int part = 0; part < 2 && 16 * part < n_valid; ++part) {
    int i = 0;
    for (; i + 2 <= x.m(); i += 2) PanelRows<2, H>(p, x, i, part, n_valid, beta, out, ldy);
    if (i < x.m()) PanelRows<1, H>(p, x, i, part, n_valid, beta, out, ldy);
  }
}

// The small-batch kernel: weight rows [r0, r0 + 2) of a decoded strip times 8-row lane vectors
// [v0, v0 + 2) of x (lanes = activation rows; vector v is half v % 2 of lane group v / 2), H
// spans per group; out[r * ldo + 8 v + l]. 12 of the 16 registers.
template <int H>
void StripTile(const DecodedStrip& w, const GemmActivations& x, int r0, int v0, float* out, int64_t ldo) {
  constexpr int RW = 2, V = 2;
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
    for (int v = 0; v < V; ++v) f[r][v] = _mm256_setzero_ps();
  for (int64_t g = 0; g < nb; ++g) {
    for (int h = 0; h < H; ++h) {
      __m256i s[RW][V];
      for (int r = 0; r < RW; ++r)
        for (int v = 0; v < V; ++v) s[r][v] = _mm256_setzero_si256();
      for (int q = h * 8 / H; q < (h + 1) * 8 / H; ++q) {
        __m256i av[V];
        for (int v = 0; v < V; ++v)
          av[v] = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(x.LaneQs() + ((group[v] * nb + g) * 8 + q) * 64 + 4 * half[v]));
        for (int r = 0; r < RW; ++r) {
          int32_t quad;
          std::memcpy(&quad, w.u + (r0 + r) * w.k + 32 * g + 4 * q, 4);
          const __m256i wv = _mm256_set1_epi32(quad);
          for (int v = 0; v < V; ++v)
            s[r][v] = _mm256_add_epi32(s[r][v], _mm256_madd_epi16(_mm256_maddubs_epi16(wv, av[v]), ones));
        }
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

template <int H>
void StripTiles(const DecodedStrip& w, const GemmActivations& x, float* out, int64_t ldo) {
  static_assert(kStripRows % 2 == 0);
  for (int v = 0; v < 2 * x.n_lane_groups(); v += 2)
    for (int r = 0; r < kStripRows; r += 2) StripTile<H>(w, x, r, v, out, ldo);
}

}  // namespace

void GemmStripAvx2(const DecodedStrip& w, const GemmActivations& x, float* out, int64_t ldo) {
  if (w.halves == 2) {
    StripTiles<2>(w, x, out, ldo);
  } else {
    StripTiles<1>(w, x, out, ldo);
  }
}

void GemmPanelAvx2(const PackedPanel& p, const GemmActivations& x, int n_valid, float beta, float* out, int64_t ldy) {
  if (p.halves == 2) {
    RowPairs<2>(p, x, n_valid, beta, out, ldy);
  } else {
    RowPairs<1>(p, x, n_valid, beta, out, ldy);
  }
}

}  // namespace impress::quant::gemm_internal
