#include "chat/document.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace impress {

size_t FindInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else return i;
    if (i + len > n) return i;
    for (size_t j = 1; j < len; ++j) {
      if ((p[i + j] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + j] & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) {
      return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

Status CheckText(std::string_view bytes, const std::string& what) {
  if (const size_t bad = FindInvalidUtf8(bytes); bad != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("{} is not valid UTF-8 text (bad byte 0x{:02x} at offset {}); convert it to UTF-8 first", what,
                    static_cast<unsigned char>(bytes[bad]), bad));
  }
  size_t n_control = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == 0) {
      return Status::InvalidArgument(fmt::format("{} is not a text file (NUL byte at offset {})", what, i));
    }
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f') ++n_control;
  }
  if (n_control > 16 && n_control * 100 > bytes.size()) {
    return Status::InvalidArgument(fmt::format("{} looks binary ({} control characters)", what, n_control));
  }
  return Status::Ok();
}

Result<Document> LoadDocument(const std::string& path, const DocumentLimits& limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound(fmt::format("cannot open document {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(fmt::format("{} is not a regular file", path));
  if (uint64_t(st.st_size) > limits.max_bytes) {
    return Status::ResourceExhausted(fmt::format("{} is too large ({:.1f} MiB; the limit is {:.0f} MiB)", path,
                                                 double(st.st_size) / (1 << 20), double(limits.max_bytes) / (1 << 20)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(fmt::format("cannot read document {}", path));
  std::string bytes(size_t(st.st_size), '\0');
  in.read(bytes.data(), std::streamsize(bytes.size()));
  if (size_t(in.gcount()) != bytes.size()) return Status::IOError(fmt::format("short read on {}", path));

  if (bytes.size() >= 3 && bytes.compare(0, 3, "\xef\xbb\xbf") == 0) bytes.erase(0, 3);
  IMPRESS_RETURN_IF_ERROR(CheckText(bytes, path));
  Document doc;
  doc.path = path;
  const size_t slash = path.find_last_of('/');
  doc.name = slash == std::string::npos ? path : path.substr(slash + 1);
  doc.text.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] == '\r' && i + 1 < bytes.size() && bytes[i + 1] == '\n') continue;
    doc.text.push_back(bytes[i]);
  }
  if (doc.text.find_first_not_of(" \t\n\f\r") == std::string::npos) {
    return Status::InvalidArgument(fmt::format("{} is empty", path));
  }
  return doc;
}

std::string OneLine(const std::string& s, size_t max_bytes) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += ' ';
    else if (uint8_t(c) >= 0x20 || c < 0) out += c;
  }
  return out;
}

}  // namespace impress
