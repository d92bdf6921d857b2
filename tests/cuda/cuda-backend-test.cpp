// The CUDA backend against the CPU backend (the reference semantics): every op on random data,
// attention + importance and key scoring on random shapes (SmolLM2's 9/3 heads, head_dim 64 and
// 128, with and without a prefix), Forward logits of random tiny Llama and OPT models and of
// SmolLM2 (when present), and the IMPRESS pipeline's token selection. Tolerances (max |diff| /
// max |reference|):
//   fp32 GEMM backend: ops 1e-5, attention/importance 1e-4, tiny-model logits 1e-4, SmolLM2 1e-3;
//   f16 GEMM backend:  GEMM 3e-3, tiny-model logits 2e-2, SmolLM2 logits 5e-2 with the same argmax.
// Every GPU test skips (GTEST_SKIP) when cudaGetDeviceCount fails or finds no device; the tests
// of the no-GPU behaviour run everywhere.
#include "engine/compute/cuda/cuda-backend.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "chat/conversation.h"
#include "chat/document.h"
#include "engine/compute/cpu-backend.h"
#include "engine/compute/cuda/cuda-tier-memory.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"
#include "engine/model/random-model.h"
#include "engine/runtime/model-context.h"
#include "pipeline/impress-pipeline.h"
#include "tests/cuda/parity-util.h"
#include "tests/support/default-model.h"

namespace impress {
namespace {

using ::impress::test_support::DefaultModel;

// The source tree: $IMPRESS_SOURCE_DIR (set by ctest and scripts/gpu-check.sh), else this build's.
std::string SourceDir() {
  if (const char* p = std::getenv("IMPRESS_SOURCE_DIR"); p && *p) return p;
  return IMPRESS_SOURCE_DIR;
}

bool HaveGpu(std::string* why) {
  auto n = CudaDeviceCount();
  if (!n.ok()) *why = n.status().ToString();
  return n.ok();
}

#define REQUIRE_GPU()                          \
  do {                                         \
    std::string why_;                          \
    if (!HaveGpu(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// Device copies of host vectors, freed with the backend's Free at scope exit.
class DeviceArrays {
 public:
  explicit DeviceArrays(Backend& be) : be_(be) {}
  ~DeviceArrays() {
    for (auto p : ptrs_) be_.Free(p);
  }
  template <class T>
  DevPtr<T> Put(const std::vector<T>& host) {
    auto p = be_.Alloc(std::max<size_t>(host.size(), 1) * sizeof(T));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return DevPtr<T>();
    ptrs_.push_back(*p);
    if (!host.empty()) be_.CopyToDevice(*p, host.data(), host.size() * sizeof(T));
    return DevPtr<T>(static_cast<T*>(p->raw()));
  }
  template <class T>
  std::vector<T> Get(DevPtr<T> p, size_t n) {
    std::vector<T> h(n);
    if (n) be_.CopyToHost(h.data(), DevPtr<const void>(p.raw()), n * sizeof(T));
    return h;
  }

 private:
  Backend& be_;
  std::vector<DevPtr<void>> ptrs_;
};

// ---- without a GPU ---------------------------------------------------------------------------

TEST(CudaAvailability, MissingGpuOrBuildGivesAClearStatus) {
  auto n = CudaDeviceCount();
  auto be = MakeCudaBackend({});
  if (n.ok()) {
    EXPECT_TRUE(CudaBuildEnabled());
    EXPECT_GT(*n, 0);
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    EXPECT_NE((*be)->Name().find("cuda"), std::string::npos);
    return;
  }
  ASSERT_FALSE(be.ok());
  const std::string msg = be.status().ToString();
  if (CudaBuildEnabled()) {
    EXPECT_EQ(n.status().code(), Status::Code::kNotFound);
    EXPECT_NE(msg.find("no CUDA device found (cudaGetDeviceCount: "), std::string::npos) << msg;
  } else {
    EXPECT_EQ(n.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(msg.find("no CUDA backend"), std::string::npos) << msg;
  }
  EXPECT_FALSE(MakeCudaDeviceTierMemory(0).ok());
  EXPECT_FALSE(MakeCudaPinnedHostTierMemory(0).ok());
  // Through ModelContext (what `--backend cuda` reaches): the same message, before any loading.
  auto ctx = ModelContext::Load("/nonexistent/model.gguf", ModelContextOptions{.backend = "cuda"});
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().message(), be.status().message());
}

TEST(CudaAvailability, GemmPrecisionNamesRoundTrip) {
  for (auto p :
       {CudaGemmPrecision::kFp32, CudaGemmPrecision::kTf32, CudaGemmPrecision::kF16, CudaGemmPrecision::kBf16}) {
    auto q = ParseCudaGemmPrecision(CudaGemmPrecisionName(p));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(*q, p);
  }
  EXPECT_FALSE(ParseCudaGemmPrecision("int8").ok());
}

// ---- ops ---------------------------------------------------------------------------------------

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    auto be = MakeCudaBackend({0, CudaGemmPrecision::kFp32});
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    gpu_ = std::move(*be);
    cpu_ = MakeCpuBackend({.n_threads = 2, .int8_key_scores = false});  // fp32 scores, as the GPU
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_TRUE(CudaBackendStatus(*gpu_).ok()) << CudaBackendStatus(*gpu_).ToString();
    }
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(CudaOps, GemmAllTransposesMatchCpu) {
  DeviceArrays d(*gpu_);
  for (auto [m, n, k] : {std::tuple{1, 576, 576}, std::tuple{37, 65, 129}, std::tuple{512, 192, 576}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
        const auto a = Random(size_t(ta ? k : m) * lda, 1), b = Random(size_t(tb ? n : k) * ldb, 2);
        const auto c0 = Random(size_t(m) * ldc, 3);
        auto want = c0;
        cpu_->Gemm(ta ? Trans::kYes : Trans::kNo, tb ? Trans::kYes : Trans::kNo, m, n, k, 0.7f,
                   DevPtr<const float>(a.data()), lda, DevPtr<const float>(b.data()), ldb, 0.5f,
                   DevPtr<float>(want.data()), ldc);
        auto dc = d.Put(c0);
        gpu_->Gemm(ta ? Trans::kYes : Trans::kNo, tb ? Trans::kYes : Trans::kNo, m, n, k, 0.7f, d.Put(a), lda, d.Put(b),
                   ldb, 0.5f, dc, ldc);
        EXPECT_LT(RelMaxErr(d.Get(dc, c0.size()), want), 1e-5)
            << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb;
      }
  EXPECT_DOUBLE_EQ(gpu_->Flops(), cpu_->Flops());
}

TEST_F(CudaOps, HalfPrecisionGemmOnMappedWeightsIsWithinItsRounding) {
  for (auto prec : {CudaGemmPrecision::kF16, CudaGemmPrecision::kBf16, CudaGemmPrecision::kTf32}) {
    auto be = MakeCudaBackend({0, prec});
    ASSERT_TRUE(be.ok());
    Backend& g = **be;
    DeviceArrays d(g);
    const int m = 300, n = 1536, k = 576;
    const auto x = Random(size_t(m) * k, 4, -2, 2), w = Random(size_t(n) * k, 5, -0.05f, 0.05f);
    std::vector<float> want(size_t(m) * n);
    cpu_->Gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, DevPtr<const float>(x.data()), k, DevPtr<const float>(w.data()),
               k, 0.0f, DevPtr<float>(want.data()), n);
    auto wc = g.MapConstant(w.data(), w.size());
    ASSERT_TRUE(wc.ok());
    auto dc = d.Put(std::vector<float>(want.size(), 0.0f));
    for (int rep = 0; rep < 2; ++rep)  // the second reuses the weight's half copy
      g.Gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, d.Put(x), k, *wc, k, 0.0f, dc, n);
    const double err = RelMaxErr(d.Get(dc, want.size()), want);
    const double tol = prec == CudaGemmPrecision::kBf16 ? 2e-2 : 3e-3;
    spdlog::info("GEMM {}: rel err {:.2e}", CudaGemmPrecisionName(prec), err);
    EXPECT_LT(err, tol) << CudaGemmPrecisionName(prec);
    EXPECT_GT(err, 0.0) << "half precision should not be exact on random data";
    g.ReleaseConstant(*wc);
    EXPECT_TRUE(CudaBackendStatus(g).ok());
  }
}

TEST_F(CudaOps, NormsRopeActivationsAndCopiesMatchCpu) {
  DeviceArrays d(*gpu_);
  const int n_rows = 33, n_cols = 576;
  const auto x = Random(size_t(n_rows) * n_cols, 6, -3, 3), w = Random(n_cols, 7), b = Random(n_cols, 8);
  std::vector<float> want(x.size());
  auto out = d.Put(std::vector<float>(x.size()));
  cpu_->RmsNorm(DevPtr<float>(want.data()), DevPtr<const float>(x.data()), DevPtr<const float>(w.data()), n_rows,
                n_cols, 1e-5f);
  gpu_->RmsNorm(out, d.Put(x), d.Put(w), n_rows, n_cols, 1e-5f);
  EXPECT_LT(RelMaxErr(d.Get(out, x.size()), want), 1e-5);
  cpu_->LayerNorm(DevPtr<float>(want.data()), DevPtr<const float>(x.data()), DevPtr<const float>(w.data()),
                  DevPtr<const float>(b.data()), n_rows, n_cols, 1e-5f);
  gpu_->LayerNorm(out, d.Put(x), d.Put(w), d.Put(b), n_rows, n_cols, 1e-5f);
  EXPECT_LT(RelMaxErr(d.Get(out, x.size()), want), 1e-5);
  // In place.
  auto xin = d.Put(x);
  gpu_->LayerNorm(xin, xin, d.Put(w), d.Put(b), n_rows, n_cols, 1e-5f);
  EXPECT_LT(RelMaxErr(d.Get(xin, x.size()), want), 1e-5);

  // RoPE: 9 heads of 64, positions out of order and large.
  {
    const int n_tok = 6, n_heads = 9, hd = 64;
    auto q = Random(size_t(n_tok) * n_heads * hd, 9, -2, 2);
    const std::vector<int32_t> pos = {5, 0, 8191, 17, 4000, 1};
    std::vector<float> inv(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv[i] = float(1.0 / std::pow(100000.0, 2.0 * i / hd));
    auto dq = d.Put(q);
    gpu_->Rope({dq, n_tok, n_heads, hd, d.Put(pos), d.Put(inv)});
    cpu_->Rope({DevPtr<float>(q.data()), n_tok, n_heads, hd, DevPtr<const int32_t>(pos.data()),
                DevPtr<const float>(inv.data())});
    EXPECT_LT(RelMaxErr(d.Get(dq, q.size()), q), 1e-5);
  }
  // SwiGLU over one fused (rows, 2 n) buffer, ReLU, Add, AddBias, GetRows, ToF16, CopyDevice.
  {
    const int nc = 100;
    const auto gu = Random(size_t(n_rows) * 2 * nc, 10, -8, 8);
    std::vector<float> sw(size_t(n_rows) * nc);
    auto dgu = d.Put(gu);
    auto dsw = d.Put(sw);
    cpu_->SwiGlu(DevPtr<float>(sw.data()), DevPtr<const float>(gu.data()), DevPtr<const float>(gu.data() + nc), n_rows,
                 nc, 2 * nc);
    gpu_->SwiGlu(dsw, dgu, dgu + nc, n_rows, nc, 2 * nc);
    EXPECT_LT(RelMaxErr(d.Get(dsw, sw.size()), sw), 1e-5);

    auto h = gu;
    auto dh = d.Put(h);
    cpu_->Relu(DevPtr<float>(h.data()), h.size());
    gpu_->Relu(dh, h.size());
    EXPECT_EQ(d.Get(dh, h.size()), h);
    const auto y = Random(h.size(), 11);
    cpu_->Add(DevPtr<float>(h.data()), DevPtr<const float>(y.data()), h.size());
    gpu_->Add(dh, d.Put(y), h.size());
    EXPECT_EQ(d.Get(dh, h.size()), h);
    const auto bias = Random(nc, 12);
    cpu_->AddBias(DevPtr<float>(h.data()), DevPtr<const float>(bias.data()), n_rows, nc, 2 * nc);
    gpu_->AddBias(dh, d.Put(bias), n_rows, nc, 2 * nc);
    EXPECT_EQ(d.Get(dh, h.size()), h);

    const std::vector<int32_t> ids = {3, 0, 32, 32, 7};
    std::vector<float> rows(ids.size() * size_t(2 * nc));
    auto drows = d.Put(rows);
    cpu_->GetRows(DevPtr<float>(rows.data()), DevPtr<const float>(h.data()), DevPtr<const int32_t>(ids.data()),
                  int(ids.size()), 2 * nc);
    gpu_->GetRows(drows, dh, d.Put(ids), int(ids.size()), 2 * nc);
    EXPECT_EQ(d.Get(drows, rows.size()), rows);

    std::vector<f16_t> hw(size_t(n_rows) * 120, 0);
    auto dhw = d.Put(hw);
    const auto big = Random(size_t(n_rows) * 2 * nc, 13, -70000, 70000);
    cpu_->ToF16(DevPtr<f16_t>(hw.data()), 120, DevPtr<const float>(big.data()), 2 * nc, n_rows, nc);
    gpu_->ToF16(dhw, 120, d.Put(big), 2 * nc, n_rows, nc);
    EXPECT_EQ(d.Get(dhw, hw.size()), hw);

    auto dcopy = d.Put(std::vector<float>(h.size()));
    gpu_->CopyDevice(dcopy, dh, h.size() * sizeof(float));
    gpu_->Synchronize();
    EXPECT_EQ(d.Get(dcopy, h.size()), h);
  }
}

TEST_F(CudaOps, AllocationPoolReusesAndReportsExhaustion) {
  auto a = gpu_->Alloc(1000);
  ASSERT_TRUE(a.ok());
  void* first = a->raw();
  gpu_->Free(*a);
  auto b = gpu_->Alloc(1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->raw(), first);  // same size class, from the cache
  gpu_->Free(*b);
  auto huge = gpu_->Alloc(size_t(1) << 52);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Status::Code::kResourceExhausted) << huge.status().ToString();
  EXPECT_TRUE(CudaBackendStatus(*gpu_).ok());  // out of memory does not fail the backend
  auto c = gpu_->Alloc(4096);
  EXPECT_TRUE(c.ok());
  if (c.ok()) gpu_->Free(*c);
}

// ---- attention and key scoring ------------------------------------------------------------

struct AttnShapeCase {
  int n_new, n_prefix, n_head, n_head_kv, head_dim;
  bool include_new;
};

class CudaAttention : public CudaOps, public ::testing::WithParamInterface<AttnShapeCase> {};

TEST_P(CudaAttention, OutputAndImportanceMatchCpuAndAreDeterministic) {
  const AttnShapeCase c = GetParam();
  const int hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
  const auto q = Random(size_t(c.n_new) * nq, 20, -2, 2);
  const auto kn = RandomHalf(size_t(c.n_new) * nkv, 21, 2), vn = RandomHalf(kn.size(), 22);
  const auto kp = RandomHalf(size_t(c.n_prefix) * nkv, 23, 2), vp = RandomHalf(kp.size(), 24);
  const std::vector<int> heads = {0, 1, 2, c.n_head - 1};
  const int ld = c.n_prefix + (c.include_new ? c.n_new : 0);

  AttentionArgs a;
  a.n_new = c.n_new;
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(float(hd));
  a.n_prefix = c.n_prefix;
  a.importance_heads = heads;
  a.importance_include_new = c.include_new;
  std::vector<float> out_want(size_t(c.n_new) * nq), imp_want(heads.size() * size_t(std::max(ld, 1)));
  {
    AttentionArgs h = a;
    h.q = DevPtr<const float>(q.data());
    h.k_new = DevPtr<const f16_t>(kn.data());
    h.v_new = DevPtr<const f16_t>(vn.data());
    h.k_prefix = DevPtr<const f16_t>(kp.data());
    h.v_prefix = DevPtr<const f16_t>(vp.data());
    h.out = DevPtr<float>(out_want.data());
    h.importance = DevPtr<float>(imp_want.data());
    ASSERT_TRUE(cpu_->Attention(h).ok());
  }
  DeviceArrays d(*gpu_);
  a.q = d.Put(q);
  a.k_new = d.Put(kn);
  a.v_new = d.Put(vn);
  a.k_prefix = c.n_prefix ? DevPtr<const f16_t>(d.Put(kp)) : DevPtr<const f16_t>();
  a.v_prefix = c.n_prefix ? DevPtr<const f16_t>(d.Put(vp)) : DevPtr<const f16_t>();
  auto out = d.Put(std::vector<float>(out_want.size()));
  auto imp = d.Put(std::vector<float>(imp_want.size()));
  a.out = out;
  a.importance = imp;
  ASSERT_TRUE(gpu_->Attention(a).ok());
  EXPECT_LT(RelMaxErr(d.Get(out, out_want.size()), out_want), 1e-4);
  const auto imp1 = d.Get(imp, imp_want.size());
  if (ld > 0) {
    EXPECT_LT(RelMaxErr(imp1, imp_want), 1e-4);
  }
  ASSERT_TRUE(gpu_->Attention(a).ok());
  EXPECT_EQ(d.Get(imp, imp_want.size()), imp1) << "importance must be bit-identical run to run";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttnShapeCase{1, 0, 9, 3, 64, true},       // first token
                                           AttnShapeCase{1, 4000, 9, 3, 64, false},   // decode, long prefix
                                           AttnShapeCase{7, 1000, 9, 3, 64, true},    // question after a prefix
                                           AttnShapeCase{300, 0, 9, 3, 64, true},     // prefill, no prefix
                                           AttnShapeCase{200, 777, 9, 3, 64, false},  // prefill after a subset
                                           AttnShapeCase{65, 130, 32, 8, 128, true},  // Llama-3 8B heads
                                           AttnShapeCase{5, 50, 4, 4, 256, false}));  // largest head_dim

TEST_F(CudaOps, ScoreKeysMatchesCpuOnProbeSubsets) {
  const int n_head = 9, n_head_kv = 3, hd = 64;
  for (auto [n_new, n_prefix] : {std::pair{1, 3000}, std::pair{40, 600}, std::pair{300, 100}}) {
    const std::vector<int> prefix_kv = {2, 0};  // slots in a non-natural order
    const std::vector<int> query_heads = {0, 1, 2, 7};
    const auto q = Random(size_t(n_new) * n_head * hd, 30, -2, 2);
    const auto kn = RandomHalf(size_t(n_new) * n_head_kv * hd, 31, 2);
    const auto kp = RandomHalf(size_t(n_prefix) * prefix_kv.size() * hd, 32, 2);
    ScoreKeysArgs a;
    a.n_new = n_new;
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim = hd;
    a.scale = 0.125f;
    a.n_prefix = n_prefix;
    a.prefix_kv_heads = prefix_kv;
    a.query_heads = query_heads;
    std::vector<float> want(query_heads.size() * n_prefix);
    {
      ScoreKeysArgs h = a;
      h.q = DevPtr<const float>(q.data());
      h.k_new = DevPtr<const f16_t>(kn.data());
      h.k_prefix = DevPtr<const f16_t>(kp.data());
      h.importance = DevPtr<float>(want.data());
      ASSERT_TRUE(cpu_->ScoreKeys(h).ok());
    }
    DeviceArrays d(*gpu_);
    a.q = d.Put(q);
    a.k_new = d.Put(kn);
    a.k_prefix = d.Put(kp);
    auto imp = d.Put(std::vector<float>(want.size()));
    a.importance = imp;
    ASSERT_TRUE(gpu_->ScoreKeys(a).ok());
    EXPECT_LT(RelMaxErr(d.Get(imp, want.size()), want), 1e-4) << n_new << " new, " << n_prefix << " prefix";
  }
  // Bad arguments are rejected as on the CPU.
  ScoreKeysArgs bad;
  bad.n_new = 1;
  bad.n_head = 9;
  bad.n_head_kv = 3;
  bad.head_dim = 64;
  EXPECT_FALSE(gpu_->ScoreKeys(bad).ok());
}

// ---- the forward pass ---------------------------------------------------------------------

// A random tiny model (RandomModel), head_dim 32 so GEMMs are not trivial.
Model TinyModel(Arch arch, uint32_t seed) {
  const bool llama = arch == Arch::kLlama;
  const ModelConfig c{.arch = arch,
                      .name = llama ? "random-llama" : "random-opt",
                      .n_vocab = 300,
                      .n_ctx_train = 1024,
                      .n_embd = 128,
                      .n_layer = 3,
                      .n_head = 4,
                      .n_head_kv = llama ? 2 : 4,
                      .head_dim = 32,
                      .n_ff = 256};
  auto m = RandomModel(c, {.seed = seed});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : Model{};
}

// Logits of the last `n_rows` prompt tokens after a ubatched prefill (prefix KV from the cache
// across ubatches), then of 3 decode steps.
std::vector<float> GeneratorLogits(const Model& m, Backend& be, const std::vector<int32_t>& toks, int ubatch) {
  auto gen = Generator::Create(m, be, {int(toks.size()) + 8, ubatch});
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  if (!gen.ok()) return {};
  const int n_rows = 4;
  std::vector<int> rows(n_rows);
  std::iota(rows.begin(), rows.end(), int(toks.size()) - n_rows);
  std::vector<float> out(size_t(n_rows) * m.config.n_vocab);
  EXPECT_TRUE((*gen)->EvalRows(toks, rows, out.data()).ok());
  std::vector<float> step;
  for (int32_t t : {5, 17, 2}) {
    EXPECT_TRUE((*gen)->Eval(std::span<const int32_t>(&t, 1), &step).ok());
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

class CudaForward : public ::testing::TestWithParam<Arch> {};

TEST_P(CudaForward, TinyModelLogitsMatchCpu) {
  REQUIRE_GPU();
  const Model m = TinyModel(GetParam(), 11);
  std::mt19937 rng(5);
  std::vector<int32_t> toks(300);
  for (auto& t : toks) t = int32_t(rng() % 300);
  auto cpu = MakeCpuBackend({2});
  const auto want = GeneratorLogits(m, *cpu, toks, 128);
  for (auto [prec, tol] : {std::pair{CudaGemmPrecision::kFp32, 1e-4}, std::pair{CudaGemmPrecision::kF16, 2e-2}}) {
    auto be = MakeCudaBackend({0, prec});
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    const auto got = GeneratorLogits(m, **be, toks, 128);
    const double err = RelMaxErr(got, want);
    spdlog::info("{} logits, GEMM {}: rel err {:.2e}", m.config.name, CudaGemmPrecisionName(prec), err);
    EXPECT_LT(err, tol) << CudaGemmPrecisionName(prec);
    EXPECT_TRUE(CudaBackendStatus(**be).ok()) << CudaBackendStatus(**be).ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaForward, ::testing::Values(Arch::kLlama, Arch::kOpt),
                         [](const auto& info) { return info.param == Arch::kLlama ? "Llama" : "Opt"; });

// The reference is the CPU backend on the model's weights dequantized to fp32 (exact in the
// weights): the CPU's own quantized path multiplies int8-quantized activations, which moves the
// logits by ~3e-2 relative on this model, while the CUDA backend decodes the weights exactly and
// multiplies in fp32 (or f16) GEMMs.
TEST(CudaSmolLM2, LogitsMatchCpuWithinGemmPrecision) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(DefaultModel())) GTEST_SKIP() << "default model not found: " << DefaultModel();
  auto model = LoadModel(DefaultModel());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto exact = LoadModel(DefaultModel(), {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  std::mt19937 rng(9);
  std::vector<int32_t> toks(600);
  for (auto& t : toks) t = int32_t(rng() % 20000);
  auto cpu = MakeCpuBackend({2});
  const auto want = GeneratorLogits(*exact, *cpu, toks, 512);
  const auto int8_path = GeneratorLogits(*model, *cpu, toks, 512);
  spdlog::info("SmolLM2 logits, CPU int8-activation path against fp32 weights: rel err {:.2e}",
               RelMaxErr(int8_path, want));
  const int n_vocab = model->config.n_vocab;
  for (auto [prec, tol] : {std::pair{CudaGemmPrecision::kFp32, 1e-3}, std::pair{CudaGemmPrecision::kF16, 5e-2}}) {
    auto be = MakeCudaBackend({0, prec});
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    const auto got = GeneratorLogits(*model, **be, toks, 512);
    const double err = RelMaxErr(got, want);
    spdlog::info("SmolLM2 logits, GEMM {}: rel err {:.2e} (against the CPU's int8 path {:.2e})",
                 CudaGemmPrecisionName(prec), err, RelMaxErr(got, int8_path));
    EXPECT_LT(err, tol) << CudaGemmPrecisionName(prec);
    for (size_t r = 0; r < want.size() / n_vocab; ++r) {
      const auto wb = want.begin() + r * n_vocab, gb = got.begin() + r * n_vocab;
      EXPECT_EQ(std::max_element(gb, gb + n_vocab) - gb, std::max_element(wb, wb + n_vocab) - wb) << "row " << r;
    }
  }
}

// The IMPRESS path on the same store: CPU and CUDA (fp32 GEMMs and scores) choose the same tokens.
TEST(CudaSmolLM2, ImpressPipelineSelectsTheSameTokensAsCpu) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(DefaultModel())) GTEST_SKIP() << "default model not found: " << DefaultModel();
  setenv("IMPRESS_CUDA_GEMM", "fp32", 1);
  auto cuda_ctx = ModelContext::Load(DefaultModel(), ModelContextOptions{.backend = "cuda"});
  unsetenv("IMPRESS_CUDA_GEMM");
  ASSERT_TRUE(cuda_ctx.ok()) << cuda_ctx.status().ToString();
  setenv("IMPRESS_INT8_SCORES", "0", 1);  // fp32 probe scores on the CPU, as the GPU's
  // fp32 weights on the CPU: its quantized path's int8 activations would move the scores more
  // than the GPU's rounding does (see LogitsMatchCpuWithinGemmPrecision).
  auto cpu_ctx = ModelContext::Load(DefaultModel(), ModelContextOptions{.dequantize = true});
  unsetenv("IMPRESS_INT8_SCORES");
  ASSERT_TRUE(cpu_ctx.ok()) << cpu_ctx.status().ToString();

  const auto dir = std::filesystem::temp_directory_path() / ("impress-cuda-pipeline-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  store::PrefixStoreOptions so = StoreOptionsFor((*cpu_ctx)->config(), 3);
  so.dir = dir.string();
  so.reorder_interval = std::chrono::milliseconds(0);
  auto st = store::PrefixStore::Open(so);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  Conversation conv;
  auto doc = LoadDocument(SourceDir() + "/assets/docs/gpl-3.0.txt");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  doc->text.resize(6000);
  conv.AddDocument(std::move(*doc));
  const PromptTokens p =
      conv.Build("Who may copy this license document?", (*cpu_ctx)->tokenizer(), (*cpu_ctx)->chat_template());
  {
    ImpressPipeline ingest(**cpu_ctx, st->get());
    std::vector<float> logits;
    PipelineSettings s;
    s.system = SystemKind::kRecomp;
    ASSERT_TRUE(ingest.Prefill({p.tokens, p.n_prefix}, s, 0, &logits).ok());
    ingest.StoreAsync(size_t(p.n_prefix));
    ASSERT_TRUE(ingest.WaitForStore().ok());
  }
  PipelineSettings s;
  s.system = SystemKind::kImpress;
  s.record_importance = true;
  s.report_importance = false;  // both runs see the same store statistics
  std::vector<float> lc, lg;
  RequestReport rc, rg;
  {
    ImpressPipeline pc(**cpu_ctx, st->get());
    auto r = pc.Prefill({p.tokens, p.n_prefix}, s, 4, &lc);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    rc = *r;
  }
  {
    ImpressPipeline pg(**cuda_ctx, st->get());
    auto r = pg.Prefill({p.tokens, p.n_prefix}, s, 4, &lg);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    rg = *r;
  }
  ASSERT_EQ(rc.layers.size(), rg.layers.size());
  ASSERT_EQ(rc.selected.size(), rg.selected.size());
  ASSERT_GT(rc.n_matched, 1000);
  size_t same = 0;
  for (size_t i = 0; i < rc.selected.size(); ++i) same += rc.selected[i] == rg.selected[i];
  const double agree = double(same) / double(rc.selected.size());
  int same_decision = 0;
  for (size_t il = 0; il < rc.layers.size(); ++il) {
    same_decision += rc.layers[il].passed == rg.layers[il].passed;
    EXPECT_EQ(rc.layers[il].k, rg.layers[il].k);
    EXPECT_NEAR(rc.layers[il].s, rg.layers[il].s, 0.02) << "layer " << il;
  }
  spdlog::info("IMPRESS selection CPU vs CUDA: {:.4f} of token decisions agree, {}/{} layer decisions", agree,
               same_decision, rc.layers.size());
  EXPECT_GT(agree, 0.995);
  EXPECT_GE(same_decision, int(rc.layers.size()) - 1);  // s within a hair of t may flip one
  EXPECT_LT(RelMaxErr(rg.importance, rc.importance), 1e-3);
  EXPECT_EQ(std::max_element(lg.begin(), lg.end()) - lg.begin(), std::max_element(lc.begin(), lc.end()) - lc.begin());
  st->reset();
  std::filesystem::remove_all(dir);
}

// ---- tier memory ----------------------------------------------------------------------------

TEST(CudaTierMemory, DeviceAndPinnedTiersRoundTripAndReuse) {
  REQUIRE_GPU();
  for (bool pinned : {false, true}) {
    auto mem = pinned ? MakeCudaPinnedHostTierMemory(0) : MakeCudaDeviceTierMemory(0);
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    std::vector<uint8_t> src(49152), back(src.size());
    std::iota(src.begin(), src.end(), uint8_t(3));
    void* p = (*mem)->Alloc(src.size());
    ASSERT_NE(p, nullptr);
    (*mem)->CopyIn(p, src.data(), src.size());
    (*mem)->CopyOut(back.data(), p, back.size());
    EXPECT_EQ(back, src) << (*mem)->name();
    (*mem)->Free(p);
    void* q = (*mem)->Alloc(src.size());
    EXPECT_EQ(q, p) << "a freed block of the same size is reused";
    (*mem)->Free(q);
    EXPECT_EQ((*mem)->Alloc(size_t(1) << 52), nullptr);  // out of memory: nullptr, no crash
  }
}

}  // namespace
}  // namespace impress
