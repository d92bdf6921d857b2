// The forward pass on weights kept in their stored type (F16, BF16 and every quantized type the
// kernels know) against the forward pass on the same weights decoded to fp32 (DequantizedCopy):
// prefill (many rows: the int8 GEMM, and decoded tiles + sgemm), small batches and decode (rows quantized to int8
// once, integer GEMV split across threads), the embedding lookup and the LM head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/dequant.h"
#include "engine/model/random-model.h"
#include "tests/quant/random-blocks.h"

namespace impress {
namespace {

using quant::WeightType;

// Row lengths (n_embd, n_ff, n_head * head_dim) are multiples of 256, so every type fits.
ModelConfig Config() {
  return ModelConfig{.name = "random-stored",
                     .n_vocab = 300,
                     .n_ctx_train = 256,
                     .n_embd = 256,
                     .n_layer = 2,
                     .n_head = 4,
                     .n_head_kv = 2,
                     .head_dim = 64,
                     .n_ff = 512};
}

// Replaces an fp32 matrix by one of type t with about the same RMS: F16/BF16 hold the values
// rounded; quantized types hold random realistic blocks whose fp16 scales are then multiplied so
// that the decoded RMS matches (a block's values are linear in its scale fields).
void Store(Tensor& t, WeightType type, std::mt19937& rng) {
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t row_bytes = cols / quant::BlockElements(type) * quant::BlockBytes(type);
  std::vector<uint8_t> bytes(size_t(rows * row_bytes));
  if (type == WeightType::kF16 || type == WeightType::kBF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint16_t h;
      if (type == WeightType::kF16) {
        h = Fp32ToFp16(t.data[size_t(i)]);
      } else {
        uint32_t bits;
        std::memcpy(&bits, &t.data[size_t(i)], 4);
        h = uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);  // round to nearest even
      }
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    const int64_t block = quant::BlockBytes(type);
    for (size_t off = 0; off < bytes.size(); off += size_t(block))
      quant::test::FillBlock(type, quant::test::BlockCase::kRealistic, rng, bytes.data() + off);
    double want = 0, got = 0;
    for (float v : t.data) want += double(v) * v;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      quant::DequantizeRow(type, bytes.data() + r * row_bytes, row.data(), cols);
      for (float v : row) got += double(v) * v;
    }
    const float factor = float(std::sqrt(want / got));
    for (size_t off = 0; off < bytes.size(); off += size_t(block)) {
      for (int field : quant::test::HalfFieldOffsets(type)) {
        f16_t h;
        std::memcpy(&h, bytes.data() + off + field, 2);
        quant::test::PutHalf(bytes.data() + off + field, Fp32ToFp16(Fp16ToFp32(h) * factor));
      }
    }
  }
  t.data.clear();
  t.ggml_type = static_cast<uint32_t>(type);
  t.owned_bytes = std::move(bytes);
}

Model StoredModel(WeightType type) {
  auto m = RandomModel(Config(), {.seed = 7});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  std::mt19937 rng(static_cast<uint32_t>(type) + 1);
  ModelWeights& w = m->weights;
  Store(w.tok_embd, type, rng);
  Store(w.output, type, rng);
  for (LayerWeights& l : w.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) Store(*t, type, rng);
  return std::move(*m);
}

// Logits of every prompt row (24 rows in one batch and one LM head call: the tiled path
// throughout), then, continuing a generator's cache of that prompt, of 3 tokens in one batch
// (the batched GEMV) and of 4 single-token decode steps: (24 + 3 + 4) rows of n_vocab.
std::vector<float> RunModel(const Model& model, Backend& be) {
  const int V = model.config.n_vocab;
  std::vector<int32_t> prompt(24), positions(24);
  std::mt19937 rng(3);
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(V));
  std::vector<int> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int(i), positions[i] = int32_t(i);
  std::vector<float> out(size_t(24 + 3 + 4) * V);
  auto f = Forward::Create(model, be, {.max_batch = 32});
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return {};
  EXPECT_TRUE((*f)->Begin(prompt, positions).ok());
  for (int il = 0; il < model.config.n_layer; ++il) {
    EXPECT_TRUE((*f)->ComputeQKV(il).ok());
    EXPECT_TRUE((*f)->Attend(il, PrefixKV{}).ok());
  }
  EXPECT_TRUE((*f)->Logits(rows, out.data()).ok());

  auto g = Generator::Create(model, be, {.n_ctx = 64, .ubatch = 32});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return {};
  EXPECT_TRUE((*g)->Eval(prompt, nullptr).ok());
  const std::vector<int32_t> three = {5, 77, 250};
  const std::vector<int> three_rows = {0, 1, 2};
  EXPECT_TRUE((*g)->EvalRows(three, three_rows, out.data() + size_t(24) * V).ok());
  for (int i = 0; i < 4; ++i) {
    const int32_t tok = int32_t(11 + 60 * i);
    const int row = 0;
    EXPECT_TRUE((*g)->EvalRows(std::span<const int32_t>(&tok, 1), std::span<const int>(&row, 1),
                               out.data() + size_t(27 + i) * V)
                    .ok());
  }
  return out;
}

// Largest |a - b| over a group of rows, relative to the largest |b| of those rows.
double RelDiff(const std::vector<float>& a, const std::vector<float>& b, size_t begin, size_t end) {
  double d = 0, mx = 0;
  for (size_t i = begin; i < end; ++i) {
    EXPECT_TRUE(std::isfinite(a[i]));
    d = std::max(d, double(std::abs(a[i] - b[i])));
    mx = std::max(mx, double(std::abs(b[i])));
  }
  return d / std::max(mx, 1e-30);
}

class StoredForward : public ::testing::TestWithParam<WeightType> {};

TEST_P(StoredForward, MatchesTheSameWeightsDecodedToFp32) {
  const WeightType type = GetParam();
  const Model stored = StoredModel(type);
  auto decoded = DequantizedCopy(stored);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(decoded->weights.layers[0].w_up.data.size() == size_t(512 * 256));
  // Prefill through decoded fp32 tiles here; through the int8 GEMM (the default) below.
  auto be = MakeCpuBackend({.n_threads = 2, .int8_prefill = false});
  const std::vector<float> got = RunModel(stored, *be);
  const std::vector<float> want = RunModel(*decoded, *be);
  ASSERT_EQ(got.size(), want.size());
  const size_t V = size_t(Config().n_vocab);
  const double prefill = RelDiff(got, want, 0, 24 * V);
  const double small_batch = RelDiff(got, want, 24 * V, 27 * V);
  const double decode = RelDiff(got, want, 27 * V, 31 * V);
  // Prefill decodes tiles bit for bit and runs the same sgemm: only summation order may differ.
  EXPECT_LE(prefill, 1e-4) << quant::WeightTypeName(type);
  // Few rows run the GEMV kernels. F16/BF16 multiply fp32 activations: rounding only. The
  // quantized types multiply int8-quantized activations: per element |x - x_q| <= amax_block /
  // 254, uniformly spread, so a dot product's relative error is about
  // E|x - x_q| / rms(x) ~ (amax / rms) / (254 * sqrt(3)) ~ 3 / 440 ~ 0.7% for Gaussian-like
  // blocks; through two layers (q/k/v, o, gate/up, down, head) these add up to a few percent of
  // the largest logit. 5% bounds it with margin; a wrong row, block or scale gives ~100%.
  const bool half = type == WeightType::kF16 || type == WeightType::kBF16;
  const double bound = half ? 1e-4 : 0.05;
  EXPECT_LE(small_batch, bound) << quant::WeightTypeName(type);
  EXPECT_LE(decode, bound) << quant::WeightTypeName(type);
  std::printf("%-5s max relative logit difference: prefill %.2e, 3-row batch %.2e, decode %.2e\n",
              quant::WeightTypeName(type), prefill, small_batch, decode);

  // The int8 GEMM quantizes prefill's activation rows as the GEMV does decode's (in blocks of
  // 32, at least as fine as the GEMV's): the same bound. F16/BF16 do not use it: as exact as above.
  auto be8 = MakeCpuBackend({.n_threads = 2});
  const std::vector<float> got8 = RunModel(stored, *be8);
  ASSERT_EQ(got8.size(), want.size());
  const double prefill8 = RelDiff(got8, want, 0, 24 * V);
  const double decode8 = RelDiff(got8, want, 27 * V, 31 * V);
  EXPECT_LE(prefill8, half ? 1e-4 : bound) << quant::WeightTypeName(type);
  EXPECT_LE(decode8, bound) << quant::WeightTypeName(type);
  std::printf("%-5s with the int8 prefill GEMM: prefill %.2e, decode %.2e\n", quant::WeightTypeName(type), prefill8,
              decode8);
}

INSTANTIATE_TEST_SUITE_P(EveryType, StoredForward,
                         ::testing::Values(WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
                                           WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                                           WeightType::kQ5_K, WeightType::kQ6_K),
                         [](const auto& info) { return std::string(quant::WeightTypeName(info.param)); });

// A stored type the kernels cannot compute on is refused when the forward pass is made, naming
// the tensor and the type.
TEST(StoredForwardErrors, UnsupportedTypeIsNamed) {
  Model m = StoredModel(WeightType::kQ8_0);
  m.weights.layers[1].w_up.ggml_type = 10;  // Q2_K
  auto be = MakeCpuBackend({.n_threads = 1});
  auto f = Forward::Create(m, *be);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("layer 1 FFN up projection"), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("Q2_K"), std::string::npos) << f.status().ToString();
}

}  // namespace
}  // namespace impress
