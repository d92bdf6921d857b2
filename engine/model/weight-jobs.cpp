// Weight jobs: see weight-jobs.h.
#include "engine/model/weight-jobs.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "base/mutex.h"
#include "engine/model/dequant.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-blocks.h"
#include "engine/quant/quant-kernels.h"

namespace impress {
namespace {

// Fills the job's tensor with fp32 values (any readable GGUF type, or safetensors).
Status ToF32(WeightJob& j) {
  j.dst->data.resize(j.n_elements);
  float* out = j.dst->data.data();
  Status st;
  if (j.gguf) {
    st = Dequantize(j.gguf->type_id, j.gguf->data, j.gguf->n_bytes, out, j.n_elements, j.name, 1);
    // Keeps the peak near the fp32 weights alone: converted source pages leave memory.
    j.gguf_file->DiscardPages(j.gguf->data, j.gguf->n_bytes);
  } else {
    st = SafetensorsToF32(*j.st, *j.st_path, out);
  }
  if (st.ok() && j.unpermute_heads > 0) UnpermuteRopeRows(out, j.shape[0], j.shape[1], j.unpermute_heads);
  return st;
}

// Points the job's tensor at its stored GGUF rows. Rows llama.cpp permuted are copied once in
// HF order (still in the stored type: a row is a whole number of blocks), and the source pages
// are dropped so the copy does not double them.
void KeepStored(WeightJob& j) {
  Tensor& t = *j.dst;
  if (j.st) {  // Hugging Face rows are in the engine's layout already
    t.ggml_type = uint32_t(j.st->dtype == StDtype::kF16 ? GgmlType::kF16 : GgmlType::kBF16);
    t.view = j.st->data;
    return;
  }
  t.ggml_type = j.gguf->type_id;
  if (j.unpermute_heads <= 0) {
    t.view = j.gguf->data;
    return;
  }
  t.owned_bytes.assign(j.gguf->data, j.gguf->data + j.gguf->n_bytes);
  UnpermuteRopeRowBytes(t.owned_bytes.data(), j.shape[0], int64_t(j.gguf->n_bytes / uint64_t(j.shape[0])),
                        j.unpermute_heads);
  j.gguf_file->DiscardPages(j.gguf->data, j.gguf->n_bytes);
}

// Re-encodes the job's fp32 values (rows are contiguous and whole blocks) in j.convert_to.
Status ConvertValues(WeightJob& j) {
  Tensor& t = *j.dst;
  IMPRESS_ASSIGN_OR_RETURN(const uint64_t bytes, GgmlByteSize(j.convert_to, j.n_elements));
  t.owned_bytes.resize(bytes);
  const Status st = QuantizeRow(j.convert_to, t.data.data(), int64_t(j.n_elements), t.owned_bytes.data());
  if (!st.ok()) return Status(st.code(), j.name + ": " + st.message());
  t.ggml_type = j.convert_to;
  std::vector<float>().swap(t.data);
  return Status::Ok();
}

}  // namespace

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

uint64_t NumElements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

Status RunJobs(std::vector<WeightJob>& jobs, int n_threads, const ProgressFn& progress,
               const std::function<Status()>& first) {
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return jobs[a].n_elements > jobs[b].n_elements; });
  const size_t n_tasks = jobs.size() + (first ? 1 : 0);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  struct {
    Mutex mu;  // also serializes the progress callback
    Status error GUARDED_BY(mu);
    uint64_t n_done GUARDED_BY(mu) = 0;
  } shared;

  auto worker = [&]() {
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t k = next.fetch_add(1);
      if (k >= n_tasks) return;
      Status st;
      const WeightJob* job = nullptr;
      if (first && k == 0) {
        st = first();
      } else {
        WeightJob& j = jobs[order[k - (first ? 1 : 0)]];
        job = &j;
        j.dst->shape = j.shape;
        if (j.keep_stored) {
          KeepStored(j);
        } else {
          st = ToF32(j);
          if (st.ok() && j.convert_to) st = ConvertValues(j);
        }
      }
      MutexLock lock(&shared.mu);
      if (!st.ok()) {
        if (shared.error.ok()) shared.error = st;
        stop = true;
        return;
      }
      if (job) {
        ++shared.n_done;
        if (!ReportProgress(progress, shared.n_done, jobs.size(), job->name)) {
          if (shared.error.ok()) shared.error = Status::Cancelled("model load cancelled");
          stop = true;
          return;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  MutexLock lock(&shared.mu);
  return shared.error;
}

uint64_t JobsMemoryBytes(const std::vector<WeightJob>& jobs) {
  uint64_t n = 0;
  for (const WeightJob& j : jobs) {
    if (j.convert_to) {
      auto b = GgmlByteSize(j.convert_to, j.n_elements);
      n += b.ok() ? *b : j.n_elements * sizeof(float);
    } else {
      n += !j.keep_stored ? j.n_elements * sizeof(float) : j.gguf ? j.gguf->n_bytes : j.st->n_bytes();
    }
  }
  return n;
}

// LoadOptions::weights: every matrix whose rows are whole blocks of the type is re-encoded in it
// (the others stay as they would otherwise load). kInvalidArgument for a type the kernels lack.
Status PlanConversion(std::vector<WeightJob>& jobs, uint32_t type) {
  if (type == 0) return Status::Ok();
  if (!quant::IsSupportedWeightType(type) || !CanQuantize(type)) {
    return Status::InvalidArgument("weights cannot be converted to " + GgmlTypeName(type));
  }
  const int64_t block = quant::BlockElements(static_cast<quant::WeightType>(type));
  for (WeightJob& j : jobs) {
    if (j.shape.size() != 2 || j.shape[1] % block != 0) continue;
    j.convert_to = type;
    j.keep_stored = false;
  }
  return Status::Ok();
}

}  // namespace impress
