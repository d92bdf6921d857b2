// The Backend's default typed-weight ops (backend.h): decode stored weights to fp32 once, at
// MapWeight, and run the fp32 ops on them. Backends with typed kernels (the CPU) override all.
#include "engine/compute/backend.h"

#include <vector>

#include "engine/model/dequant.h"

namespace impress {

Result<WeightRef> Backend::MapWeight(const Tensor& t) {
  WeightRef w;
  if (t.empty()) return w;
  w.n_rows = t.rows();
  w.n_cols = t.cols();
  if (!t.stored()) {
    IMPRESS_ASSIGN_OR_RETURN(auto p, MapConstant(t.ptr(), t.data.size()));
    w.data = DevPtr<const void>(p.raw());
    return w;
  }
  IMPRESS_ASSIGN_OR_RETURN(const std::vector<float> values, TensorValues(t));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<void> p, Alloc(values.size() * sizeof(float)));
  CopyToDevice(p, values.data(), values.size() * sizeof(float));
  Synchronize();  // the host values die here
  w.data = DevPtr<const void>(p.raw());
  w.allocated = true;
  return w;
}

void Backend::ReleaseWeight(const WeightRef& w) {
  if (!w) return;
  if (w.allocated) {
    Free(DevPtr<void>(const_cast<void*>(w.data.raw())));
  } else {
    ReleaseConstant(DevPtr<const float>(static_cast<const float*>(w.data.raw())));
  }
}

void Backend::MatMul(int m, const WeightRef& w, DevPtr<const float> x, int ldx, float beta, DevPtr<float> y, int ldy) {
  Gemm(Trans::kNo, Trans::kYes, m, int(w.n_rows), int(w.n_cols), 1.0f, x, ldx,
       DevPtr<const float>(static_cast<const float*>(w.data.raw())), int(w.n_cols), beta, y, ldy);
}

void Backend::MatMuls(int m, DevPtr<const float> x, int ldx, std::span<const MatMulOut> outs) {
  for (const MatMulOut& o : outs) MatMul(m, *o.w, x, ldx, o.beta, o.y, o.ldy);
}

void Backend::GetWeightRows(DevPtr<float> out, const WeightRef& w, DevPtr<const int32_t> ids, int n_rows) {
  GetRows(out, DevPtr<const float>(static_cast<const float*>(w.data.raw())), ids, n_rows, int(w.n_cols));
}

}  // namespace impress
