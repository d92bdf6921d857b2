// The fixture of the pipeline tests on the real default model (PipelineOnModel: the model loaded
// once per suite, a store in a fresh folder, a ~600-token GPL prompt), and SlowReadEnv, a store
// environment that delays every read by a known amount. Header-only; used from the test thread.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "store/env.h"
#include "tests/support/default-model.h"

namespace impress::test_support {

// Sleeps delay_ms before every read of a store file while delay_ms > 0: a known amount of I/O
// time, so a test can check where the pipeline books it. The store must read through File::ReadAt
// (force_pread): io_uring reads the descriptor directly.
class SlowReadEnv : public store::EnvWrapper {
 public:
  SlowReadEnv() : EnvWrapper(store::Env::Default()) {}
  Result<std::unique_ptr<store::File>> OpenFile(const std::string& path, const store::OpenOptions& o) override {
    IMPRESS_ASSIGN_OR_RETURN(std::unique_ptr<store::File> f, target()->OpenFile(path, o));
    return std::unique_ptr<store::File>(std::make_unique<SlowFile>(std::move(f), this));
  }
  std::atomic<int> delay_ms{0};
  std::atomic<uint64_t> n_delayed{0};

 private:
  class SlowFile : public store::FileWrapper {
   public:
    SlowFile(std::unique_ptr<store::File> f, SlowReadEnv* env) : FileWrapper(std::move(f)), env_(env) {}
    Status ReadAt(uint64_t off, void* buf, size_t n, size_t* n_read) override {
      if (const int ms = env_->delay_ms.load(); ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        ++env_->n_delayed;
      }
      return f_->ReadAt(off, buf, n, n_read);
    }

   private:
    SlowReadEnv* env_;
  };
};

class PipelineOnModel : public ::testing::Test {
 protected:
  // A failed load is kept, not asserted here: GoogleTest reports a fatal failure in
  // SetUpTestSuite by skipping every test of the suite, and ctest counts skips as passes.
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(DefaultModel())) return;
    auto ctx = ModelContext::Load(DefaultModel(), ModelContextOptions{});
    if (!ctx.ok()) {
      load_status_ = ctx.status();
      return;
    }
    ctx_ = std::move(*ctx).release();
  }
  static void TearDownTestSuite() {
    delete ctx_;
    ctx_ = nullptr;
    load_status_ = Status::Ok();
  }
  void SetUp() override {
    ASSERT_TRUE(load_status_.ok()) << "the default model " << DefaultModel()
                                   << " failed to load: " << load_status_.ToString();
    if (!ctx_) GTEST_SKIP() << "default model not found: " << DefaultModel();
    dir_ = std::filesystem::temp_directory_path() / ("impress-pipeline-test-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    OpenStore(StoreOptions());

    auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    doc->text.resize(2600);  // ~600 tokens: enough layers of selection, quick on 2 cores
    conv_.AddDocument(std::move(*doc));
  }
  void TearDown() override {
    pipe_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  store::PrefixStoreOptions StoreOptions() const {
    store::PrefixStoreOptions o = StoreOptionsFor(ctx_->config(), 3);
    o.dir = dir_.string();
    o.reorder_interval = std::chrono::milliseconds(0);
    return o;
  }
  // (Re)opens the store of this test with `o` and a pipeline over it.
  void OpenStore(const store::PrefixStoreOptions& o) {
    pipe_.reset();
    store_.reset();
    auto st = store::PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(*st);
    pipe_ = std::make_unique<ImpressPipeline>(*ctx_, store_.get());
  }
  // Every read goes to the data files: no device or host tier to serve repeated reads.
  // With an Env, reads go through File::ReadAt on enough workers that every block of one read
  // request is read at once (one read waits about one ReadAt, however many blocks it has).
  // int4_probe: probe keys as int4 codes (what the cross-layer prediction scores).
  void OpenSsdOnlyStore(store::Env* env = nullptr, bool int4_probe = false) {
    store::PrefixStoreOptions o = StoreOptions();
    o.device_bytes = 0;
    o.host_bytes = 0;
    if (int4_probe) o.probe_encoding = store::KVEncoding::kInt4;
    o.env = env;
    if (env) {
      o.force_pread = true;
      o.queue_depth = 1;
      o.chunk_tokens = 1024;
    }
    OpenStore(o);
  }

  PromptTokens Prompt(const std::string& q) { return conv_.Build(q, ctx_->tokenizer(), ctx_->chat_template()); }
  // Computes the prompt without reuse and stores its prefix.
  // write_order: the chunks in the order of the prompt's attention (the default), else in token order.
  void Ingest(const PromptTokens& p, bool write_order = true) {
    std::vector<float> logits;
    PipelineSettings s;
    s.system = SystemKind::kRecomp;
    s.write_order = write_order;
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 0, &logits);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pipe_->StoreAsync(size_t(p.n_prefix));
    auto w = pipe_->WaitForStore();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(*w, uint64_t(p.n_prefix));
  }
  RequestReport Run(const PromptTokens& p, PipelineSettings s, std::vector<float>* logits) {
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 8, logits);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RequestReport{};
  }

  // IMPRESS settings that record each layer's importance and selection for comparing two runs,
  // leaving the store's statistics alone.
  static PipelineSettings Recording(float alpha) {
    PipelineSettings s;
    s.alpha = alpha;
    s.record_importance = true;
    s.report_importance = false;
    return s;
  }

  static inline ModelContext* ctx_ = nullptr;
  static inline Status load_status_;
  std::filesystem::path dir_;
  std::unique_ptr<store::PrefixStore> store_;
  std::unique_ptr<ImpressPipeline> pipe_;
  Conversation conv_;
};

}  // namespace impress::test_support
