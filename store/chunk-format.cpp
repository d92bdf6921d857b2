#include "store/chunk-format.h"

// Inlined, XXH3 takes the vector width this file is compiled for (AVX2): the library Debian ships
// is built for the baseline (SSE2) and hashes a read's blocks at half the rate. Same hashes.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace impress::store {

uint64_t HashBytes(const void* p, size_t n) { return XXH3_64bits(p, n); }
uint64_t FingerprintHash(const std::string& fp) { return XXH3_64bits(fp.data(), fp.size()); }

uint64_t CombineBlockSums(const std::vector<uint64_t>& sums) {
  return XXH3_64bits(sums.data(), sums.size() * sizeof(uint64_t));
}

void EncodeChunk(const ChunkHeader& h_in, const uint8_t* k_records, const uint8_t* v_records, uint8_t* buf,
                 ChunkExtent* ext) {
  ChunkHeader h = h_in;
  h.magic = kChunkMagic;
  h.version = kFormatVersion;
  const ChunkLayout lay = LayoutOf(h);
  h.k_offset = lay.k_offset;
  h.v_offset = lay.v_offset;
  std::memset(h.reserved, 0, sizeof(h.reserved));
  h.header_checksum = XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum));
  const uint32_t len = lay.length;
  const size_t region = size_t(h.n_slots) * h.record_bytes;
  std::memset(buf, 0, len);
  std::memcpy(buf, &h, sizeof(h));
  std::memcpy(buf + lay.k_offset, k_records, region);
  if (lay.v_offset) std::memcpy(buf + lay.v_offset, v_records, region);
  ext->length = len;
  ext->slot_begin = h.slot_begin;
  ext->n_slots = h.n_slots;
  ext->block_sums.resize(len / kBlockBytes);
  for (uint32_t b = 0; b < len / kBlockBytes; ++b)
    ext->block_sums[b] = XXH3_64bits(buf + size_t(b) * kBlockBytes, kBlockBytes);
  ext->checksum = CombineBlockSums(ext->block_sums);
}

Status VerifyBlocks(const uint8_t* buf, const ChunkExtent& ext, uint32_t first_block, uint32_t n,
                    const std::string& what) {
  if (ext.block_sums.size() != ext.length / kBlockBytes || CombineBlockSums(ext.block_sums) != ext.checksum)
    return Status::Corruption(what + ": catalog block checksums inconsistent");
  if (size_t(first_block) + n > ext.block_sums.size())
    return Status::Internal(what + ": block range past the chunk end");
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t h = XXH3_64bits(buf + size_t(i) * kBlockBytes, kBlockBytes);
    if (h != ext.block_sums[first_block + i])
      return Status::Corruption(what + ": checksum mismatch in 4 KiB block " + std::to_string(first_block + i) +
                                " (data file " + std::to_string(ext.file) + ", offset " +
                                std::to_string(ext.offset + uint64_t(first_block + i) * kBlockBytes) + ")");
  }
  return Status::Ok();
}

Status VerifyChunk(const uint8_t* buf, const ChunkExtent& ext, const ChunkHeader& expect, const std::string& what) {
  IMPRESS_RETURN_IF_ERROR(VerifyBlocks(buf, ext, 0, ext.length / kBlockBytes, what));
  ChunkHeader h;
  std::memcpy(&h, buf, sizeof(h));
  if (h.magic != kChunkMagic) return Status::Corruption(what + ": bad chunk magic");
  if (h.version < kOldestReadableVersion || h.version > kFormatVersion)
    return Status::Corruption(what + ": chunk format version " + std::to_string(h.version) + ", expected " +
                              std::to_string(kOldestReadableVersion) + ".." + std::to_string(kFormatVersion));
  if (h.header_checksum != XXH3_64bits(&h, offsetof(ChunkHeader, header_checksum)))
    return Status::Corruption(what + ": header checksum mismatch");
  if (h.kind != expect.kind || h.fingerprint_hash != expect.fingerprint_hash || h.node_id != expect.node_id ||
      h.generation != expect.generation || h.layer != expect.layer || h.index != expect.index ||
      h.slot_begin != ext.slot_begin || h.n_slots != ext.n_slots || h.n_heads != expect.n_heads ||
      h.head_dim != expect.head_dim || h.encoding != expect.encoding || h.record_bytes != expect.record_bytes ||
      h.k_offset != LayoutOf(h).k_offset || h.v_offset != LayoutOf(h).v_offset || ext.length != LayoutOf(h).length)
    return Status::Corruption(what + ": header names another chunk (node " + std::to_string(h.node_id) + ", layer " +
                              std::to_string(h.layer) + ", index " + std::to_string(h.index) + ", generation " +
                              std::to_string(h.generation) + ")");
  return Status::Ok();
}

}  // namespace impress::store
