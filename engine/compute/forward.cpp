// The forward pass: see forward.h. Reads top to bottom next to Hugging Face's
// modeling_llama.py / modeling_opt.py.
#include "engine/compute/forward.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <string>

#include "engine/model/arch.h"
#include "engine/model/ggml-type.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

namespace {

std::string Shape(const Tensor& t) {
  std::string s = "(";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + ")";
}

Status CheckTensor(const Tensor& t, const std::string& name, std::vector<int64_t> want, bool required = true) {
  if (t.empty() && !required) return Status::Ok();
  int64_t n = 1;
  for (int64_t d : want) n *= d;
  if (t.shape != want || t.numel() != n)
    return Status::InvalidArgument("model tensor " + name + " has shape " + Shape(t) + " and " +
                                   std::to_string(t.numel()) + " values; expected " + Shape(Tensor{.shape = want}));
  if (!t.stored()) return Status::Ok();
  // Stored (quantized) tensors: matrices of a type the kernels compute on, rows of whole blocks.
  if (want.size() != 2 || !quant::IsSupportedWeightType(t.ggml_type))
    return Status::Unsupported("model tensor " + name + " has type " + GgmlTypeName(t.ggml_type) +
                               ", which the forward pass cannot compute on (matrices of " +
                               quant::SupportedWeightTypes() + "; vectors fp32)");
  if (want[1] % quant::BlockElements(static_cast<quant::WeightType>(t.ggml_type)) != 0)
    return Status::InvalidArgument("model tensor " + name + " of type " + GgmlTypeName(t.ggml_type) + " has rows of " +
                                   std::to_string(want[1]) + " values, not whole blocks");
  if (!t.stored_bytes()) return Status::InvalidArgument("model tensor " + name + " has no data");
  return Status::Ok();
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<float> RopeInvFreq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(double(c.rope_theta), 2.0 * i / c.head_dim);
    if (s.type == RopeScalingType::kLinear) {
      f /= s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
      // transformers' _compute_llama3_parameters
      const double low_wavelen = s.original_ctx / s.low_freq_factor;
      const double high_wavelen = s.original_ctx / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {  // medium: interpolate
        const double smooth = (s.original_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    if (size_t(i) < c.rope_freq_factors.size()) f /= c.rope_freq_factors[size_t(i)];  // GGUF rope_freqs
    inv[i] = float(f);
  }
  return inv;
}

Status ValidateModel(const Model& m) {
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  if (c.n_vocab <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 ||
      c.n_ff <= 0 || c.n_head % c.n_head_kv != 0 || c.head_dim % 2 != 0 || c.head_dim > 512)
    return Status::InvalidArgument("model config: bad dimensions (n_vocab " + std::to_string(c.n_vocab) + ", n_embd " +
                                   std::to_string(c.n_embd) + ", n_layer " + std::to_string(c.n_layer) + ", n_head " +
                                   std::to_string(c.n_head) + ", n_head_kv " + std::to_string(c.n_head_kv) +
                                   ", head_dim " + std::to_string(c.head_dim) + ", n_ff " + std::to_string(c.n_ff) +
                                   ")");
  if (int(w.layers.size()) != c.n_layer)
    return Status::InvalidArgument("model has " + std::to_string(w.layers.size()) + " layers of weights, config says " +
                                   std::to_string(c.n_layer));
  if (c.word_embed_proj_dim < 0) return Status::InvalidArgument("model config: negative word_embed_proj_dim");
  const int64_t e = c.n_embd, nq = int64_t(c.n_head) * c.head_dim, nkv = int64_t(c.n_head_kv) * c.head_dim;
  // Every tensor the architecture's table gives a model of this configuration.
  const ArchSpec& arch = c.arch.spec();
  auto check = [&](const TensorSpec& t, const std::string& name, const Tensor& x) -> Status {
    if (!TensorPresent(t, c)) return Status::Ok();
    if (t.role != Role::kPositions) {
      // The output projection may be missing from a model marked untied: the embeddings are used.
      const bool required = t.when != When::kUntied;
      if (!required && x.empty()) {
        spdlog::warn("model {}: no output weight and not marked tied; using the token embeddings", c.name);
      }
      return CheckTensor(x, name, TensorShape(t, c), required);
    }
    // Learned positions: any number of rows past the offset, fp32.
    if (c.pos_offset < 0) return Status::InvalidArgument("model config: negative position offset");
    if (x.shape.size() != 2 || x.shape[1] != e || x.rows() <= c.pos_offset || x.stored() ||
        int64_t(x.data.size()) != x.rows() * e)
      return Status::InvalidArgument("model tensor " + name + " has shape " + Shape(x) + "; expected (n_pos, " +
                                     std::to_string(e) + ")");
    return Status::Ok();
  };
  for (const TensorSpec& t : arch.model_tensors) IMPRESS_RETURN_IF_ERROR(check(t, t.what, w.*t.model));
  // Whatever the table says, an output projection present must fit the LM head.
  IMPRESS_RETURN_IF_ERROR(CheckTensor(w.output, "output", {c.n_vocab, ResolveDim(Dim::kEmbdIn, c)}, false));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "layer " + std::to_string(il) + " ";
    const LayerWeights& l = w.layers[il];
    for (const TensorSpec& t : arch.layer_tensors) IMPRESS_RETURN_IF_ERROR(check(t, p + t.what, l.*t.layer));
    // Biases are added wherever present: whatever the table says, one present must fit.
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.bq, p + "bq", {nq}, false));
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.bk, p + "bk", {nkv}, false));
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.bv, p + "bv", {nkv}, false));
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.bo, p + "bo", {e}, false));
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.b_up, p + "b_up", {c.n_ff}, false));
    IMPRESS_RETURN_IF_ERROR(CheckTensor(l.b_down, p + "b_down", {e}, false));
  }
  return Status::Ok();
}

// ---- Forward ------------------------------------------------------------------------------

Forward::Forward(const Model& model, Backend& backend, int max_batch) :
    model_(model), be_(backend), max_batch_(max_batch), graph_(model.config.arch.spec().graph) {}

void Forward::Norm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, DevPtr<const float> b, int n_rows) {
  const ModelConfig& c = model_.config;
  if (graph_.norm == NormKind::kRms) {
    be_.RmsNorm(out, x, w, n_rows, c.n_embd, c.norm_eps);
  } else {
    be_.LayerNorm(out, x, w, b, n_rows, c.n_embd, c.norm_eps);
  }
}

Forward::~Forward() {
  for (auto p : constants_) be_.ReleaseConstant(p);
  for (const WeightRef& w : weights_) be_.ReleaseWeight(w);
  for (auto p : allocs_) be_.Free(p);
}

Result<std::unique_ptr<Forward>> Forward::Create(const Model& model, Backend& backend, const ForwardOptions& options) {
  IMPRESS_RETURN_IF_ERROR(ValidateModel(model));
  if (options.max_batch < 1 || options.max_batch > (1 << 16))
    return Status::InvalidArgument("forward: max_batch " + std::to_string(options.max_batch) + " not in [1, 65536]");
  std::unique_ptr<Forward> f(new Forward(model, backend, options.max_batch));
  IMPRESS_RETURN_IF_ERROR(f->Init());
  return f;
}

Status Forward::Init() {
  const ModelConfig& c = model_.config;
  const ModelWeights& w = model_.weights;
  auto map = [&](const Tensor& t) -> Result<DevPtr<const float>> {
    if (t.empty()) return DevPtr<const float>();
    IMPRESS_ASSIGN_OR_RETURN(auto p, be_.MapConstant(t.ptr(), t.data.size()));
    constants_.push_back(p);
    return p;
  };
  auto map_weight = [&](const Tensor& t) -> Result<WeightRef> {
    IMPRESS_ASSIGN_OR_RETURN(WeightRef r, be_.MapWeight(t));
    if (r) weights_.push_back(r);
    return r;
  };
#define IMPRESS_MAP_WITH(fn, dst, t)  \
  do {                                \
    auto _r = fn(t);                  \
    if (!_r.ok()) return _r.status(); \
    dst = *_r;                        \
  } while (0)
#define IMPRESS_MAP(dst, t) IMPRESS_MAP_WITH(map, dst, t)
#define IMPRESS_MAP_W(dst, t) IMPRESS_MAP_WITH(map_weight, dst, t)
  IMPRESS_MAP_W(tok_embd_, w.tok_embd);
  IMPRESS_MAP(pos_embd_, w.pos_embd);
  IMPRESS_MAP_W(project_in_, w.project_in);
  IMPRESS_MAP_W(project_out_, w.project_out);
  IMPRESS_MAP(output_norm_, w.output_norm);
  IMPRESS_MAP(output_norm_b_, w.output_norm_b);
  IMPRESS_MAP_W(output_, w.output.empty() ? w.tok_embd : w.output);
  layers_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[il];
    LayerDev& d = layers_[il];
    IMPRESS_MAP(d.attn_norm, l.attn_norm);
    IMPRESS_MAP(d.attn_norm_b, l.attn_norm_b);
    IMPRESS_MAP_W(d.wq, l.wq);
    IMPRESS_MAP_W(d.wk, l.wk);
    IMPRESS_MAP_W(d.wv, l.wv);
    IMPRESS_MAP_W(d.wo, l.wo);
    IMPRESS_MAP(d.bq, l.bq);
    IMPRESS_MAP(d.bk, l.bk);
    IMPRESS_MAP(d.bv, l.bv);
    IMPRESS_MAP(d.bo, l.bo);
    IMPRESS_MAP(d.q_norm, l.q_norm);
    IMPRESS_MAP(d.k_norm, l.k_norm);
    IMPRESS_MAP(d.ffn_norm, l.ffn_norm);
    IMPRESS_MAP(d.ffn_norm_b, l.ffn_norm_b);
    IMPRESS_MAP_W(d.w_gate, l.w_gate);
    IMPRESS_MAP_W(d.w_up, l.w_up);
    IMPRESS_MAP_W(d.w_down, l.w_down);
    IMPRESS_MAP(d.b_up, l.b_up);
    IMPRESS_MAP(d.b_down, l.b_down);
  }
#undef IMPRESS_MAP
#undef IMPRESS_MAP_W
#undef IMPRESS_MAP_WITH
  const size_t B = max_batch_, e = c.n_embd, nq = size_t(c.n_head) * c.head_dim, nkv = size_t(kv_row());
  auto alloc = [&](auto& dst, size_t n) -> Status {
    using T = std::remove_reference_t<decltype(*dst.raw())>;
    IMPRESS_ASSIGN_OR_RETURN(auto p, AllocArray<T>(be_, n));
    allocs_.push_back(DevPtr<void>(p.raw()));
    dst = p;
    return Status::Ok();
  };
  IMPRESS_RETURN_IF_ERROR(alloc(x_, B * e));
  IMPRESS_RETURN_IF_ERROR(alloc(xn_, B * e));
  IMPRESS_RETURN_IF_ERROR(alloc(k16_, B * nkv));
  IMPRESS_RETURN_IF_ERROR(alloc(v16_, B * nkv));
  // One block for q_, k_/v_, attn_, gate_/up_ and emb_ (see forward.h), each part starting on a
  // 64-byte boundary: with SmolLM2's shapes 6.3 MB where the buffers apart took 9.4 MB.
  auto part = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t q_part = part(B * nq), attn_part = std::max(part(B * nq), 2 * part(B * nkv));
  const size_t ffn_part = part(B * size_t(c.n_ff));
  const size_t emb = B * std::max<size_t>(e, size_t(std::max(0, c.word_embed_proj_dim)));
  DevPtr<float> block;
  IMPRESS_RETURN_IF_ERROR(alloc(block, std::max({q_part + attn_part, 2 * ffn_part, emb})));
  q_ = block;
  k_ = block + q_part;
  v_ = k_ + part(B * nkv);
  attn_ = block + q_part;
  gate_ = block;
  up_ = block + ffn_part;
  emb_ = block;
  IMPRESS_RETURN_IF_ERROR(alloc(ids_, B));
  IMPRESS_RETURN_IF_ERROR(alloc(pos_, B));
  if (graph_.position == PositionKind::kRope) {
    DevPtr<float> inv;
    const std::vector<float> host = RopeInvFreq(c);
    IMPRESS_RETURN_IF_ERROR(alloc(inv, host.size()));
    be_.CopyToDevice(DevPtr<void>(inv.raw()), host.data(), host.size() * sizeof(float));
    inv_freq_ = inv;
  }
  return Status::Ok();
}

Status Forward::Begin(std::span<const int32_t> tokens, std::span<const int32_t> positions) {
  const ModelConfig& c = model_.config;
  const int n = static_cast<int>(tokens.size());
  if (n < 1 || n > max_batch_)
    return Status::InvalidArgument("forward: batch of " + std::to_string(tokens.size()) + " tokens; must be 1.." +
                                   std::to_string(max_batch_));
  if (positions.size() != tokens.size())
    return Status::InvalidArgument("forward: " + std::to_string(positions.size()) + " positions for " +
                                   std::to_string(n) + " tokens");
  const bool learned = graph_.position == PositionKind::kLearned;
  const int64_t n_pos_embd = learned ? model_.weights.pos_embd.rows() - c.pos_offset : INT32_MAX;
  std::vector<int32_t> pos_ids(n);
  min_pos_ = INT32_MAX;
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
      return Status::InvalidArgument("forward: token id " + std::to_string(tokens[i]) + " outside the vocabulary (" +
                                     std::to_string(c.n_vocab) + ")");
    if (positions[i] < 0 || positions[i] >= n_pos_embd)
      return Status::OutOfRange("forward: position " + std::to_string(positions[i]) +
                                " outside the model's position range");
    pos_ids[i] = positions[i] + (learned ? c.pos_offset : 0);
    min_pos_ = std::min(min_pos_, positions[i]);
  }
  n_new_ = n;
  be_.CopyToDevice(DevPtr<void>(ids_.raw()), tokens.data(), sizeof(int32_t) * n);
  be_.CopyToDevice(DevPtr<void>(pos_.raw()), pos_ids.data(), sizeof(int32_t) * n);
  const int e = c.n_embd;
  // inputs_embeds (project_in when the embeddings are narrower: OPT-350m)
  if (project_in_) {
    const int ein = c.word_embed_proj_dim;
    be_.GetWeightRows(emb_, tok_embd_, ids_, n);
    be_.MatMul(n, project_in_, emb_, ein, 0.0f, x_, e);
  } else {
    be_.GetWeightRows(x_, tok_embd_, ids_, n);
  }
  if (learned) {  // + embed_positions(pos + offset)
    be_.GetRows(emb_, pos_embd_, pos_, n, e);
    be_.Add(x_, emb_, size_t(n) * e);
  }
  il_ = -1;
  stage_ = Stage::kEmbedded;
  first_bad_layer_ = kNoBadLayer;
  CheckStream(-1);
  return Status::Ok();
}

void Forward::CheckStream(int il) {
  if (!check_layers_ || first_bad_layer_ != kNoBadLayer) return;
  check_buf_.resize(size_t(n_new_) * model_.config.n_embd);
  be_.CopyToHost(check_buf_.data(), DevPtr<const void>(x_.raw()), check_buf_.size() * sizeof(float));
  for (float v : check_buf_) {
    if (!std::isfinite(v)) {
      first_bad_layer_ = il;
      return;
    }
  }
}

Status Forward::ComputeQKV(int il) {
  const ModelConfig& c = model_.config;
  if (stage_ != Stage::kEmbedded || il != il_ + 1 || il >= c.n_layer)
    return Status::InvalidArgument("forward: ComputeQKV(" + std::to_string(il) + ") out of order (next layer is " +
                                   std::to_string(il_ + 1) + ")");
  ProjectQKV(il, QkvOut{.q = q_, .q_rows = c.n_head * c.head_dim, .k = k_, .v = v_, .k16 = k16_, .v16 = v16_});
  il_ = il;
  stage_ = Stage::kQkv;
  return Status::Ok();
}

void Forward::ProjectQKV(int il, const QkvOut& o) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[il];
  const LayerDev& l = layers_[il];
  const int n = n_new_, e = c.n_embd, nq = c.n_head * c.head_dim, nkv = kv_row();
  DevPtr<const float> in = xn_;
  if (c.do_layer_norm_before) {
    Norm(xn_, x_, l.attn_norm, l.attn_norm_b, n);  // input_layernorm / self_attn_layer_norm
  } else {
    in = x_;  // OPT-350m: post-LN, attention reads the residual stream itself
  }
  // q/k/v_proj over the same input: one call, so a backend prepares the input once. A prediction
  // projects the first q_rows of Q and k_rows of K only (the rows of the heads it scores, and of
  // their kv heads) and no V.
  WeightRef wq = l.wq, wk = l.wk;
  wq.n_rows = o.q_rows;
  const int k_rows = o.k_rows > 0 ? o.k_rows : nkv;
  wk.n_rows = k_rows;
  const Backend::MatMulOut qkv[] = {{&wq, 0.0f, o.q, nq}, {&wk, 0.0f, o.k, nkv}, {&l.wv, 0.0f, o.v, nkv}};
  be_.MatMuls(n, in, e, std::span(qkv, o.v ? 3 : 2));
  if (!lw.bq.empty()) be_.AddBias(o.q, l.bq, n, o.q_rows, nq);
  if (!lw.bk.empty()) be_.AddBias(o.k, l.bk, n, k_rows, nkv);
  if (o.v && !lw.bv.empty()) be_.AddBias(o.v, l.bv, n, nkv, nkv);
  // Below, rows of Q and K past q_rows and k_rows are transformed too (whole rows are simpler);
  // nothing reads them.
  if (graph_.qk_norm) {  // q_norm / k_norm: RMSNorm over each head's head_dim values
    be_.RmsNorm(o.q, o.q, l.q_norm, n * c.n_head, c.head_dim, c.norm_eps);
    be_.RmsNorm(o.k, o.k, l.k_norm, n * c.n_head_kv, c.head_dim, c.norm_eps);
  }
  if (graph_.position == PositionKind::kRope) {
    be_.Rope({o.q, n, c.n_head, c.head_dim, pos_, inv_freq_});
    be_.Rope({o.k, n, c.n_head_kv, c.head_dim, pos_, inv_freq_});
  }
  // KV is kept in fp16 everywhere, the new tokens' own included, so a batch attends to
  // itself exactly as it will to its stored K/V later.
  be_.ToF16(o.k16, nkv, o.k, nkv, n, nkv);
  if (o.v) be_.ToF16(o.v16, nkv, o.v, nkv, n, nkv);
}

Status Forward::PredictScores(int il, const PrefixKeys& keys, std::span<const int> query_heads, float* out) {
  const ModelConfig& c = model_.config;
  if (stage_ != Stage::kQkv || il != il_ + 1 || il >= c.n_layer)
    return Status::InvalidArgument("forward: PredictScores(" + std::to_string(il) +
                                   ") needs ComputeQKV of the layer before it, and no Attend yet");
  if (query_heads.empty() || keys.n == 0) return Status::Ok();
  const int max_head = *std::max_element(query_heads.begin(), query_heads.end());
  if (*std::min_element(query_heads.begin(), query_heads.end()) < 0 || max_head >= c.n_head)
    return Status::InvalidArgument("forward: PredictScores: query head outside the model");
  const size_t nkv = size_t(kv_row());
  if (!pk_) {  // the predicted new keys; the predicted queries use attn_, free until Attend
    IMPRESS_ASSIGN_OR_RETURN(pk_, AllocArray<float>(be_, size_t(max_batch_) * nkv));
    allocs_.push_back(DevPtr<void>(pk_.raw()));
    IMPRESS_ASSIGN_OR_RETURN(pk16_, AllocArray<f16_t>(be_, size_t(max_batch_) * nkv));
    allocs_.push_back(DevPtr<void>(pk16_.raw()));
  }
  // Only the scored heads' rows of Q, and their kv heads' rows of K, where the backend's matrices
  // are views of rows (the CPU); elsewhere all of Q and K.
  const bool rows_only = be_.HostAddressable();
  const int group = c.n_head / c.n_head_kv;
  const int q_rows = rows_only ? (max_head + 1) * c.head_dim : c.n_head * c.head_dim;
  const int k_rows = rows_only ? (max_head / group + 1) * c.head_dim : 0;
  ProjectQKV(il, QkvOut{.q = attn_, .q_rows = q_rows, .k_rows = k_rows, .k = pk_, .v = {}, .k16 = pk16_, .v16 = {}});
  return Score(MakeAttentionQuery(n_new_, c.n_head, c.n_head_kv, c.head_dim, attn_, pk16_), keys, query_heads, out);
}

Status Forward::ScoreKeys(int il, const PrefixKeys& keys, std::span<const int> query_heads, float* out) {
  if (stage_ != Stage::kQkv || il != il_)
    return Status::InvalidArgument("forward: ScoreKeys(" + std::to_string(il) +
                                   ") needs ComputeQKV of that layer first");
  return Score(Query(), keys, query_heads, out);
}

Status Forward::Score(const AttentionQuery& query, const PrefixKeys& keys, std::span<const int> query_heads,
                      float* out) {
  if (keys.n < 0 || (keys.n > 0 && !(keys.code_bits ? keys.codes != nullptr : bool(keys.k))))
    return Status::InvalidArgument("forward: ScoreKeys: bad prefix keys");
  if (query_heads.empty() || keys.n == 0) return Status::Ok();
  if (!out) return Status::InvalidArgument("forward: ScoreKeys: no output buffer");
  const size_t need = query_heads.size() * size_t(keys.n);
  IMPRESS_RETURN_IF_ERROR(EnsureImportanceCapacity(need));
  ScoreKeysArgs a;
  static_cast<AttentionQuery&>(a) = query;
  a.n_prefix = keys.n;
  a.k_prefix = keys.k;
  a.code_bits = keys.code_bits;
  a.key_codes = keys.codes;
  a.prefix_kv_heads = keys.kv_heads;
  a.query_heads = query_heads;
  a.importance = imp_;
  IMPRESS_RETURN_IF_ERROR(be_.ScoreKeys(a));
  be_.CopyToHost(out, DevPtr<const void>(imp_.raw()), need * sizeof(float));
  return Status::Ok();
}

AttentionQuery Forward::Query() const {
  const ModelConfig& c = model_.config;
  return MakeAttentionQuery(n_new_, c.n_head, c.n_head_kv, c.head_dim, q_, k16_);
}

Status Forward::EnsureImportanceCapacity(size_t n) {
  if (n <= imp_cap_) return Status::Ok();
  if (imp_) {
    be_.Free(DevPtr<void>(imp_.raw()));
    allocs_.erase(std::remove_if(allocs_.begin(), allocs_.end(), [&](DevPtr<void> p) { return p.raw() == imp_.raw(); }),
                  allocs_.end());
    imp_ = DevPtr<float>();  // nothing dangles if the larger allocation fails
    imp_cap_ = 0;
  }
  IMPRESS_ASSIGN_OR_RETURN(imp_, AllocArray<float>(be_, n));
  allocs_.push_back(DevPtr<void>(imp_.raw()));
  imp_cap_ = n;
  return Status::Ok();
}

Status Forward::ExportKV(int il, DevPtr<f16_t> k_out, DevPtr<f16_t> v_out) {
  if (stage_ == Stage::kIdle || il != il_)
    return Status::InvalidArgument("forward: ExportKV(" + std::to_string(il) +
                                   ") needs ComputeQKV of that layer first");
  const size_t bytes = size_t(n_new_) * kv_row() * sizeof(f16_t);
  if (k_out) be_.CopyDevice(DevPtr<void>(k_out.raw()), DevPtr<const void>(k16_.raw()), bytes);
  if (v_out) be_.CopyDevice(DevPtr<void>(v_out.raw()), DevPtr<const void>(v16_.raw()), bytes);
  return Status::Ok();
}

Status Forward::ExportKVToHost(int il, f16_t* k_out, f16_t* v_out) {
  if (stage_ == Stage::kIdle || il != il_)
    return Status::InvalidArgument("forward: ExportKV(" + std::to_string(il) +
                                   ") needs ComputeQKV of that layer first");
  const size_t bytes = size_t(n_new_) * kv_row() * sizeof(f16_t);
  if (k_out) be_.CopyToHost(k_out, DevPtr<const void>(k16_.raw()), bytes);
  if (v_out) be_.CopyToHost(v_out, DevPtr<const void>(v16_.raw()), bytes);
  return Status::Ok();
}

Status Forward::Attend(int il, const PrefixKV& prefix, const ImportanceRequest* importance) {
  const ModelConfig& c = model_.config;
  if (stage_ != Stage::kQkv || il != il_)
    return Status::InvalidArgument("forward: Attend(" + std::to_string(il) + ") needs ComputeQKV of that layer first");
  if (prefix.n < 0 || (prefix.n > 0 && (!prefix.k || !prefix.v)))
    return Status::InvalidArgument("forward: Attend: bad prefix (n " + std::to_string(prefix.n) + ")");
  if (!prefix.positions.empty()) {
    if (int(prefix.positions.size()) != prefix.n)
      return Status::InvalidArgument("forward: Attend: " + std::to_string(prefix.positions.size()) +
                                     " prefix positions for " + std::to_string(prefix.n) + " prefix tokens");
    for (int32_t p : prefix.positions)
      if (p < 0 || p >= min_pos_)
        return Status::InvalidArgument("forward: Attend: prefix position " + std::to_string(p) +
                                       " does not precede the new tokens (first at " + std::to_string(min_pos_) + ")");
  }
  const int n = n_new_, e = c.n_embd, nq = c.n_head * c.head_dim;
  AttentionArgs a;
  static_cast<AttentionQuery&>(a) = Query();
  a.v_new = v16_;
  a.n_prefix = prefix.n;
  a.k_prefix = prefix.k;
  a.v_prefix = prefix.v;
  a.prefix_arrivals = prefix.arrivals;
  a.out = attn_;
  size_t imp_count = 0;
  if (importance && !importance->heads.empty()) {
    if (!importance->out) return Status::InvalidArgument("forward: Attend: importance requested without a buffer");
    const size_t ld = size_t(prefix.n) + (importance->include_new ? n : 0);
    imp_count = importance->heads.size() * ld;
    IMPRESS_RETURN_IF_ERROR(EnsureImportanceCapacity(imp_count));
    a.importance_heads = importance->heads;
    a.importance_include_new = importance->include_new;
    a.importance_from = std::clamp(importance->first_col, 0, int(ld));
    a.importance = imp_;
  }
  IMPRESS_RETURN_IF_ERROR(be_.Attention(a));
  if (imp_count) be_.CopyToHost(importance->out, DevPtr<const void>(imp_.raw()), imp_count * sizeof(float));

  const LayerWeights& lw = model_.weights.layers[il];
  const LayerDev& l = layers_[il];
  // x += attn Wo^T (+ bo): o_proj / out_proj and the residual in one GEMM.
  be_.MatMul(n, l.wo, attn_, nq, 1.0f, x_, e);
  if (!lw.bo.empty()) be_.AddBias(x_, l.bo, n, e, e);
  if (!c.do_layer_norm_before) Norm(x_, x_, l.attn_norm, l.attn_norm_b, n);  // post-LN

  // FFN
  DevPtr<const float> in = xn_;
  if (c.do_layer_norm_before) {
    Norm(xn_, x_, l.ffn_norm, l.ffn_norm_b, n);  // post_attention_layernorm / final_layer_norm
  } else {
    in = x_;
  }
  const int ff = c.n_ff;
  if (graph_.ffn == FfnKind::kSwiGlu) {
    // down_proj(silu(gate_proj(x)) * up_proj(x))
    const Backend::MatMulOut gate_up[] = {{&l.w_gate, 0.0f, gate_, ff}, {&l.w_up, 0.0f, up_, ff}};
    be_.MatMuls(n, in, e, gate_up);
    be_.SwiGlu(gate_, gate_, up_, n, ff, ff);
    be_.MatMul(n, l.w_down, gate_, ff, 1.0f, x_, e);
  } else {
    // fc2(relu(fc1(x)))
    be_.MatMul(n, l.w_up, in, e, 0.0f, up_, ff);
    if (!lw.b_up.empty()) be_.AddBias(up_, l.b_up, n, ff, ff);
    be_.Relu(up_, size_t(n) * ff);
    be_.MatMul(n, l.w_down, up_, ff, 1.0f, x_, e);
    if (!lw.b_down.empty()) be_.AddBias(x_, l.b_down, n, e, e);
  }
  if (!c.do_layer_norm_before) Norm(x_, x_, l.ffn_norm, l.ffn_norm_b, n);  // post-LN
  stage_ = (il == c.n_layer - 1) ? Stage::kDone : Stage::kEmbedded;
  CheckStream(il);
  return Status::Ok();
}

Status Forward::EnsureLogitsCapacity(int n_rows) {
  if (n_rows <= logits_cap_) return Status::Ok();
  const ModelConfig& c = model_.config;
  for (DevPtr<float>* p : {&lx_, &lx2_, &logits_}) {
    if (*p) {
      void* raw = p->raw();
      be_.Free(DevPtr<void>(raw));
      allocs_.erase(std::remove_if(allocs_.begin(), allocs_.end(), [&](DevPtr<void> a) { return a.raw() == raw; }),
                    allocs_.end());
    }
  }
  const size_t width = std::max<size_t>(c.n_embd, size_t(std::max(0, c.word_embed_proj_dim)));
  IMPRESS_ASSIGN_OR_RETURN(lx_, AllocArray<float>(be_, size_t(n_rows) * width));
  allocs_.push_back(DevPtr<void>(lx_.raw()));
  IMPRESS_ASSIGN_OR_RETURN(lx2_, AllocArray<float>(be_, size_t(n_rows) * width));
  allocs_.push_back(DevPtr<void>(lx2_.raw()));
  IMPRESS_ASSIGN_OR_RETURN(logits_, AllocArray<float>(be_, size_t(n_rows) * c.n_vocab));
  allocs_.push_back(DevPtr<void>(logits_.raw()));
  logits_cap_ = n_rows;
  return Status::Ok();
}

Status Forward::Logits(std::span<const int> rows, float* out) {
  const ModelConfig& c = model_.config;
  if (stage_ != Stage::kDone) return Status::InvalidArgument("forward: Logits before the last layer ran");
  const int nr = static_cast<int>(rows.size());
  if (nr == 0) return Status::Ok();
  for (int r : rows)
    if (r < 0 || r >= n_new_)
      return Status::InvalidArgument("forward: logits row " + std::to_string(r) + " outside the batch of " +
                                     std::to_string(n_new_));
  IMPRESS_RETURN_IF_ERROR(EnsureLogitsCapacity(nr));
  const int e = c.n_embd;
  for (int i = 0; i < nr; ++i)
    be_.CopyDevice(DevPtr<void>(lx_.raw() + size_t(i) * e), DevPtr<const void>(x_.raw() + size_t(rows[i]) * e),
                   sizeof(float) * e);
  DevPtr<float> h = lx_;
  if (output_norm_) Norm(h, h, output_norm_, output_norm_b_, nr);  // norm / final_layer_norm
  int width = e;
  if (project_out_) {
    width = c.word_embed_proj_dim;
    be_.MatMul(nr, project_out_, h, e, 0.0f, lx2_, width);
    h = lx2_;
  }
  be_.MatMul(nr, output_, h, width, 0.0f, logits_, c.n_vocab);
  be_.CopyToHost(out, DevPtr<const void>(logits_.raw()), sizeof(float) * size_t(nr) * c.n_vocab);
  // Weights are read in place from the model file: if it was truncated or rewritten on disk since
  // it was loaded, what this pass computed (logits, and the KV a caller may store) came from zeros
  // or another file's bytes, and must not be used. Checked after every prefill and decode step.
  bad_logits_ = false;
  IMPRESS_RETURN_IF_ERROR(CheckModelFiles(model_));
  // A scan of what was copied anyway (n_vocab floats a row): cheap next to the LM head.
  const size_t n_out = size_t(nr) * c.n_vocab;
  for (size_t i = 0; i < n_out && !bad_logits_; ++i) bad_logits_ = !std::isfinite(out[i]);
  if (bad_logits_) {
    std::string where = "the first non-finite layer output is unknown (re-run with check_layers to find it)";
    if (first_bad_layer_ == -1) {
      where = "the token embeddings are already non-finite";
    } else if (first_bad_layer_ >= 0) {
      where = "layer " + std::to_string(first_bad_layer_) + " is the first whose output is non-finite";
    } else if (check_layers_) {
      where = "every layer's output was finite: the output norm or LM head made them";
    }
    return Status::Internal("model " + (c.name.empty() ? model_.path : c.name) +
                            ": the forward pass produced NaN or infinite logits; " + where);
  }
  return Status::Ok();
}

// ---- Generator ----------------------------------------------------------------------------

Generator::~Generator() {
  for (auto p : k_cache_) be_.Free(DevPtr<void>(p.raw()));
  for (auto p : v_cache_) be_.Free(DevPtr<void>(p.raw()));
}

Result<std::unique_ptr<Generator>> Generator::Create(const Model& model, Backend& backend,
                                                     const GeneratorOptions& options) {
  const ModelConfig& c = model.config;
  int n_ctx = options.n_ctx > 0 ? options.n_ctx : c.n_ctx_train;
  if (n_ctx <= 0) n_ctx = 4096;
  if (c.arch.spec().graph.position == PositionKind::kLearned && model.weights.pos_embd.rows() > c.pos_offset)
    n_ctx = std::min<int>(n_ctx, int(model.weights.pos_embd.rows() - c.pos_offset));
  if (options.ubatch < 1) return Status::InvalidArgument("generator: ubatch must be >= 1");
  std::unique_ptr<Generator> g(new Generator(backend));
  g->n_ctx_ = n_ctx;
  g->ubatch_ = std::min(options.ubatch, n_ctx);
  IMPRESS_ASSIGN_OR_RETURN(g->fwd_, Forward::Create(model, backend, ForwardOptions{g->ubatch_}));
  const size_t per_layer = size_t(n_ctx) * g->fwd_->kv_row();
  for (int il = 0; il < c.n_layer; ++il) {
    IMPRESS_ASSIGN_OR_RETURN(auto k, AllocArray<f16_t>(backend, per_layer));
    g->k_cache_.push_back(k);
    IMPRESS_ASSIGN_OR_RETURN(auto v, AllocArray<f16_t>(backend, per_layer));
    g->v_cache_.push_back(v);
  }
  spdlog::debug("generator: n_ctx {}, ubatch {}, KV cache {:.1f} MiB", n_ctx, g->ubatch_,
                2.0 * c.n_layer * per_layer * sizeof(f16_t) / (1 << 20));
  return g;
}

Status Generator::Eval(std::span<const int32_t> tokens, std::vector<float>* last_logits, const ProgressFn& progress,
                       const std::atomic<bool>* cancel) {
  if (!last_logits) return EvalRows(tokens, {}, nullptr, progress, cancel);
  last_logits->resize(fwd_->config().n_vocab);
  const int row = static_cast<int>(tokens.size()) - 1;
  return EvalRows(tokens, std::span<const int>(&row, 1), last_logits->data(), progress, cancel);
}

Status Generator::EvalRows(std::span<const int32_t> tokens, std::span<const int> rows, float* out,
                           const ProgressFn& progress, const std::atomic<bool>* cancel) {
  const ModelConfig& c = fwd_->config();
  if (tokens.empty()) return Status::InvalidArgument("generator: nothing to evaluate");
  if (int64_t(n_past_) + int64_t(tokens.size()) > n_ctx_)
    return Status::OutOfRange("generator: " + std::to_string(n_past_) + " cached + " + std::to_string(tokens.size()) +
                              " new tokens exceed the context of " + std::to_string(n_ctx_));
  for (int r : rows)
    if (r < 0 || size_t(r) >= tokens.size())
      return Status::InvalidArgument("generator: logits row " + std::to_string(r) + " outside the " +
                                     std::to_string(tokens.size()) + " tokens");
  if (!rows.empty() && !out) return Status::InvalidArgument("generator: logits wanted without a buffer");
  const int kv = fwd_->kv_row();
  std::vector<int32_t> pos;
  const size_t total = tokens.size();
  for (size_t done = 0; done < total;) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return Status::Cancelled("generation cancelled");
    if (!ReportProgress(progress, done, total, "prefill")) return Status::Cancelled("prefill cancelled");
    const int n = static_cast<int>(std::min<size_t>(ubatch_, total - done));
    pos.resize(n);
    for (int i = 0; i < n; ++i) pos[i] = n_past_ + i;
    IMPRESS_RETURN_IF_ERROR(fwd_->Begin(tokens.subspan(done, n), pos));
    for (int il = 0; il < c.n_layer; ++il) {
      IMPRESS_RETURN_IF_ERROR(fwd_->ComputeQKV(il));
      PrefixKV prefix{n_past_, k_cache_[il], v_cache_[il], {}};
      IMPRESS_RETURN_IF_ERROR(fwd_->Attend(il, prefix));
      IMPRESS_RETURN_IF_ERROR(
          fwd_->ExportKV(il, k_cache_[il] + size_t(n_past_) * kv, v_cache_[il] + size_t(n_past_) * kv));
    }
    // Logits of the wanted rows that fall in this ubatch (only those: the LM head is costly).
    for (size_t x = 0; x < rows.size(); ++x) {
      const int r = rows[x];
      if (size_t(r) < done || size_t(r) >= done + n) continue;
      const int local_row = r - static_cast<int>(done);
      const Status st = fwd_->Logits(std::span<const int>(&local_row, 1), out + x * size_t(c.n_vocab));
      if (!st.ok() && fwd_->logits_non_finite()) return NameNonFiniteLayer(tokens.subspan(done, n), pos, local_row);
      IMPRESS_RETURN_IF_ERROR(st);
    }
    n_past_ += n;
    done += n;
  }
  ReportProgress(progress, total, total, "prefill");
  return Status::Ok();
}

Status Generator::NameNonFiniteLayer(std::span<const int32_t> tokens, std::span<const int32_t> positions, int row) {
  const ModelConfig& c = fwd_->config();
  const int kv = fwd_->kv_row();
  fwd_->set_check_layers(true);
  auto run = [&]() -> Status {
    IMPRESS_RETURN_IF_ERROR(fwd_->Begin(tokens, positions));
    for (int il = 0; il < c.n_layer; ++il) {
      IMPRESS_RETURN_IF_ERROR(fwd_->ComputeQKV(il));
      IMPRESS_RETURN_IF_ERROR(fwd_->Attend(il, PrefixKV{n_past_, k_cache_[il], v_cache_[il], {}}));
      IMPRESS_RETURN_IF_ERROR(
          fwd_->ExportKV(il, k_cache_[il] + size_t(n_past_) * kv, v_cache_[il] + size_t(n_past_) * kv));
    }
    std::vector<float> scratch(size_t(c.n_vocab));
    return fwd_->Logits(std::span<const int>(&row, 1), scratch.data());
  };
  Status st = run();
  fwd_->set_check_layers(false);
  if (st.ok())
    st = Status::Internal("model " + c.name + ": NaN or infinite logits that a second run did not reproduce");
  return st;
}

Result<GenerateResult> Generator::Generate(std::span<const int32_t> prompt, const GenerateOptions& o) {
  if (prompt.empty()) return Status::InvalidArgument("generate: empty prompt");
  if (o.max_tokens < 0) return Status::InvalidArgument("generate: negative max_tokens");
  if (int64_t(n_past_) + int64_t(prompt.size()) + o.max_tokens > n_ctx_)
    return Status::OutOfRange("prompt of " + std::to_string(prompt.size()) + " tokens" +
                              (n_past_ ? " after " + std::to_string(n_past_) + " cached" : std::string()) + " + " +
                              std::to_string(o.max_tokens) + " new tokens exceed the context of " +
                              std::to_string(n_ctx_) + " tokens");
  GenerateResult res;
  res.n_prompt = static_cast<int>(prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const double t0 = NowMs();
  IMPRESS_RETURN_IF_ERROR(Eval(prompt, &logits_, o.on_prefill_progress, o.cancel));
  res.prefill_ms = NowMs() - t0;
  Sampler sampler(o.sampling);
  double t_first = 0;
  for (int i = 0; i < o.max_tokens; ++i) {
    if (o.cancel && o.cancel->load(std::memory_order_relaxed)) {
      res.stop = StopReason::kCancelled;
      break;
    }
    const int32_t tok = sampler.Sample(logits_, history);
    if (i == 0) {
      t_first = NowMs();
      res.ttft_ms = t_first - t0;
    }
    res.tokens.push_back(tok);
    history.push_back(tok);
    const bool is_stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), tok) != o.stop_tokens.end();
    if (o.on_token && !o.on_token(tok)) {
      res.stop = StopReason::kCallback;
      break;
    }
    if (is_stop) {
      res.stop = StopReason::kStopToken;
      break;
    }
    if (i + 1 == o.max_tokens) break;  // the last token needs no forward pass
    IMPRESS_RETURN_IF_ERROR(Eval(std::span<const int32_t>(&tok, 1), &logits_));
  }
  if (!res.tokens.empty()) res.decode_ms = NowMs() - t_first;
  return res;
}

}  // namespace impress
