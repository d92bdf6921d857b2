// Forward: the transformer forward pass, one layer at a time, on a Backend. It executes the graph
// of the model's architecture (ArchGraph, engine/model/arch.h: norm kind, RoPE or learned
// positions, SwiGLU or ReLU FFN, per-head Q/K norms) and adds the biases the model has; nothing
// here names an architecture.
//
// The IMPRESS pipeline (docs/design.md sections 2-3) drives it layer by layer for a batch of new
// tokens at given positions:
//
//   fwd.Begin(tokens, positions);                    // embeddings of the new tokens
//   for il in 0..n_layer:
//     fwd.ComputeQKV(il);                            // norm, Q/K/V projections, RoPE
//     fwd.ScoreKeys(il, probe_keys, probe_heads, imp);   // optional: probe importance
//     fwd.ExportKV(il, k_dst, v_dst);                // optional: new tokens' fp16 K (post-RoPE), V
//     fwd.Attend(il, prefix, &importance_request);   // attention over prefix + new, then the
//                                                    // rest of the layer (out proj, FFN)
//   fwd.Logits(rows, out);                           // final norm + LM head for chosen rows
//
// The prefix of a layer is any subset of earlier tokens (their K post-RoPE and V, fp16, in
// device memory, layout (n, n_head_kv, head_dim)); every prefix token is visible to every new
// token, and new tokens are causal among themselves in batch order. A token's position only
// enters through RoPE or the learned position embedding, so reused K/V keep the positions they
// were computed at.
//
// Generator (below) is the ordinary path on the same pieces: a contiguous fp16 KV cache per
// layer, ubatched prefill, decode, sampling, stop tokens, streaming and cancellation.
//
// Thread contract: a Forward or Generator requires external synchronization (one thread at a
// time); it borrows the Model and the Backend, which must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/compute/backend.h"
#include "engine/compute/sampler.h"
#include "engine/model/arch.h"
#include "engine/model/model.h"

namespace impress {

// RoPE inverse frequencies (head_dim / 2) with the config's theta and scaling (none, linear,
// llama3), computed in double and rounded to float as Hugging Face does.
std::vector<float> RopeInvFreq(const ModelConfig& config);

// Checks that a config and its weights have consistent shapes for the forward pass.
Status ValidateModel(const Model& model);

// The K/V of a prefix set, fp16 in device memory, (n, n_head_kv, head_dim); K post-RoPE.
struct PrefixKV {
  int n = 0;
  DevPtr<const f16_t> k, v;
  // Optional (host): the tokens' original positions. When given, each must be smaller than
  // every new token's position (the prefix precedes the new tokens); they are not otherwise used.
  std::span<const int32_t> positions;
  // Optional: rows still arriving (AttentionArgs::prefix_arrivals); Attend waits for them and
  // fails (kIOError) when some never come.
  RowArrivals* arrivals = nullptr;
};

// Keys of a prefix set for some kv heads only (the probe): (n, kv_heads.size(), head_dim),
// slot s holding kv head kv_heads[s]. Or, on a backend whose memory the host addresses, the
// records of integer codes they are stored in (code_bits 8 or 4, base/kv-codes.h), one per token
// with kv_heads.size() heads, in host memory (ScoreKeysArgs::key_codes).
struct PrefixKeys {
  int n = 0;
  DevPtr<const f16_t> k;
  std::span<const int> kv_heads;
  int code_bits = 0;
  const uint8_t* codes = nullptr;
};

// H2O importance wanted from Attend: for each query head in heads, the column sums of its
// softmax weights over the new-token rows, into out (host), row x at out + x * ld, where
// ld = n_prefix, or n_prefix + n_new with include_new (new-token columns after the prefix).
struct ImportanceRequest {
  std::span<const int> heads;
  bool include_new = false;
  float* out = nullptr;
  int first_col = 0;  // the columns wanted start here; those before may come back zero
};

struct ForwardOptions {
  int max_batch = 512;  // most new tokens per Begin
};

class Forward {
 public:
  static Result<std::unique_ptr<Forward>> Create(const Model& model, Backend& backend,
                                                 const ForwardOptions& options = {});
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  const ModelConfig& config() const { return model_.config; }
  Backend& backend() { return be_; }
  int max_batch() const { return max_batch_; }
  int n_new() const { return n_new_; }
  int kv_row() const { return config().n_head_kv * config().head_dim; }  // elements per token

  // Starts a batch: 1 <= tokens.size() <= max_batch, positions.size() == tokens.size().
  // Token ids must be < n_vocab; OPT positions must have a learned embedding.
  Status Begin(std::span<const int32_t> tokens, std::span<const int32_t> positions);
  // Layer il's attention input norm, Q/K/V projections and RoPE. Layers go in order 0, 1, ...
  Status ComputeQKV(int il);
  // Probe importance (after ComputeQKV(il)): (query_heads.size(), keys.n) into out (host).
  // Equals what Attend would report for the same prefix and heads.
  Status ScoreKeys(int il, const PrefixKeys& keys, std::span<const int> query_heads, float* out);
  // A prediction of layer il's probe importance, made one layer early: after ComputeQKV(il - 1)
  // and before Attend(il - 1), layer il's input norm and Q/K projections are applied to the
  // residual stream as it is then (the input of layer il - 1, not yet of il), and the keys are
  // scored as ScoreKeys would. The residual stream changes little from one layer to the next, so
  // this ranks tokens much as layer il will, early enough to read them while il - 1 computes.
  // Changes nothing that Attend or ExportKV of il - 1 reads.
  Status PredictScores(int il, const PrefixKeys& keys, std::span<const int> query_heads, float* out);
  // The new tokens' K (post-RoPE) and V of layer il, fp16 (n_new, n_head_kv, head_dim), copied
  // to device memory at k_out / v_out, or to host memory. Valid from ComputeQKV(il) until the
  // next ComputeQKV or Begin (before or after Attend(il)).
  Status ExportKV(int il, DevPtr<f16_t> k_out, DevPtr<f16_t> v_out);
  Status ExportKVToHost(int il, f16_t* k_out, f16_t* v_out);
  // Attention over prefix + new tokens, then the output projection, residual and FFN.
  Status Attend(int il, const PrefixKV& prefix, const ImportanceRequest* importance = nullptr);
  // After the last layer: logits (rows.size(), n_vocab) of the chosen batch rows, into out (host).
  // Internal error naming the model when any is NaN or inf (a model that computes garbage
  // must not answer with an empty string); the layer is named when check_layers found it.
  // DataLoss naming the file when the model file changed on disk since it was loaded
  // (CheckModelFiles): nothing computed since, logits or K/V, may be used.
  Status Logits(std::span<const int> rows, float* out);

  // Diagnosis of non-finite output. With check_layers on, Begin and each Attend copy the batch's
  // residual stream to the host and note the first stage whose output holds NaN or inf: a
  // device-to-host copy per layer, so it is for re-running a batch whose logits were bad.
  void set_check_layers(bool on) { check_layers_ = on; }
  // kNoBadLayer when none was seen since Begin (or not checking); -1: the embeddings; il: the
  // output of layer il.
  static constexpr int kNoBadLayer = -2;
  int first_non_finite_layer() const { return first_bad_layer_; }
  // Whether the last Logits call found NaN or inf.
  bool logits_non_finite() const { return bad_logits_; }

 private:
  Forward(const Model& model, Backend& backend, int max_batch);
  Status Init();
  Status EnsureLogitsCapacity(int n_rows);
  // The current batch's queries and new keys (after ComputeQKV), as Attention and ScoreKeys take them.
  AttentionQuery Query() const;
  // ScoreKeys for the given query side.
  Status Score(const AttentionQuery& query, const PrefixKeys& keys, std::span<const int> query_heads, float* out);
  // Layer il's input norm, Q (its first q_rows values per token), K and, when v is set, V, with
  // biases, per-head norms and RoPE; K and V also to fp16.
  struct QkvOut {
    DevPtr<float> q;
    int q_rows = 0;
    int k_rows = 0;  // 0: all of K
    DevPtr<float> k, v;
    DevPtr<f16_t> k16, v16;
  };
  void ProjectQKV(int il, const QkvOut& out);
  // imp_, grown to hold at least n floats.
  Status EnsureImportanceCapacity(size_t n);
  enum class Stage { kIdle, kEmbedded, kQkv, kDone };
  // The graph's norm (RMSNorm, or LayerNorm with bias b) of n_rows rows of n_embd; out may be x.
  void Norm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, DevPtr<const float> b, int n_rows);

  const Model& model_;
  Backend& be_;
  const int max_batch_;
  const ArchGraph graph_;                       // the steps a layer runs (the model's architecture table)
  std::vector<DevPtr<void>> allocs_;            // freed in the destructor
  std::vector<DevPtr<const float>> constants_;  // released in the destructor
  std::vector<WeightRef> weights_;              // released in the destructor

  // Device copies (CPU: views) of the weights, by layer. Matrices keep the type the backend
  // computes on (CPU: the stored type, e.g. Q4_K); vectors are fp32.
  struct LayerDev {
    DevPtr<const float> attn_norm, attn_norm_b, bq, bk, bv, bo, q_norm, k_norm;
    DevPtr<const float> ffn_norm, ffn_norm_b, b_up, b_down;
    WeightRef wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  std::vector<LayerDev> layers_;
  DevPtr<const float> pos_embd_, output_norm_, output_norm_b_;
  WeightRef tok_embd_, project_in_, project_out_, output_;
  DevPtr<const float> inv_freq_;

  // Activations (max_batch rows). x_, xn_ and the fp16 K/V live through a layer; the others
  // are views of one block, each placed over buffers that are dead while it lives: q_ at its
  // start, then k_/v_ (dead once converted to fp16) and attn_ (written by attention, which
  // reads q_) both after q_; gate_/up_ (the FFN, after the output projection has read attn_)
  // and emb_ (Begin only) from its start.
  DevPtr<float> x_;            // (B, n_embd) residual stream
  DevPtr<float> xn_;           // (B, n_embd) normed input of a sublayer
  DevPtr<float> q_;            // (B, n_head * head_dim)
  DevPtr<float> k_, v_;        // (B, n_head_kv * head_dim) fp32
  DevPtr<f16_t> k16_, v16_;    // the same in fp16: what attention reads and ExportKV copies
  DevPtr<float> attn_;         // (B, n_head * head_dim)
  DevPtr<float> gate_, up_;    // (B, n_ff)
  DevPtr<float> emb_;          // (B, max(word_embed_proj_dim, n_embd)) embedding scratch
  DevPtr<int32_t> ids_, pos_;  // (B)
  DevPtr<float> pk_;           // (B, n_head_kv * head_dim) PredictScores' new keys, on first use
  DevPtr<f16_t> pk16_;         // the same in fp16
  DevPtr<float> imp_;          // importance scratch, grown on demand
  size_t imp_cap_ = 0;
  DevPtr<float> lx_, lx2_, logits_;  // logits rows scratch
  int logits_cap_ = 0;

  // check_layers_: the residual stream x_ (n_new_ rows) is finite? Notes il in first_bad_layer_.
  void CheckStream(int il);

  int n_new_ = 0;
  int32_t min_pos_ = 0;
  bool check_layers_ = false;
  int first_bad_layer_ = kNoBadLayer;
  bool bad_logits_ = false;
  std::vector<float> check_buf_;  // host copy of x_ while checking
  int il_ = -1;
  Stage stage_ = Stage::kIdle;
};

// ---- the ordinary path ------------------------------------------------------------------

struct GeneratorOptions {
  int n_ctx = 0;     // KV cache length; 0 = the model's training context
  int ubatch = 512;  // prefill batch
};

struct GenerateOptions {
  int max_tokens = 256;
  SamplerOptions sampling;
  std::vector<int32_t> stop_tokens;             // generation ends after emitting one
  std::function<bool(int32_t token)> on_token;  // streaming; return false to stop
  ProgressFn on_prefill_progress;               // (tokens done, total, "prefill"); false cancels
  const std::atomic<bool>* cancel = nullptr;    // set to true to stop (checked per token/ubatch)
};

enum class StopReason { kMaxTokens, kStopToken, kCallback, kCancelled };

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (a stop token included when hit)
  StopReason stop = StopReason::kMaxTokens;
  int n_prompt = 0;
  double prefill_ms = 0;  // prompt processing up to the first token's logits
  double ttft_ms = 0;     // until the first generated token was sampled
  double decode_ms = 0;   // the remaining tokens
};

class Generator {
 public:
  static Result<std::unique_ptr<Generator>> Create(const Model& model, Backend& backend,
                                                   const GeneratorOptions& options = {});
  ~Generator();

  int n_ctx() const { return n_ctx_; }
  int n_past() const { return n_past_; }
  Forward& forward() { return *fwd_; }
  void Reset() { n_past_ = 0; }

  // Appends tokens to the cache (positions n_past..) in ubatches; the last token's logits go to
  // last_logits when given. OutOfRange when the cache would overflow; Cancelled when progress
  // returns false or cancel is set (the cache then keeps what was done).
  Status Eval(std::span<const int32_t> tokens, std::vector<float>* last_logits, const ProgressFn& progress = nullptr,
              const std::atomic<bool>* cancel = nullptr);
  // The same, with the logits of chosen rows (indices into tokens, any order) into out (host),
  // rows.size() x n_vocab.
  Status EvalRows(std::span<const int32_t> tokens, std::span<const int> rows, float* out,
                  const ProgressFn& progress = nullptr, const std::atomic<bool>* cancel = nullptr);
  // Appends the prompt, then samples up to max_tokens tokens. OutOfRange (before any work)
  // when n_past + prompt + max_tokens exceeds n_ctx. Afterwards the cache holds the prompt and
  // every generated token but the last (n_past = before + prompt + tokens - 1).
  Result<GenerateResult> Generate(std::span<const int32_t> prompt, const GenerateOptions& options);

  // Layer il's cache, (n_ctx, n_head_kv, head_dim) fp16, rows [0, n_past) valid.
  DevPtr<const f16_t> KCache(int il) const { return k_cache_[il]; }
  DevPtr<const f16_t> VCache(int il) const { return v_cache_[il]; }

 private:
  Generator(Backend& backend) : be_(backend) {}
  // After bad logits for batch row `row`: runs the batch again (same positions, so the cache
  // rows it rewrites get the same values) with check_layers on, and returns Logits' error,
  // which then names the first non-finite layer.
  Status NameNonFiniteLayer(std::span<const int32_t> tokens, std::span<const int32_t> positions, int row);
  Backend& be_;
  std::unique_ptr<Forward> fwd_;
  int n_ctx_ = 0, ubatch_ = 0, n_past_ = 0;
  std::vector<DevPtr<f16_t>> k_cache_, v_cache_;
  std::vector<float> logits_;
};

}  // namespace impress
