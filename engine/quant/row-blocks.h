// Row blocking for kernels that keep RB rows' accumulators in registers: RB is a template
// argument, so each block size is its own unrolled kernel.
#pragma once

namespace impress::quant {

namespace row_blocks_internal {
template <int RB, class Fn>
void Rest(int rest, int r, Fn& fn) {
  if constexpr (RB > 0) {
    if (rest == RB) return fn.template operator()<RB>(r);
    Rest<RB - 1>(rest, r, fn);
  }
}
}  // namespace row_blocks_internal

// fn.template operator()<RB>(r) for rows [0, rows): blocks of kRows from r = 0, then one block of
// the rows left (fewer than kRows).
template <int kRows, class Fn>
void ForRowBlocks(int rows, Fn&& fn) {
  int r = 0;
  for (; r + kRows <= rows; r += kRows) fn.template operator()<kRows>(r);
  if (r < rows) row_blocks_internal::Rest<kRows - 1>(rows - r, r, fn);
}

}  // namespace impress::quant
