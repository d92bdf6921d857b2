// The forward pass against the independent numpy reference (tests/reference/reference.py):
// SmolLM2-135M-Instruct (GGUF, Q4_1) on three token sequences, one over 1000 tokens, and tiny
// random-weight Llama, OPT, Qwen2 and Qwen3 Hugging Face folders written by
// tests/reference/make-tiny-models.py.
// Checks max |logit diff| / max |logit| < 1e-4 on chosen rows and identical greedy 32-token
// continuations (SmolLM2: on the two shorter sequences). Skips cleanly when the reference python or the default model
// is missing.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"
#include "tests/support/default-model.h"

#ifndef IMPRESS_PYTHON_DEFAULT
#define IMPRESS_PYTHON_DEFAULT ""
#endif

namespace impress {
namespace {

namespace fs = std::filesystem;

std::string Python() {
  const char* env = std::getenv("IMPRESS_PYTHON");
  std::string p = env && *env ? env : IMPRESS_PYTHON_DEFAULT;
  return !p.empty() && fs::exists(p) ? p : std::string();
}

std::string SourceDir() {
  const char* env = std::getenv("IMPRESS_SOURCE_DIR");
  return env && *env ? env : IMPRESS_SOURCE_DIR;
}

using ::impress::test_support::DefaultModel;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<int> rows;  // rows whose logits are compared
  int greedy = 32;
};

struct RefOutput {
  int n_vocab = 0;
  std::vector<std::vector<float>> logits;  // per sequence: rows x n_vocab
  std::vector<std::vector<int32_t>> greedy;
};

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "impress-ref-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool RunReference(const std::string& python, const std::string& model, const std::vector<Sequence>& seqs,
                  const std::string& dir, const std::string& dtype, RefOutput* out) {
  nlohmann::json req;
  req["sequences"] = nlohmann::json::array();
  for (const auto& s : seqs) req["sequences"].push_back({{"tokens", s.tokens}, {"rows", s.rows}, {"greedy", s.greedy}});
  const std::string req_path = dir + "/request.json", out_prefix = dir + "/ref";
  std::ofstream(req_path) << req.dump();
  const std::string cmd = Quote(python) + " " + Quote(SourceDir() + "/tests/reference/reference.py") + " --model " +
                          Quote(model) + " --request " + Quote(req_path) + " --out " + Quote(out_prefix) + " --dtype " +
                          dtype;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "reference failed: " << cmd;
    return false;
  }
  nlohmann::json res = nlohmann::json::parse(std::ifstream(out_prefix + ".json"));
  out->n_vocab = res["n_vocab"];
  out->greedy = res["greedy"].get<std::vector<std::vector<int32_t>>>();
  std::ifstream bin(out_prefix + ".bin", std::ios::binary);
  for (const auto& s : seqs) {
    std::vector<float> l(s.rows.size() * size_t(out->n_vocab));
    bin.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * sizeof(float)));
    if (!bin) {
      ADD_FAILURE() << "reference output too short";
      return false;
    }
    out->logits.push_back(std::move(l));
  }
  return true;
}

// The quantized path's logits (weights used in their stored type, activations quantized to int8
// for the few-row GEMVs) against the reference of the same weights: top-1 agreement, mean KL
// divergence KL(ref || got) over the rows, and the largest relative logit error.
void CompareStoredWithReference(const std::string& model_path, const std::vector<Sequence>& seqs, int ubatch,
                                const RefOutput& ref);

// Runs every sequence through a Generator and compares with the reference. The model is loaded
// with every weight decoded to fp32 (the reference's arithmetic); with also_stored, the model as
// it runs by default (weights in their stored type) is compared too.
void CompareWithReference(const std::string& model_path, const std::vector<Sequence>& seqs, int ubatch,
                          const std::string& dtype, double tolerance, bool also_stored = false) {
  const std::string python = Python();
  if (python.empty()) GTEST_SKIP() << "no reference python (set IMPRESS_PYTHON)";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  RefOutput ref;
  ASSERT_TRUE(RunReference(python, model_path, seqs, tmp.path(), dtype, &ref));

  if (also_stored) CompareStoredWithReference(model_path, seqs, ubatch, ref);
  auto model = LoadModel(model_path, {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(model->config.n_vocab, ref.n_vocab);
  auto be = MakeCpuBackend({2});
  int max_len = 0;
  for (const auto& s : seqs) max_len = std::max<int>(max_len, int(s.tokens.size()) + s.greedy);
  auto gen = Generator::Create(*model, *be, {max_len, ubatch});
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  double worst = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    (*gen)->Reset();
    std::vector<float> got(s.rows.size() * size_t(ref.n_vocab));
    ASSERT_TRUE((*gen)->EvalRows(s.tokens, s.rows, got.data()).ok());
    double max_diff = 0, max_logit = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      max_diff = std::max(max_diff, double(std::abs(got[j] - ref.logits[i][j])));
      max_logit = std::max(max_logit, double(std::abs(ref.logits[i][j])));
    }
    const double rel = max_diff / max_logit;
    worst = std::max(worst, rel);
    std::printf("sequence %zu (%zu tokens): max|diff| %.4g, max|logit| %.4g, relative %.3g\n", i, s.tokens.size(),
                max_diff, max_logit, rel);
    EXPECT_LT(rel, tolerance) << "sequence " << i << " (" << s.tokens.size() << " tokens): max |diff| " << max_diff
                              << ", max |logit| " << max_logit;
    if (s.greedy == 0) continue;
    // Greedy continuation.
    (*gen)->Reset();
    GenerateOptions o;
    o.max_tokens = s.greedy;
    auto r = (*gen)->Generate(s.tokens, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokens, ref.greedy[i]) << "sequence " << i;
  }
  spdlog::info("{}: worst max|diff|/max|logit| = {:.3g}", model_path, worst);
  std::printf("worst relative logit error vs reference: %.3g (%s)\n", worst, model_path.c_str());
}

void CompareStoredWithReference(const std::string& model_path, const std::vector<Sequence>& seqs, int ubatch,
                                const RefOutput& ref) {
  auto model = LoadModel(model_path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto be = MakeCpuBackend({2});
  int max_len = 0;
  for (const auto& s : seqs) max_len = std::max<int>(max_len, int(s.tokens.size()));
  auto gen = Generator::Create(*model, *be, {max_len, ubatch});
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  const size_t V = size_t(ref.n_vocab);
  constexpr float kNearTie = 0.15f;
  int n_rows = 0, n_top1 = 0;
  double kl_sum = 0, worst = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    (*gen)->Reset();
    std::vector<float> got(s.rows.size() * V);
    ASSERT_TRUE((*gen)->EvalRows(s.tokens, s.rows, got.data()).ok());
    for (size_t r = 0; r < s.rows.size(); ++r) {
      const float* g = got.data() + r * V;
      const float* w = ref.logits[i].data() + r * V;
      const float gmax = *std::max_element(g, g + V), wmax = *std::max_element(w, w + V);
      double gz = 0, wz = 0, max_diff = 0, max_logit = 0;
      for (size_t j = 0; j < V; ++j) {
        gz += std::exp(double(g[j]) - gmax);
        wz += std::exp(double(w[j]) - wmax);
        max_diff = std::max(max_diff, double(std::abs(g[j] - w[j])));
        max_logit = std::max(max_logit, double(std::abs(w[j])));
      }
      double kl = 0;
      for (size_t j = 0; j < V; ++j) {
        const double lp = double(w[j]) - wmax - std::log(wz), lq = double(g[j]) - gmax - std::log(gz);
        kl += std::exp(lp) * (lp - lq);
      }
      kl_sum += kl;
      worst = std::max(worst, max_diff / max_logit);
      const size_t g_top = size_t(std::max_element(g, g + V) - g), w_top = size_t(std::max_element(w, w + V) - w);
      n_top1 += g_top == w_top;
      // Where the top differs, the reference must rank ours within kNearTie of its own: a tie at
      // the quantization's noise (the row's logits differ by up to ~0.6), not a different answer.
      EXPECT_LE(w[w_top] - w[g_top], kNearTie)
          << "sequence " << i << ", row " << r << ": token " << g_top << " against the reference's " << w_top;
      ++n_rows;
    }
  }
  const double mean_kl = kl_sum / n_rows;
  std::printf("stored weights (%s): top-1 agreement %d/%d, mean KL %.3g, worst relative logit error %.3g\n",
              model_path.c_str(), n_top1, n_rows, mean_kl, worst);
  // Every projection runs on int8-quantized activation rows here (prefill through the int8
  // GEMM, the LM head's few rows through the GEMV): the relative error of one such product is
  // about 0.7% (see quantized-forward-test.cpp), and the logits stay within these bounds. The
  // pseudo-text rows have near-ties (the reference's top two 0.02-0.1 apart): at most two rows
  // pick the other of such a pair.
  EXPECT_GE(n_top1, n_rows - 2);
  EXPECT_LE(mean_kl, 1e-2);
  EXPECT_LE(worst, 0.05);
}

std::vector<int32_t> PseudoText(int n, uint32_t seed, int n_vocab, int common) {
  // Mostly frequent ids (low ids in BPE vocabularies), sometimes any id.
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 8 == 0 ? rng() % n_vocab : rng() % common);
  return t;
}

std::vector<int> SomeRows(int n) {
  std::vector<int> rows = {0, n / 3, n / 2, n - 2, n - 1};
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

TEST(Reference, SmolLM2LogitsAndGreedyMatchNumpy) {
  const std::string path = DefaultModel();
  if (!fs::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  std::vector<Sequence> seqs;
  for (auto [n, seed] : {std::pair{9, 1u}, {230, 2u}, {1100, 3u}}) {
    Sequence s;
    s.tokens = PseudoText(n, seed, 49152, 4000);
    s.tokens[0] = 1;  // <|im_start|>
    s.rows = SomeRows(n);
    s.greedy = n > 1000 ? 0 : 32;  // the numpy decode loop is slow; two continuations suffice
    seqs.push_back(s);
  }
  // KV is fp16 (by design, in the engine and in the reference). Rounding to fp16 is
  // discontinuous: an element within float32 noise (~1e-7) of a rounding boundary lands on
  // either side, a 5e-4 jump, and SmolLM2's large residual activations carry these flips to
  // the logits. Measured on the 230-token sequence: the numpy reference itself in float32 vs
  // float64 (same fp16 KV) differs by 0.9e-4 relative, and fp16 vs fp32 KV by 1.8e-4, while
  // with fp32 KV float32 vs float64 agree to 2e-6. A float32 engine therefore sits ~1e-4 from
  // the exact fp16-KV answer on this model; we hold it to 3e-4 (a real bug is >= 1e-2).
  CompareWithReference(path, seqs, 512, "float32", 3e-4, /*also_stored=*/true);
}

class TinyModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string python = Python();
    if (python.empty()) return;
    dir_ = new TempDir();
    const std::string cmd =
        Quote(python) + " " + Quote(SourceDir() + "/tests/reference/make-tiny-models.py") + " " + Quote(dir_->path());
    ok_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void Check(const std::string& name) {
    if (Python().empty()) GTEST_SKIP() << "no reference python (set IMPRESS_PYTHON)";
    ASSERT_TRUE(ok_) << "make-tiny-models.py failed";
    std::vector<Sequence> seqs;
    for (auto [n, seed] : {std::pair{5, 11u}, {70, 12u}, {300, 13u}}) {
      Sequence s;
      s.tokens = PseudoText(n, seed, 300, 300);
      s.rows = SomeRows(n);
      seqs.push_back(s);
    }
    // The reference emulates fp16 KV; float32 rounding that lands a K/V value on the other side
    // of an fp16 rounding boundary than float64 does moves logits by ~1e-4 (seen: 4e-5 in
    // Release, 1.4e-4 in the ASan build, whose code generation differs). Same bound and reason
    // as SmolLM2 above; a real bug is >= 1e-2.
    CompareWithReference(dir_->path() + "/" + name, seqs, 128, "float64", 3e-4);  // 300 tokens: 3 ubatches
  }
  static inline TempDir* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(TinyModels, LlamaGqaLlama3RopeUntiedMatchesNumpy) { Check("tiny-llama"); }
TEST_F(TinyModels, OptPreLnMatchesNumpy) { Check("tiny-opt"); }
TEST_F(TinyModels, Opt350mPostLnWithProjectionsMatchesNumpy) { Check("tiny-opt-350m"); }
TEST_F(TinyModels, Qwen2BiasesTiedMatchesNumpy) { Check("tiny-qwen2"); }
TEST_F(TinyModels, Qwen3QkNormOwnHeadDimMatchesNumpy) { Check("tiny-qwen3"); }

}  // namespace
}  // namespace impress
