// Whole-model quantization quality, measured the way quantization quality is measured, on a
// trained model: the default model (SmolLM2-135M-Instruct) is quantized by QuantizeModel (what
// `impress quantize` runs) from its weights expanded to fp32, and over the first 1,100 tokens of
// the GPL-3.0 text the logits of the quantized path (weights used in their stored type,
// activations quantized to int8 blocks, two sets for Q8_0) are compared at every position with
// two numpy fp32 reference passes: of the fp32 source weights (the `gguf` package's own
// dequantization of the default model: weights and path together), and of the quantized file's
// own weights expanded to fp32 (what the quantized path alone loses). For each: top-1 agreement,
// mean KL(reference || ours) and how many tokens of the greedy 32-token continuation equal the
// reference's, printed per type. "stored" measures the default model itself (the reference's
// exact weights).
//
// CI runs Q8_0 only, and each reference pass (~30 s of numpy) is cached per machine, keyed by the
// model's fingerprint, reference.py and the tokens (CachedNumpyReference), so a run takes seconds
// once the cache is warm. IMPRESS_QUALITY_TYPES=all (or a comma-separated list) prints the
// figures for every type. Skips without the default model.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/model/gguf-builder.h"
#include "tests/model/reference-compare.h"

namespace impress {
namespace {

constexpr int kTokens = 1100, kGreedy = 32;

std::vector<std::string> TypesToMeasure() {
  const char* e = std::getenv("IMPRESS_QUALITY_TYPES");
  const std::string list = e && *e ? e : "q8_0";
  if (list == "all") return {"stored", "q8_0", "q6_k", "q5_k", "q5_1", "q5_0", "q4_k_m", "q4_k", "q4_1", "q4_0"};
  std::vector<std::string> types;
  std::stringstream ss(list);
  for (std::string t; std::getline(ss, t, ',');) types.push_back(t);
  return types;
}

struct Agreement {
  double top1 = 0, kl = 0;
  int greedy_same = 0;  // tokens of the greedy continuation equal before the first difference
};

Agreement Compare(const float* logits, const std::vector<int32_t>& greedy, const test::RefResult& ref, int n_rows) {
  test::LogitStats st;
  test::AddLogitRows(logits, ref.logits[0].data(), size_t(n_rows), size_t(ref.n_vocab), &st);
  Agreement a{st.top1(), st.mean_kl(), 0};
  while (a.greedy_same < int(greedy.size()) && a.greedy_same < int(ref.greedy[0].size()) &&
         greedy[size_t(a.greedy_same)] == ref.greedy[0][size_t(a.greedy_same)]) {
    ++a.greedy_same;
  }
  return a;
}

TEST(QuantizedQuality, QuantizedPathAgainstTheFp32Reference) {
  const std::string model_path = test_support::DefaultModel();
  if (!std::filesystem::exists(model_path)) GTEST_SKIP() << "default model not found at " << model_path;
  const std::string dir = test::MakeTempDir("quality");
  ASSERT_FALSE(dir.empty());

  auto tok = Tokenizer::Load(model_path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::ifstream in(test::SourceDir() + "/assets/docs/gpl-3.0.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  test::RefSequence seq;
  seq.tokens = tok->Encode(text, false, false);
  ASSERT_GE(seq.tokens.size(), size_t(kTokens));
  seq.tokens.resize(kTokens);
  for (int i = 0; i < kTokens; ++i) seq.rows.push_back(i);
  seq.greedy = kGreedy;
  std::string fingerprint;
  {
    auto source = LoadModel(model_path);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    fingerprint = source->config.fingerprint;
  }
  test::RefResult ref;
  const int rc = test::CachedNumpyReference(model_path, fingerprint, {seq}, &ref);
  if (rc == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  ASSERT_EQ(rc, 0) << "reference.py failed";
  const size_t V = size_t(ref.n_vocab);

  std::printf("%-7s %8s | %-32s | %s\n", "type", "MiB", "vs the fp32 source: top-1, KL, greedy",
              "vs its own weights in fp32: top-1, KL, greedy");
  for (const std::string& type : TypesToMeasure()) {
    SCOPED_TRACE(type);
    // "stored": the default model itself, in its own type (the reference's weights exactly).
    const std::string path = type == "stored" ? model_path : dir + "/" + type + ".gguf";
    if (type != "stored") {
      ASSERT_TRUE(QuantizeModel(model_path, path, {.type = type, .n_threads = 2}).ok());
    }
    auto model = LoadModel(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto be = MakeCpuBackend({2});
    auto gen = Generator::Create(*model, *be, {kTokens + kGreedy + 1, 512});
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    std::vector<float> got(size_t(kTokens) * V);
    ASSERT_TRUE((*gen)->EvalRows(seq.tokens, seq.rows, got.data()).ok());
    (*gen)->Reset();
    GenerateOptions o;
    o.max_tokens = kGreedy;
    auto r = (*gen)->Generate(seq.tokens, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // The same logits and continuation against two references: the fp32 weights the file was
    // quantized from (weights and path together), and the file's own weights expanded to fp32 by
    // the gguf package (the quantized path alone: what the kernels and activations lose).
    test::RefResult own;
    if (type != "stored") {
      const int own_rc = test::CachedNumpyReference(path, model->config.fingerprint, {seq}, &own);
      ASSERT_EQ(own_rc, 0) << "reference.py failed on " << path;
    }
    const test::RefResult& own_ref = type == "stored" ? ref : own;
    Agreement source = Compare(got.data(), r->tokens, ref, kTokens);
    Agreement self = Compare(got.data(), r->tokens, own_ref, kTokens);
    std::error_code ec;
    std::printf("%-7s %8.2f | %6.2f%% %9.3g %2d/%d equal      | %6.2f%% %9.3g %2d/%d equal\n", type.c_str(),
                double(std::filesystem::file_size(path, ec)) / (1 << 20), 100 * source.top1, source.kl,
                source.greedy_same, kGreedy, 100 * self.top1, self.kl, self.greedy_same, kGreedy);
    std::fflush(stdout);
    if (type != "stored") std::filesystem::remove(path, ec);
    if (type == "q8_0") {
      // The quality target: top-1 >= 99%, mean KL <= 1e-3 and an identical greedy continuation,
      // met by the quantized path against its own weights (Q8_0 matrices take precise two-set
      // activations; one int8 set gave 96.0% / 4.8e-3 here). Against the fp32 source, the Q8_0
      // weights themselves cost this 135M model ~2% of top-1 (97.7% / 1.7e-3 with exactly fp32
      // activations too); those bounds guard that level.
      EXPECT_GE(self.top1, 0.99);
      EXPECT_LE(self.kl, 1e-3);
      EXPECT_EQ(self.greedy_same, kGreedy);
      EXPECT_GE(source.top1, 0.97);
      EXPECT_LE(source.kl, 2.5e-3);
      EXPECT_EQ(source.greedy_same, kGreedy);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace impress
