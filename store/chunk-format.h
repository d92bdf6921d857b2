// The on-disk chunk format (DESIGN.md section 4).
//
// A chunk is one extent, 4 KiB-aligned, holding a 128-byte header and then token records, padded
// with zeros to a 4 KiB multiple:
//   kind kKV:    record = K of all KV heads then V of all KV heads, fp16: (2, n_head_kv, head_dim)
//   kind kProbe: record = K of the probe KV heads only, fp16: (n_probe, head_dim)
// Records are token-major, so the bytes of any set of tokens (or of just their K or V halves)
// map to a few 4 KiB blocks that can be read and verified on their own. Every 4 KiB block has an
// XXH3-64 checksum kept in the catalog; the chunk checksum is XXH3-64 of that array. The header
// names the model (fingerprint hash), node, layer, generation and slot range, and has its own
// checksum. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace impress::store {

constexpr uint32_t kChunkMagic = 0x564b4d49;  // "IMKV"
constexpr uint16_t kFormatVersion = 1;
constexpr uint32_t kChunkHeaderBytes = 128;
constexpr uint32_t kBlockBytes = 4096;

enum class ChunkKind : uint16_t { kKV = 1, kProbe = 2 };

#pragma pack(push, 1)
struct ChunkHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint64_t fingerprint_hash;
  uint64_t node_id;
  uint64_t generation;
  uint32_t layer;
  uint32_t index;          // chunk index inside the node's layer (0 for probe sets)
  uint32_t slot_begin;     // first slot (token index inside the node, after any reorder)
  uint32_t n_slots;
  uint32_t n_heads;        // KV heads (kKV) or probe KV heads (kProbe)
  uint32_t head_dim;
  uint32_t record_bytes;
  uint32_t reordered;      // 1 when slots are not original positions (see the node's mapping list)
  uint8_t reserved[56];
  uint64_t header_checksum;  // XXH3-64 of the bytes before this field
};
#pragma pack(pop)
static_assert(sizeof(ChunkHeader) == kChunkHeaderBytes);

// Where a chunk lives and how to verify it.
struct ChunkExtent {
  uint32_t file = 0;    // data file id (store/extent-files.h)
  uint64_t offset = 0;     // bytes, 4 KiB-aligned
  uint32_t length = 0;     // bytes, 4 KiB multiple
  uint32_t slot_begin = 0;
  uint32_t n_slots = 0;
  uint64_t checksum = 0;               // XXH3-64 of block_sums
  std::vector<uint64_t> block_sums;    // XXH3-64 of each 4 KiB block
};

uint64_t HashBytes(const void* p, size_t n);
uint64_t FingerprintHash(const std::string& fingerprint);

// Bytes a chunk of n records occupies on disk.
inline uint32_t ChunkBytes(uint32_t n_records, uint32_t record_bytes) {
  uint64_t n = kChunkHeaderBytes + uint64_t(n_records) * record_bytes;
  return uint32_t((n + kBlockBytes - 1) / kBlockBytes * kBlockBytes);
}

// Writes header + records into buf (ChunkBytes() long, zeroed) and fills block sums and checksum.
void EncodeChunk(const ChunkHeader& h_in, const uint8_t* records, uint8_t* buf, ChunkExtent* ext);

// Verifies the whole chunk (every block sum, the header checksum and its fields).
Status VerifyChunk(const uint8_t* buf, const ChunkExtent& ext, const ChunkHeader& expect, const std::string& what);

// Verifies blocks [first_block, first_block + n) read into buf.
Status VerifyBlocks(const uint8_t* buf, const ChunkExtent& ext, uint32_t first_block, uint32_t n,
                    const std::string& what);

uint64_t CombineBlockSums(const std::vector<uint64_t>& sums);

}  // namespace impress::store
