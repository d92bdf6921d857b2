// The store read benchmark behind `impress bench store`: a layer's batch of chunk reads through
// PrefixStore (O_DIRECT, io_uring, checksums verified, gathered into K/V) against fio reading a
// file in the same directory with the same block size and queue depth (ioengine=io_uring,
// direct=1), both measured in the same run. Runs on the calling thread; not reentrant for one dir.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace impress::store {

struct StoreBenchOptions {
  std::string dir;        // scratch directory on the disk to measure (created, then removed)
  int queue_depth = 128;  // as the store reads by default (PrefixStoreOptions::queue_depth)
  int chunk_tokens = 64;  // with the geometry below: the block size of one chunk read
  int n_layer = 8;
  int n_head_kv = 3;  // SmolLM2-135M's KV shape
  int head_dim = 64;
  int n_prefixes = 4;
  int prefix_tokens = 4096;  // built in turns of chunk_tokens, so a layer's chunks are scattered
  double seconds = 3.0;      // per measurement
  std::string fio = "fio";   // the fio executable
};

struct StoreBenchResult {
  double store_mb_s = 0;     // MB/s (1e6 bytes) read from the data files by the store
  double fio_mb_s = 0;       // fio randread bandwidth, same block size and depth (0 if fio failed)
  double ratio = 0;          // store / fio
  uint64_t block_bytes = 0;  // bytes of one chunk read (fio's bs)
  int queue_depth = 0;
  uint64_t chunks_per_batch = 0;
  uint64_t batches = 0;
  std::string io_engine;
  bool direct_io = false;
  std::string fio_error;        // why fio_mb_s is 0, if it is
  double cpu_ms_per_batch = 0;  // process CPU time per layer batch while reading
  double wall_ms_per_batch = 0;
};

Result<StoreBenchResult> RunStoreBenchmark(const StoreBenchOptions& options);
// A small table for humans.
std::string FormatStoreBench(const StoreBenchResult& r);

}  // namespace impress::store
