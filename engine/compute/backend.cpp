// The Backend's default typed-weight ops (backend.h): decode stored weights to fp32 once, at
// MapWeight, and run the fp32 ops on them. Backends with typed kernels (the CPU) override all.
// Also the argument checks every backend's attention ops share.
#include "engine/compute/backend.h"

#include <string>
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

namespace {

// The shape both argument sets share; `what` names the op in the message.
Status CheckQueryShape(const AttentionQuery& a, int n_prefix, const char* what) {
  if (a.n_new <= 0 || a.n_head <= 0 || a.n_head_kv <= 0 || a.head_dim <= 0 || a.head_dim > 512 ||
      a.n_head % a.n_head_kv != 0 || n_prefix < 0)
    return Status::InvalidArgument(std::string(what) + ": bad shape (n_new " + std::to_string(a.n_new) + ", n_head " +
                                   std::to_string(a.n_head) + ", n_head_kv " + std::to_string(a.n_head_kv) +
                                   ", head_dim " + std::to_string(a.head_dim) + ", n_prefix " +
                                   std::to_string(n_prefix) + ")");
  return Status::Ok();
}

}  // namespace

Status PrefixRowsMissing() { return Status::IOError("attention: prefix rows never arrived (their read failed)"); }

Status CheckAttentionArgs(const AttentionArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckQueryShape(a, a.n_prefix, "attention"));
  if (!a.q || !a.k_new || !a.v_new || !a.out || (a.n_prefix > 0 && (!a.k_prefix || !a.v_prefix)))
    return Status::InvalidArgument("attention: missing buffer");
  std::vector<bool> seen(a.n_head, false);
  for (int h : a.importance_heads) {
    if (h < 0 || h >= a.n_head)
      return Status::InvalidArgument("attention: importance head " + std::to_string(h) + " out of range");
    if (seen[h]) return Status::InvalidArgument("attention: importance head " + std::to_string(h) + " listed twice");
    seen[h] = true;
  }
  const bool imp_has_cols = a.n_prefix > 0 || a.importance_include_new;
  if (!a.importance_heads.empty() && imp_has_cols && !a.importance)
    return Status::InvalidArgument("attention: missing importance buffer");
  return Status::Ok();
}

Status CheckScoreKeysArgs(const ScoreKeysArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckQueryShape(a, a.n_prefix, "score keys"));
  if (a.code_bits != 0 && a.code_bits != 8 && a.code_bits != 4)
    return Status::InvalidArgument("score keys: codes of " + std::to_string(a.code_bits) + " bits");
  const bool has_prefix = a.code_bits ? a.key_codes != nullptr : bool(a.k_prefix);
  if (!a.q || !a.k_new || (a.n_prefix > 0 && !has_prefix) ||
      (!a.query_heads.empty() && a.n_prefix > 0 && !a.importance))
    return Status::InvalidArgument("score keys: missing buffer");
  const int group = a.n_head / a.n_head_kv;
  std::vector<int> slot_of(a.n_head_kv, -1);
  for (size_t s = 0; s < a.prefix_kv_heads.size(); ++s) {
    const int g = a.prefix_kv_heads[s];
    if (g < 0 || g >= a.n_head_kv || slot_of[g] >= 0)
      return Status::InvalidArgument("score keys: prefix kv head " + std::to_string(g) + " out of range or repeated");
    slot_of[g] = static_cast<int>(s);
  }
  std::vector<bool> seen(a.n_head, false);
  for (int h : a.query_heads) {
    if (h < 0 || h >= a.n_head || seen[h])
      return Status::InvalidArgument("score keys: query head " + std::to_string(h) + " out of range or repeated");
    seen[h] = true;
    if (slot_of[h / group] < 0)
      return Status::InvalidArgument("score keys: query head " + std::to_string(h) + " uses kv head " +
                                     std::to_string(h / group) + ", whose keys were not supplied");
  }
  return Status::Ok();
}

}  // namespace impress
