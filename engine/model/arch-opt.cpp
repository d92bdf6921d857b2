// OPT (OPTForCausalLM; Hugging Face folders only): LayerNorm, learned positions looked up at
// pos + 2, a ReLU FFN, biases everywhere, the LM head tied to the token embedding. OPT-350m is
// post-LN (do_layer_norm_before false: no final norm) and keeps its embeddings in 512 dims,
// projected to and from the hidden size (project_in / project_out).
#include <string>

#include "engine/model/arch.h"
#include "engine/model/gguf-config.h"
#include "engine/model/hf-config.h"

namespace impress {
namespace {

using W = ModelWeights;
using L = LayerWeights;

constexpr const char* kHfClasses[] = {"OPTForCausalLM"};

constexpr TensorSpec kModelTensors[] = {
    {.model = &W::tok_embd,
     .what = "token embedding",
     .hf = "model.decoder.embed_tokens.weight",
     .rows = Dim::kVocab,
     .cols = Dim::kEmbdIn,
     .role = Role::kEmbedding},
    {.model = &W::pos_embd,
     .what = "position embedding",
     .hf = "model.decoder.embed_positions.weight",
     .rows = Dim::kPositions,
     .cols = Dim::kEmbd,
     .role = Role::kPositions},
    {.model = &W::project_in,
     .what = "input projection",
     .hf = "model.decoder.project_in.weight",
     .rows = Dim::kEmbd,
     .cols = Dim::kEmbdIn,
     .when = When::kEmbdProjected},
    {.model = &W::project_out,
     .what = "output projection",
     .hf = "model.decoder.project_out.weight",
     .rows = Dim::kEmbdIn,
     .cols = Dim::kEmbd,
     .when = When::kEmbdProjected},
    // Transformers drops the final layer norm of post-LN models (OPT-350m).
    {.model = &W::output_norm,
     .what = "output norm weight",
     .hf = "model.decoder.final_layer_norm.weight",
     .rows = Dim::kEmbd,
     .role = Role::kNorm,
     .when = When::kFinalNorm},
    {.model = &W::output_norm_b,
     .what = "output norm bias",
     .hf = "model.decoder.final_layer_norm.bias",
     .rows = Dim::kEmbd,
     .role = Role::kBias,
     .when = When::kFinalNorm},
};

constexpr TensorSpec kLayerTensors[] = {
    {.layer = &L::attn_norm,
     .what = "attention norm weight",
     .hf = "self_attn_layer_norm.weight",
     .rows = Dim::kEmbd,
     .role = Role::kNorm},
    {.layer = &L::ffn_norm,
     .what = "FFN norm weight",
     .hf = "final_layer_norm.weight",
     .rows = Dim::kEmbd,
     .role = Role::kNorm},
    {.layer = &L::wq, .what = "query projection", .hf = "self_attn.q_proj.weight", .rows = Dim::kQ, .cols = Dim::kEmbd},
    {.layer = &L::wk, .what = "key projection", .hf = "self_attn.k_proj.weight", .rows = Dim::kKV, .cols = Dim::kEmbd},
    {.layer = &L::wv,
     .what = "value projection",
     .hf = "self_attn.v_proj.weight",
     .rows = Dim::kKV,
     .cols = Dim::kEmbd},
    {.layer = &L::wo,
     .what = "attention output projection",
     .hf = "self_attn.out_proj.weight",
     .rows = Dim::kEmbd,
     .cols = Dim::kQ},
    {.layer = &L::w_up, .what = "fc1", .hf = "fc1.weight", .rows = Dim::kFf, .cols = Dim::kEmbd},
    {.layer = &L::w_down, .what = "fc2", .hf = "fc2.weight", .rows = Dim::kEmbd, .cols = Dim::kFf},
    {.layer = &L::attn_norm_b,
     .what = "attention norm bias",
     .hf = "self_attn_layer_norm.bias",
     .rows = Dim::kEmbd,
     .role = Role::kBias},
    {.layer = &L::ffn_norm_b,
     .what = "FFN norm bias",
     .hf = "final_layer_norm.bias",
     .rows = Dim::kEmbd,
     .role = Role::kBias},
    {.layer = &L::bq, .what = "query bias", .hf = "self_attn.q_proj.bias", .rows = Dim::kQ, .role = Role::kBias},
    {.layer = &L::bk, .what = "key bias", .hf = "self_attn.k_proj.bias", .rows = Dim::kKV, .role = Role::kBias},
    {.layer = &L::bv, .what = "value bias", .hf = "self_attn.v_proj.bias", .rows = Dim::kKV, .role = Role::kBias},
    {.layer = &L::bo,
     .what = "attention output bias",
     .hf = "self_attn.out_proj.bias",
     .rows = Dim::kEmbd,
     .role = Role::kBias},
    {.layer = &L::b_up, .what = "fc1 bias", .hf = "fc1.bias", .rows = Dim::kFf, .role = Role::kBias},
    {.layer = &L::b_down, .what = "fc2 bias", .hf = "fc2.bias", .rows = Dim::kEmbd, .role = Role::kBias},
};

// word_embed_proj_dim, do_layer_norm_before; refuses the variants the graph lacks.
Status ReadOptExtras(const HfConfig& cfg, ModelConfig* c) {
  const int64_t embd = c->n_embd;
  IMPRESS_ASSIGN_OR_RETURN(const int64_t proj, cfg.Int("word_embed_proj_dim", kMaxEmbd, &embd));
  IMPRESS_ASSIGN_OR_RETURN(const bool pre_ln, cfg.Bool("do_layer_norm_before", true));
  IMPRESS_ASSIGN_OR_RETURN(const bool bias, cfg.Bool("enable_bias", true));
  IMPRESS_ASSIGN_OR_RETURN(const bool affine, cfg.Bool("layer_norm_elementwise_affine", true));
  auto act = cfg.json().find("activation_function");
  if (act != cfg.json().end() && !(act->is_string() && act->get<std::string>() == "relu")) {
    return Status::Unsupported(cfg.path() + ": activation_function must be 'relu' for OPT");
  }
  if (!bias || !affine) {
    return Status::Unsupported(cfg.path() + ": OPT without biases or without affine layer norms is not supported");
  }
  c->pos_offset = 2;
  c->word_embed_proj_dim = proj == embd ? 0 : int(proj);
  c->do_layer_norm_before = pre_ln;
  return Status::Ok();
}

}  // namespace

extern constinit const ArchSpec kOptArch = {
    .name = "opt",
    .hf_classes = kHfClasses,
    .hf_model_type = "opt",
    .hf_layer_prefix = "model.decoder.layers.",
    .hf_keep_stored = false,  // OPT's weights are converted to fp32 at load
    .hf_add_bos = true,
    .graph = {.norm = NormKind::kLayer, .position = PositionKind::kLearned, .ffn = FfnKind::kRelu},
    .hf_keys = {.n_head_kv = nullptr,
                .n_ff = "ffn_dim",
                .default_ctx = 0,
                .head_dim = nullptr,
                .norm_eps = nullptr,
                .default_norm_eps = 1e-5,  // torch.nn.LayerNorm's default, which OPT uses
                .rope_theta = nullptr,
                .tied = nullptr},
    .read_hf_extras = ReadOptExtras,
    .model_tensors = kModelTensors,
    .layer_tensors = kLayerTensors,
};

}  // namespace impress
