// Quote: text taken from a model file (a metadata key, a tensor or shard name), made safe for an
// error message. Internal to engine/model (the GGUF and safetensors readers). Pure function.
#pragma once

#include <string>
#include <string_view>

namespace impress {

// 'text' in single quotes, non-printable bytes as '?', cut after 80 characters with "...": names
// come from hostile files, so messages stay printable and bounded.
inline std::string Quote(std::string_view s) {
  std::string out = "'";
  size_t n = 0;
  for (char c : s) {
    if (++n > 80) {
      out += "...";
      break;
    }
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out + "'";
}

}  // namespace impress
