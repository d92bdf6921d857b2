// Model fingerprints: see fingerprint.h.
#include "engine/model/fingerprint.h"

#include <xxhash.h>

#include <filesystem>

#include "engine/model/json-file.h"

namespace impress {
namespace {

std::string HexDigest(const XXH128_hash_t& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

}  // namespace

std::string FingerprintBytes(const void* data, uint64_t n) { return HexDigest(XXH3_128bits(data, size_t(n))); }

Result<std::string> FingerprintFiles(const std::vector<HashInput>& inputs) {
  XXH3_state_t* state = XXH3_createState();
  if (!state) return Status::ResourceExhausted("cannot allocate a hash state");
  XXH3_128bits_reset(state);
  Status st;
  for (const HashInput& in : inputs) {
    const std::string name = std::filesystem::path(in.path).filename().string();
    XXH3_128bits_update(state, name.data(), name.size() + 1);
    if (in.data) {
      XXH3_128bits_update(state, in.data, size_t(in.size));
      continue;
    }
    auto text = ReadRegularFile(in.path, kMaxJsonFileBytes);
    if (!text.ok()) {
      st = text.status();
      break;
    }
    XXH3_128bits_update(state, text->data(), text->size());
  }
  const std::string hex = HexDigest(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  if (!st.ok()) return st;
  return hex;
}

}  // namespace impress
