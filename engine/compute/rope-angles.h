// The rotary embedding's angles for a set of positions, kept for the next call with the same
// positions: a forward pass rotates q and k of every layer at one set of positions (a decode step
// at one, a prefill or a question at its batch's), and the angles, taken in double, cost more
// than the rotations themselves. The CPU backend's Rope reads them; not thread-safe (one per
// backend, used by the thread that runs the forward pass).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace impress {

class RopeAngleTable {
 public:
  // cos and sin of pos[t] * inv_freq[i] for t < n_tok, i < half, at cs()[t * half + i] and
  // sn()[t * half + i]; computed (the tokens split by for_rows(n, cost, fn)) unless the last call
  // had the same positions and frequencies.
  template <class ForRows>
  void Prepare(const int32_t* pos, int n_tok, const float* inv_freq, int half, ForRows&& for_rows) {
    if (pos_.size() == size_t(n_tok) && std::equal(pos, pos + n_tok, pos_.begin()) &&
        inv_freq_.size() == size_t(half) && std::equal(inv_freq, inv_freq + half, inv_freq_.begin()))
      return;
    pos_.assign(pos, pos + n_tok);
    inv_freq_.assign(inv_freq, inv_freq + half);
    cs_.resize(size_t(n_tok) * size_t(half));
    sn_.resize(cs_.size());
    for_rows(int64_t(n_tok), int64_t(half) * 32, [&](int64_t t) {
      for (int i = 0; i < half; ++i) {
        const double ang = double(pos[t]) * double(inv_freq[i]);
        cs_[size_t(t) * half + i] = float(std::cos(ang));
        sn_[size_t(t) * half + i] = float(std::sin(ang));
      }
    });
  }
  const float* cs() const { return cs_.data(); }
  const float* sn() const { return sn_.data(); }

 private:
  std::vector<int32_t> pos_;
  std::vector<float> inv_freq_, cs_, sn_;
};

}  // namespace impress
