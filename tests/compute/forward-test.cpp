// Forward and Generator on small random models (RandomModel): the layer-wise interface
// (prefix KV, exported KV, importance, probe scores) against one-shot runs of the same model,
// ubatching, the generator's contracts (context limit, stop tokens, streaming, cancellation).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/compute/sampler.h"
#include "engine/model/random-model.h"

namespace impress {
namespace {

// A random tiny model: GQA 6/2 with Llama-3 RoPE scaling, or OPT with biases and learned positions.
Model TinyModel(Arch arch, uint32_t seed) {
  const bool llama = arch == Arch::kLlama;
  ModelConfig c{.arch = arch,
                .name = llama ? "random-llama" : "random-opt",
                .n_vocab = 97,
                .n_ctx_train = 256,
                .n_embd = 48,
                .n_layer = 3,
                .n_head = 6,
                .n_head_kv = llama ? 2 : 6,
                .head_dim = 8,
                .n_ff = 80};
  if (llama) c.rope_scaling = {.type = RopeScalingType::kLlama3, .factor = 4.0f, .original_ctx = 32};
  auto m = RandomModel(c, {.seed = seed, .linear_gain = 1.5f});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : Model{};
}

std::vector<int32_t> Tokens(int n, uint32_t seed, int n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % n_vocab);
  return t;
}

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), start);
  return p;
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, mx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, double(std::abs(a[i] - b[i])));
    mx = std::max(mx, double(std::abs(b[i])));
  }
  return m / std::max(mx, 1e-30);
}

// One-shot: all tokens in one batch, no prefix; logits of every row.
std::vector<float> OneShot(Forward& f, const std::vector<int32_t>& toks) {
  const int n = int(toks.size());
  EXPECT_TRUE(f.Begin(toks, Iota(n, 0)).ok());
  for (int il = 0; il < f.config().n_layer; ++il) {
    EXPECT_TRUE(f.ComputeQKV(il).ok());
    EXPECT_TRUE(f.Attend(il, PrefixKV{}).ok());
  }
  std::vector<int> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> logits(size_t(n) * f.config().n_vocab);
  EXPECT_TRUE(f.Logits(rows, logits.data()).ok());
  return logits;
}

// Every layer's K and V of a prefix, fp16 (n_prefix, kv_row) per layer, in host memory.
struct HostPrefixKv {
  std::vector<std::vector<f16_t>> k, v;
};

// A prefix pass that exports each layer's K/V (host memory is device memory on the CPU backend).
HostPrefixKv ExportPrefix(Forward& f, std::span<const int32_t> prefix) {
  const int n_p = int(prefix.size()), n_layer = f.config().n_layer;
  HostPrefixKv kv{std::vector<std::vector<f16_t>>(n_layer, std::vector<f16_t>(size_t(n_p) * f.kv_row())), {}};
  kv.v = kv.k;
  EXPECT_TRUE(f.Begin(prefix, Iota(n_p, 0)).ok());
  for (int il = 0; il < n_layer; ++il) {
    EXPECT_TRUE(f.ComputeQKV(il).ok());
    EXPECT_TRUE(f.ExportKVToHost(il, kv.k[il].data(), kv.v[il].data()).ok());
    EXPECT_TRUE(f.Attend(il, PrefixKV{}).ok());
  }
  return kv;
}

class ForwardTest : public ::testing::TestWithParam<Arch> {
 protected:
  void SetUp() override {
    model_ = TinyModel(GetParam(), 42);
    be_ = MakeCpuBackend({.n_threads = 2, .int8_key_scores = false});  // fp32 probe scores, as attention
    auto f = Forward::Create(model_, *be_, {64});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fwd_ = std::move(*f);
  }
  Model model_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Forward> fwd_;
};

TEST_P(ForwardTest, LayerwiseWithExportedPrefixKvEqualsOneShot) {
  Forward& f = *fwd_;
  const ModelConfig& c = f.config();
  const int n_p = 40, n_q = 11;
  const auto toks = Tokens(n_p + n_q, 1, c.n_vocab);
  const std::vector<float> want = OneShot(f, toks);

  const auto [k, v] = ExportPrefix(f, std::span(toks).first(n_p));
  ASSERT_FALSE(HasFailure());
  // Query pass over the exported prefix.
  const auto prefix_pos = Iota(n_p, 0);
  ASSERT_TRUE(f.Begin(std::span(toks).subspan(n_p), Iota(n_q, n_p)).ok());
  for (int il = 0; il < c.n_layer; ++il) {
    ASSERT_TRUE(f.ComputeQKV(il).ok());
    PrefixKV p{n_p, DevPtr<const f16_t>(k[il].data()), DevPtr<const f16_t>(v[il].data()), prefix_pos};
    ASSERT_TRUE(f.Attend(il, p).ok());
  }
  std::vector<int> rows(n_q);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> got(size_t(n_q) * c.n_vocab);
  ASSERT_TRUE(f.Logits(rows, got.data()).ok());
  const std::vector<float> tail(want.end() - got.size(), want.end());
  EXPECT_LT(MaxRelDiff(got, tail), 1e-4);
}

TEST_P(ForwardTest, ProbeScoresEqualAttendImportanceAndSumToRows) {
  Forward& f = *fwd_;
  const ModelConfig& c = f.config();
  const int n_p = 30, n_q = 9, kv = f.kv_row(), hd = c.head_dim;
  const auto toks = Tokens(n_p + n_q, 2, c.n_vocab);
  const auto [k, v] = ExportPrefix(f, std::span(toks).first(n_p));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(f.Begin(std::span(toks).subspan(n_p), Iota(n_q, n_p)).ok());
  const std::vector<int> probe_kv = {0};
  std::vector<int> probe_q;  // the query heads of kv head 0
  for (int h = 0; h < c.n_head / c.n_head_kv; ++h) probe_q.push_back(h);
  for (int il = 0; il < c.n_layer; ++il) {
    ASSERT_TRUE(f.ComputeQKV(il).ok());
    std::vector<f16_t> probe_keys;  // (n_p, 1, hd): kv head 0 only
    for (int t = 0; t < n_p; ++t)
      probe_keys.insert(probe_keys.end(), k[il].begin() + t * kv, k[il].begin() + t * kv + hd);
    std::vector<float> probe(probe_q.size() * n_p);
    ASSERT_TRUE(
        f.ScoreKeys(il, PrefixKeys{n_p, DevPtr<const f16_t>(probe_keys.data()), probe_kv}, probe_q, probe.data()).ok());
    std::vector<float> imp(probe_q.size() * (n_p + n_q));
    ImportanceRequest req{probe_q, true, imp.data()};
    ASSERT_TRUE(
        f.Attend(il, PrefixKV{n_p, DevPtr<const f16_t>(k[il].data()), DevPtr<const f16_t>(v[il].data()), {}}, &req)
            .ok());
    for (size_t x = 0; x < probe_q.size(); ++x) {
      double sum = 0;
      for (int j = 0; j < n_p + n_q; ++j) sum += imp[x * (n_p + n_q) + j];
      EXPECT_NEAR(sum, n_q, 1e-4) << "layer " << il << " head " << probe_q[x];
      for (int j = 0; j < n_p; ++j)
        ASSERT_NEAR(probe[x * n_p + j], imp[x * (n_p + n_q) + j], 1e-6) << "layer " << il << " column " << j;
    }
  }
}

// PredictScores(il) applies layer il's norm and projections to the stream entering layer il - 1.
// With layer il - 1 made the identity (its output projection and FFN down projection zero, no
// biases there), that stream is exactly what enters layer il: the prediction must equal layer
// il's own ScoreKeys bit for bit. It must also change nothing layer il - 1's Attend computes.
TEST_P(ForwardTest, PredictedScoresAreTheNextLayersScoresWhenALayerIsTheIdentity) {
  const ModelConfig& c0 = model_.config;
  const int n_p = 30, n_q = 9, hd = c0.head_dim, kv = c0.n_head_kv * hd;
  const auto toks = Tokens(n_p + n_q, 6, c0.n_vocab);
  const auto [k, v] = ExportPrefix(*fwd_, std::span(toks).first(n_p));
  ASSERT_FALSE(HasFailure());
  const std::vector<int> probe_kv = {0};
  std::vector<int> probe_q;  // the query heads of kv head 0
  for (int h = 0; h < c0.n_head / c0.n_head_kv; ++h) probe_q.push_back(h);
  auto keys_of = [&](int il, int g) {  // (n_p, 1, hd): kv head g of the exported prefix
    std::vector<f16_t> out;
    for (int t = 0; t < n_p; ++t)
      out.insert(out.end(), k[il].begin() + t * kv + g * hd, k[il].begin() + t * kv + (g + 1) * hd);
    return out;
  };
  const std::vector<f16_t> k1 = keys_of(1, 0);
  const PrefixKeys keys1{n_p, DevPtr<const f16_t>(k1.data()), probe_kv};
  auto prefix = [&](int il) {
    return PrefixKV{n_p, DevPtr<const f16_t>(k[il].data()), DevPtr<const f16_t>(v[il].data()), {}};
  };

  // The unchanged model: predicting layer 1 during layer 0 leaves the logits as they were.
  auto logits = [&](Forward& f, bool predict, std::vector<float>* predicted) {
    EXPECT_TRUE(f.Begin(std::span(toks).subspan(n_p), Iota(n_q, n_p)).ok());
    for (int il = 0; il < f.config().n_layer; ++il) {
      EXPECT_TRUE(f.ComputeQKV(il).ok());
      if (predict && il == 0) {
        predicted->assign(probe_q.size() * n_p, 0.0f);
        EXPECT_TRUE(f.PredictScores(1, keys1, probe_q, predicted->data()).ok());
      }
      EXPECT_TRUE(f.Attend(il, prefix(il)).ok());
    }
    std::vector<float> out(size_t(c0.n_vocab));
    EXPECT_TRUE(f.Logits(std::vector<int>{n_q - 1}, out.data()).ok());
    return out;
  };
  std::vector<float> predicted;
  const std::vector<float> plain = logits(*fwd_, false, nullptr);
  EXPECT_EQ(logits(*fwd_, true, &predicted), plain);
  double sum = 0;
  for (float x : predicted) sum += x;
  EXPECT_GT(sum, 0.5 * n_q) << "each query row gives most of its weight to the 30 prefix keys";
  EXPECT_LE(sum, double(n_q) * probe_q.size() * (1 + 1e-5));

  // Order is checked: only for the next layer, after its predecessor's ComputeQKV, before Attend.
  ASSERT_TRUE(fwd_->Begin(std::span(toks).subspan(n_p), Iota(n_q, n_p)).ok());
  EXPECT_EQ(fwd_->PredictScores(1, keys1, probe_q, predicted.data()).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(fwd_->ComputeQKV(0).ok());
  EXPECT_EQ(fwd_->PredictScores(2, keys1, probe_q, predicted.data()).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(fwd_->Attend(0, prefix(0)).ok());
  EXPECT_EQ(fwd_->PredictScores(1, keys1, probe_q, predicted.data()).code(), Status::Code::kInvalidArgument);

  // Layer 0 made the identity: the prediction is layer 1's own score, with the probe heads in the
  // first kv group and in the last (the prediction projects K's rows up to the last group it
  // scores).
  Model id = TinyModel(GetParam(), 42);
  LayerWeights& l0 = id.weights.layers[0];
  for (Tensor* t : {&l0.wo, &l0.w_down}) std::fill(t->data.begin(), t->data.end(), 0.0f);
  for (Tensor* t : {&l0.bo, &l0.b_down}) std::fill(t->data.begin(), t->data.end(), 0.0f);
  if (!id.config.do_layer_norm_before) GTEST_SKIP() << "post-LN: a zero sublayer still renormalises the stream";
  auto f = Forward::Create(id, *be_, {64});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const int group = c0.n_head / c0.n_head_kv;
  for (int g : {0, c0.n_head_kv - 1}) {
    SCOPED_TRACE("kv head " + std::to_string(g));
    std::vector<int> heads;  // the query heads of kv head g
    for (int h = g * group; h < (g + 1) * group; ++h) heads.push_back(h);
    const std::vector<int> kv_g = {g};
    const std::vector<f16_t> kg = keys_of(1, g);
    const PrefixKeys keys{n_p, DevPtr<const f16_t>(kg.data()), kv_g};
    std::vector<float> guess(heads.size() * n_p), actual(heads.size() * n_p);
    ASSERT_TRUE((*f)->Begin(std::span(toks).subspan(n_p), Iota(n_q, n_p)).ok());
    ASSERT_TRUE((*f)->ComputeQKV(0).ok());
    ASSERT_TRUE((*f)->PredictScores(1, keys, heads, guess.data()).ok());
    ASSERT_TRUE((*f)->Attend(0, prefix(0)).ok());
    ASSERT_TRUE((*f)->ComputeQKV(1).ok());
    ASSERT_TRUE((*f)->ScoreKeys(1, keys, heads, actual.data()).ok());
    EXPECT_EQ(guess, actual);
  }
}

TEST_P(ForwardTest, GeneratorUbatchesMatchOneBatch) {
  const int n = 50;
  const auto toks = Tokens(n, 3, model_.config.n_vocab);
  std::vector<float> a, b;
  auto g1 = Generator::Create(model_, *be_, {128, 64});
  auto g2 = Generator::Create(model_, *be_, {128, 7});
  ASSERT_TRUE(g1.ok() && g2.ok());
  ASSERT_TRUE((*g1)->Eval(toks, &a).ok());
  int n_progress = 0;
  ASSERT_TRUE((*g2)->Eval(toks, &b, [&](uint64_t, uint64_t, std::string_view) { return ++n_progress > 0; }).ok());
  EXPECT_GE(n_progress, 8);  // once per ubatch and at the end
  EXPECT_LT(MaxRelDiff(b, a), 1e-4);
  // Decoding one token at a time continues the same sequence.
  const auto more = Tokens(5, 4, model_.config.n_vocab);
  for (int32_t t : more) ASSERT_TRUE((*g2)->Eval(std::span(&t, 1), &b).ok());
  ASSERT_TRUE((*g1)->Eval(more, &a).ok());
  EXPECT_LT(MaxRelDiff(b, a), 1e-4);
  EXPECT_EQ((*g2)->n_past(), n + 5);
}

TEST_P(ForwardTest, GenerateHonoursContextStopTokensStreamingAndCancel) {
  auto g = Generator::Create(model_, *be_, {64, 16});
  ASSERT_TRUE(g.ok());
  Generator& gen = **g;
  const auto prompt = Tokens(20, 5, model_.config.n_vocab);
  GenerateOptions o;
  o.max_tokens = 45;  // 20 + 45 > 64
  auto r = gen.Generate(prompt, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kOutOfRange);
  EXPECT_EQ(gen.n_past(), 0);  // refused before any work

  o.max_tokens = 10;
  std::vector<int32_t> streamed;
  o.on_token = [&](int32_t t) {
    streamed.push_back(t);
    return true;
  };
  r = gen.Generate(prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens.size(), 10u);
  EXPECT_EQ(streamed, r->tokens);
  EXPECT_EQ(r->stop, StopReason::kMaxTokens);
  const std::vector<int32_t> greedy = r->tokens;

  // Stop token: the third greedy token ends generation (unless it appeared earlier).
  gen.Reset();
  o.stop_tokens = {greedy[2]};
  streamed.clear();
  r = gen.Generate(prompt, o);
  ASSERT_TRUE(r.ok());
  const size_t first = std::find(greedy.begin(), greedy.end(), greedy[2]) - greedy.begin();
  EXPECT_EQ(r->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + first + 1));
  EXPECT_EQ(r->stop, StopReason::kStopToken);

  // The streaming callback can stop it.
  gen.Reset();
  o.stop_tokens.clear();
  o.on_token = [&](int32_t) { return false; };
  r = gen.Generate(prompt, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens.size(), 1u);
  EXPECT_EQ(r->stop, StopReason::kCallback);

  // Cancellation before the first token.
  gen.Reset();
  std::atomic<bool> cancel{true};
  o.on_token = nullptr;
  o.cancel = &cancel;
  r = gen.Generate(prompt, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCancelled);
}

TEST_P(ForwardTest, BadInputsGiveErrors) {
  Forward& f = *fwd_;
  const std::vector<int32_t> bad_tok = {5, f.config().n_vocab};
  EXPECT_EQ(f.Begin(bad_tok, Iota(2, 0)).code(), Status::Code::kInvalidArgument);
  const std::vector<int32_t> ok_tok = {1, 2};
  EXPECT_EQ(f.Begin(ok_tok, Iota(3, 0)).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(f.Begin(ok_tok, Iota(2, 5)).ok());
  EXPECT_FALSE(f.ComputeQKV(1).ok());  // layers go in order
  ASSERT_TRUE(f.ComputeQKV(0).ok());
  const std::vector<int32_t> late = {1, 7};  // position 7 does not precede the batch at 5
  std::vector<f16_t> kv(2 * f.kv_row());
  EXPECT_EQ(f.Attend(0, PrefixKV{2, DevPtr<const f16_t>(kv.data()), DevPtr<const f16_t>(kv.data()), late}).code(),
            Status::Code::kInvalidArgument);
  std::vector<float> logits(f.config().n_vocab);
  const int row = 0;
  EXPECT_FALSE(f.Logits(std::span(&row, 1), logits.data()).ok());  // layers not done
  Model broken = model_;
  broken.weights.layers[1].wk.shape = {3, 3};
  auto r = Forward::Create(broken, *be_, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 1 key projection"), std::string::npos) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardTest, ::testing::Values(Arch::kLlama, Arch::kOpt),
                         [](const auto& info) { return info.param == Arch::kLlama ? "Llama" : "Opt"; });

TEST(RopeInvFreq, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 500000.0f;
  const auto plain = RopeInvFreq(c);
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  const auto scaled = RopeInvFreq(c);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);           // wavelength 2*pi: untouched
  EXPECT_FLOAT_EQ(scaled[31], plain[31] / 8.0f);  // longest wavelength: divided by factor
  c.rope_scaling = {RopeScalingType::kLinear, 2.0f, 1.0f, 4.0f, 8192};
  EXPECT_FLOAT_EQ(RopeInvFreq(c)[5], plain[5] / 2.0f);
}

// ---- sampler ----

TEST(Sampler, GreedyIsArgmaxAndTopKOneIsGreedyAtAnyTemperature) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  Sampler greedy({});
  EXPECT_EQ(greedy.Sample(logits, {}), 1);
  Sampler k1({1.5f, 1, 1.0f, 1.0f, 64, 7});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.Sample(logits, {}), 1);
}

TEST(Sampler, SeedDeterminesTheSequenceAndTopPCutsTheTail) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = float(i) * 0.1f;
  SamplerOptions o{1.0f, 0, 1.0f, 1.0f, 64, 123};
  Sampler a(o), b(o);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 50; ++i) {
    sa.push_back(a.Sample(logits, {}));
    sb.push_back(b.Sample(logits, {}));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_GT(std::set<int32_t>(sa.begin(), sa.end()).size(), 5u);  // it does sample
  o.top_p = 0.2f;                                                 // only the few highest logits reach 20% of the mass
  Sampler p(o);
  for (int i = 0; i < 200; ++i) EXPECT_GE(p.Sample(logits, {}), 40);
}

TEST(Sampler, RepetitionPenaltyDemotesRecentTokens) {
  std::vector<float> logits = {1.0f, 1.2f, 0.5f};
  SamplerOptions o;
  o.repeat_penalty = 1.5f;
  Sampler s(o);
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(s.Sample(logits, history), 0);  // 1.2 / 1.5 = 0.8 < 1.0
  EXPECT_EQ(s.Sample(logits, {}), 1);
}

}  // namespace
}  // namespace impress
