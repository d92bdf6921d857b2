// The attention tiles' register blocks, written once over a vector type and instantiated for
// AVX2 (tile-attention.cpp, eight floats) and AVX-512 (tile-kernels-avx512.cpp, sixteen): a
// block of query rows keeps its sums in registers while one or two vectors of keys (or values)
// are loaded per step and each row's value is broadcast, so the loads stay below the FMAs.
//
// Included only by those two files, each compiled for its instruction set; everything here is
// in an unnamed namespace so the two instantiations never meet at link time.
//
// Thread contract: pure functions of their arguments.
#pragma once

#include <immintrin.h>

namespace impress {
namespace {

struct Avx2Vec {
  using V = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kScoreRows = 6;  // 6 rows x 2 vectors + 2 keys + 1 broadcast <= 16 registers
  static constexpr int kValueRows = 6;  // 6 rows x 2 vectors + 2 values + 1 broadcast
  static constexpr int kValueVecs = 2;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};

#ifdef __AVX512F__
struct Avx512Vec {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kScoreRows = 12;  // 12 rows x 2 vectors + 2 keys + 1 broadcast <= 32 registers
  static constexpr int kValueRows = 6;   // 6 rows x 4 vectors + 4 values + 1 broadcast
  static constexpr int kValueVecs = 4;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
#endif

// The one register block both tiles are made of: out[r * ldo + w * width ...] (+)= sum over
// steps i < n of a[r * lda + i] * b[i * ldb + w * width ...], for RB rows and CW vectors of
// columns. Scores: a the queries (a step is a dimension), b the transposed keys; value sums: a the
// probabilities (a step is a key), b the values, added to what out holds.
template <class T, int RB, int CW, bool kAccumulate>
inline void BroadcastFmaBlock(const float* a, int lda, const float* b, int ldb, int n, float* out, int ldo) {
  typename T::V acc[RB][CW];
  for (int r = 0; r < RB; ++r)
    for (int w = 0; w < CW; ++w) acc[r][w] = kAccumulate ? T::Load(out + r * ldo + w * T::kWidth) : T::Zero();
  const float* bi = b;
  for (int i = 0; i < n; ++i, bi += ldb) {
    typename T::V v[CW];
    for (int w = 0; w < CW; ++w) v[w] = T::Load(bi + w * T::kWidth);
    for (int r = 0; r < RB; ++r) {
      const typename T::V x = T::Broadcast(a + r * lda + i);
      for (int w = 0; w < CW; ++w) acc[r][w] = T::Fma(x, v[w], acc[r][w]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int w = 0; w < CW; ++w) T::Store(out + r * ldo + w * T::kWidth, acc[r][w]);
}

// s[r * ld + j] = q_r . kt[:, j] for RB rows and columns [j0, j0 + CW * width).
template <class T, int RB, int CW>
inline void ScoreColumns(const float* q, int hd, const float* kt, int ldk, int j0, float* s, int ld) {
  BroadcastFmaBlock<T, RB, CW, false>(q, hd, kt + j0, ldk, hd, s + j0, ld);
}

// RB rows of scores over n16 columns (a multiple of 16): two vectors of columns a step, one at the end.
template <class T, int RB>
inline void ScoreRows(const float* q, int hd, const float* kt, int ldk, int n16, float* s, int ld) {
  constexpr int kStep = 2 * T::kWidth;
  int j = 0;
  for (; j + kStep <= n16; j += kStep) ScoreColumns<T, RB, 2>(q, hd, kt, ldk, j, s, ld);
  for (; j < n16; j += T::kWidth) ScoreColumns<T, RB, 1>(q, hd, kt, ldk, j, s, ld);
}

// acc[r * hd + c0 + ...] += sum_j p[r * ld + j] * v32[j * hd + c0 + ...] for RB rows and CV vectors
// of columns from c0, over all n values.
template <class T, int RB, int CV>
inline void ValueColumns(const float* p, int ld, const float* v32, int n, int hd, float* acc, int c0) {
  BroadcastFmaBlock<T, RB, CV, true>(p, ld, v32 + c0, hd, n, acc + c0, hd);
}

// RB rows of value sums over the columns from c that whole vectors of T cover; returns where
// they end (hd, or hd - 8 when T is 16 wide and hd is an odd multiple of 8).
template <class T, int RB>
inline int ValueRows(const float* p, int ld, const float* v32, int n, int hd, float* acc, int c) {
  constexpr int kCv = T::kValueVecs;
  for (; c + kCv * T::kWidth <= hd; c += kCv * T::kWidth) ValueColumns<T, RB, kCv>(p, ld, v32, n, hd, acc, c);
  if constexpr (kCv > 2)
    for (; c + 2 * T::kWidth <= hd; c += 2 * T::kWidth) ValueColumns<T, RB, 2>(p, ld, v32, n, hd, acc, c);
  for (; c + T::kWidth <= hd; c += T::kWidth) ValueColumns<T, RB, 1>(p, ld, v32, n, hd, acc, c);
  return c;
}

// Runs Op::template Run<RB> for rows [r0, rows) in blocks of kMax, then the remainder as one
// block of its own size.
template <int kMax, class Op, int RB = kMax - 1>
inline void RowRemainder(int left, int r, const Op& op) {
  if constexpr (RB > 0) {
    if (left == RB) {
      op.template Run<RB>(r);
    } else {
      RowRemainder<kMax, Op, RB - 1>(left, r, op);
    }
  }
}

template <int kMax, class Op>
inline void ForRowBlocks(int rows, const Op& op) {
  int r = 0;
  for (; r + kMax <= rows; r += kMax) op.template Run<kMax>(r);
  if (r < rows) RowRemainder<kMax, Op>(rows - r, r, op);
}

template <class T>
struct ScoreOp {
  const float* q;
  int hd;
  const float* kt;
  int ldk, n16;
  float* s;
  int ld;
  template <int RB>
  void Run(int r) const {
    ScoreRows<T, RB>(q + r * hd, hd, kt, ldk, n16, s + r * ld, ld);
  }
};

// The value sums; columns the vectors of T do not reach are left to the caller (the returned end).
template <class T>
struct ValueOp {
  const float* p;
  int ld;
  const float* v32;
  int n, hd;
  float* acc;
  int c0;
  template <int RB>
  void Run(int r) const {
    ValueRows<T, RB>(p + r * ld, ld, v32, n, hd, acc + r * hd, c0);
  }
};

template <class T>
inline void TileScoresWith(const float* q, int rows, int hd, const float* kt, int ldk, int n16, float* s, int ld) {
  ForRowBlocks<T::kScoreRows>(rows, ScoreOp<T>{q, hd, kt, ldk, n16, s, ld});
}

// The columns from c0 that whole vectors of T cover; returns the first column not summed (hd
// when every column was).
template <class T>
inline int TileWeightedValuesWith(const float* p, int rows, int ld, const float* v32, int n, int hd, float* acc,
                                  int c0 = 0) {
  ForRowBlocks<T::kValueRows>(rows, ValueOp<T>{p, ld, v32, n, hd, acc, c0});
  return c0 + (hd - c0) / T::kWidth * T::kWidth;
}

}  // namespace
}  // namespace impress
