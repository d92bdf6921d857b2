// The on-disk chunk format (docs/design.md section 4).
//
// A chunk is one extent, 4 KiB-aligned, zero-padded to a 4 KiB multiple.
//   kind kKV:    block 0 holds the 128-byte header alone; the K region (n_slots records of
//                (n_head_kv, head_dim) fp16, token-major) starts at 4 KiB; the V region (same
//                shape) starts at the next 4 KiB boundary after K (fp16; compact records: right
//                after K). So a key-only read touches only K blocks and a value-only read only V
//                blocks, but for the one a compact chunk's K and V share (format version 2;
//                version 1 interleaved K and V per token).
//   kind kProbe: the header, then records of K of the probe KV heads: (n_probe, head_dim).
// Records are fp16 or a compact encoding (store/kv-codec.h), named by the header's `encoding`
// (format version 3; a version 2 chunk has zero there, i.e. fp16, and is read as such).
// Regions are token-major, so the bytes of any set of tokens (K, V or both) map to a few 4 KiB
// blocks that can be read and verified on their own. Every 4 KiB block has an
// XXH3-64 checksum kept in the catalog; the chunk checksum is XXH3-64 of that array. The header
// names the model (fingerprint hash), node, layer, generation and slot range, and has its own
// checksum. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress::store {

constexpr uint32_t kChunkMagic = 0x564b4d49;  // "IMKV"
constexpr uint16_t kFormatVersion = 3;
constexpr uint16_t kOldestReadableVersion = 2;  // same layout, always fp16
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
  uint32_t index;       // chunk index inside the node's layer (0 for probe sets)
  uint32_t slot_begin;  // first slot (token index inside the node, after any reorder)
  uint32_t n_slots;
  uint32_t n_heads;  // KV heads (kKV) or probe KV heads (kProbe)
  uint32_t head_dim;
  uint32_t record_bytes;  // bytes per token of one region (K or V for kKV; probe keys for kProbe)
  uint32_t reordered;     // 1 when slots are not original positions (see the layer's mapping list)
  uint32_t k_offset;      // chunk-relative start of the K region (kKV) or of the probe records
  uint32_t v_offset;      // chunk-relative start of the V region (kKV); 0 for kProbe
  uint16_t encoding;      // KVEncoding of the records (0 = fp16)
  uint8_t reserved[46];
  uint64_t header_checksum;  // XXH3-64 of the bytes before this field
};
#pragma pack(pop)
static_assert(sizeof(ChunkHeader) == kChunkHeaderBytes);

// Where a chunk lives and how to verify it.
struct ChunkExtent {
  uint32_t file = 0;    // data file id (store/extent-files.h)
  uint64_t offset = 0;  // bytes, 4 KiB-aligned
  uint32_t length = 0;  // bytes, 4 KiB multiple
  uint32_t slot_begin = 0;
  uint32_t n_slots = 0;
  uint64_t checksum = 0;             // XXH3-64 of block_sums
  std::vector<uint64_t> block_sums;  // XXH3-64 of each 4 KiB block
};

uint64_t HashBytes(const void* p, size_t n);
uint64_t FingerprintHash(const std::string& fingerprint);

inline uint64_t AlignBlock(uint64_t n) { return (n + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }

// Where the regions of a chunk lie (chunk-relative bytes) and how long it is on disk.
struct ChunkLayout {
  uint32_t k_offset = 0;
  uint32_t v_offset = 0;  // 0: no V region (probe chunks)
  uint32_t length = 0;    // 4 KiB multiple
};

// A KV chunk of n tokens, `region_record_bytes` per token in each of the K and V regions. fp16
// regions each start on a block (formats 2 and 3 alike); compact records (`packed`) have sizes
// prime to 4 KiB, so their V region follows K at once, sharing at most one block, rather than
// padding both to whole blocks.
inline ChunkLayout KVChunkLayout(uint32_t n_slots, uint32_t region_record_bytes, bool packed = false) {
  ChunkLayout l;
  l.k_offset = kBlockBytes;
  const uint64_t k_end = uint64_t(l.k_offset) + uint64_t(n_slots) * region_record_bytes;
  l.v_offset = uint32_t(packed ? k_end : AlignBlock(k_end));
  l.length = uint32_t(AlignBlock(uint64_t(l.v_offset) + uint64_t(n_slots) * region_record_bytes));
  return l;
}

// A probe chunk: header then n records.
inline ChunkLayout ProbeChunkLayout(uint32_t n_slots, uint32_t record_bytes) {
  ChunkLayout l;
  l.k_offset = kChunkHeaderBytes;
  l.length = uint32_t(AlignBlock(kChunkHeaderBytes + uint64_t(n_slots) * record_bytes));
  return l;
}

inline ChunkLayout LayoutOf(const ChunkHeader& h) {
  return h.kind == uint16_t(ChunkKind::kKV) ? KVChunkLayout(h.n_slots, h.record_bytes, h.encoding != 0)
                                            : ProbeChunkLayout(h.n_slots, h.record_bytes);
}

// Writes the header and regions into buf (LayoutOf(h).length long) and fills block sums and
// checksum. kKV: k_records and v_records each hold n_slots * record_bytes; kProbe: v_records is
// unused (may be null).
void EncodeChunk(const ChunkHeader& h_in, const uint8_t* k_records, const uint8_t* v_records, uint8_t* buf,
                 ChunkExtent* ext);

// Verifies the whole chunk (every block sum, the header checksum and its fields).
Status VerifyChunk(const uint8_t* buf, const ChunkExtent& ext, const ChunkHeader& expect, const std::string& what);

// Verifies blocks [first_block, first_block + n) read into buf.
Status VerifyBlocks(const uint8_t* buf, const ChunkExtent& ext, uint32_t first_block, uint32_t n,
                    const std::string& what);

uint64_t CombineBlockSums(const std::vector<uint64_t>& sums);

}  // namespace impress::store
