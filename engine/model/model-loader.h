// LoadModel: a GGUF file or a Hugging Face folder -> Model (engine/model/model.h): config plus
// weights in PyTorch (out, in) orientation and Hugging Face layout. GGUF matrices of a type the
// quantized kernels compute on (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) stay
// in that type, viewed in place in the file mapping (Model::storage keeps it); F32 tensors and
// vectors become owned fp32 values.
//
// Which architectures load, and under which names, is data: the tables of engine/model/arch.h
// (Llama, Qwen2, Qwen3 from GGUF files and Hugging Face folders; OPT from folders). GGUF:
// general.architecture picks the table; its tensors (token_embd, output_norm, output (absent =>
// tied), blk.N.*) are viewed in place. llama.cpp's converter permutes the rows of Llama's
// attn_q/attn_k for its interleaved RoPE; the loader undoes it (UnpermuteRopeRows; for stored
// types a row-reordered copy of the stored bytes), so GGUF and HF models come out alike. Hugging
// Face folders: config.json ("architectures" picks the table) + model.safetensors or sharded
// model.safetensors.index.json, F32/F16/BF16 weights; F16/BF16 matrices stay in their type,
// viewed in the safetensors mappings, where the table allows it (not OPT); F32 tensors and
// vectors become owned fp32 values (LoadOptions::dequantize: all of them).
//
// The work is split by job: gguf-loader.h, hf-loader.h, weight-jobs.h (threaded conversion),
// fingerprint.h, memory-fit.h.
//
// Every tensor is checked against the config (missing or wrong-shaped tensors are named), every
// config value is range-checked (float hyperparameters must be finite as floats), every norm
// weight and bias must be finite (CheckNormWeights). config.fingerprint is a hex XXH3-128 of the model bytes (GGUF:
// the file; HF: config.json, the weight files and the tokenizer files present). With
// LoadOptions::check_memory, a model whose weights and KV estimate exceed MemAvailable is refused
// before its weights are read. Every tensor's extent is checked against its file's size before
// anything is read from a mapping (a truncated file is an error, never SIGBUS). A GGUF mapping
// lives as long as the Model when a tensor views it; others are released before LoadModel returns. Progress is reported
// once per tensor, from worker threads (serialized); returning false cancels the load (Status kCancelled). Thread-safe:
// loads share no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <string_view>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

struct LoadOptions {
  int n_threads = 2;        // dequantization / conversion threads (the caller's thread counts as one)
  bool dequantize = false;  // every weight as owned fp32 values (the reference for quantized runs)
  // Before any weight is read, refuse a model that cannot fit: kResourceExhausted with the
  // numbers when its weights in memory (a GGUF's file size, or 4 bytes per value when converted
  // to fp32) plus the fp16 KV of kv_tokens tokens exceed the memory available.
  bool check_memory = false;
  int64_t kv_tokens = 4096;
  uint64_t mem_available = 0;  // bytes; 0: MemAvailable from /proc/meminfo (no check if unreadable)
  // A GgmlType id (Q8_0, Q4_K, F16, ...; 0: as stored): every matrix whose rows are whole blocks
  // of it is converted to it at load, for less memory (ignored with dequantize). The model's
  // fingerprint then names the type too, so KV computed with other weights is never reused.
  uint32_t weights = 0;
  // Where model fingerprints are remembered (engine/model/fingerprint-cache.h): nullopt for the
  // default place, "" for none (every load hashes the file).
  std::optional<std::string> fingerprint_cache = std::nullopt;
};

// The user-facing weights choice: "" (as stored) -> 0, "q8_0" | "q4_k" | "f16" (any case) -> the
// GgmlType id. Errors: kInvalidArgument naming the text and the choices.
Result<uint32_t> ParseWeightsOption(std::string_view text);

// Bytes of fp16 K and V for n_tokens tokens of a model with this configuration.
uint64_t KvBytes(const ModelConfig& config, int64_t n_tokens);

Result<Model> LoadModel(const std::string& path, const ProgressFn& progress = {});
Result<Model> LoadModel(const std::string& path, const ProgressFn& progress, const LoadOptions& options);

// Corruption naming the layer and tensor when a norm weight or bias holds NaN or inf (what
// LoadModel checks; small tensors, so cheap). For models built in memory too.
Status CheckNormWeights(const Model& model);

// Undoes llama.cpp's RoPE row permutation of a (n_head * head_dim, n_cols) matrix in place:
// HF row (h, i, j), i in {0, 1}, j < head_dim / 2, is GGUF row (h, j, i).
// Requires n_rows == n_head * head_dim with head_dim even.
void UnpermuteRopeRows(float* w, int64_t n_rows, int64_t n_cols, int n_head);
// The same on rows of row_bytes bytes each (any stored type: a row is whole blocks).
void UnpermuteRopeRowBytes(uint8_t* w, int64_t n_rows, int64_t row_bytes, int n_head);

}  // namespace impress
