// TileScores and TileWeightedValues on AVX-512 (compiled for it; called only when the kernel path
// says the CPU has it): the register blocks of tile-kernels-inl.h at sixteen floats a vector,
// and AVX2 for the last eight columns of a head size that is an odd multiple of eight.
#include "engine/compute/tile-attention.h"
#include "engine/compute/tile-kernels-inl.h"

namespace impress {

void TileScoresAvx512(const float* q, int rows, int hd, const float* kt, int ldk, int n, float* s, int ld) {
  TileScoresWith<Avx512Vec>(q, rows, hd, kt, ldk, RoundUpTile(n), s, ld);
}

void TileWeightedValuesAvx512(const float* p, int rows, int ld, const float* v32, int n, int hd, float* acc) {
  const int end = TileWeightedValuesWith<Avx512Vec>(p, rows, ld, v32, n, hd, acc);
  if (end < hd) TileWeightedValuesWith<Avx2Vec>(p, rows, ld, v32, n, hd, acc, end);
}

}  // namespace impress
