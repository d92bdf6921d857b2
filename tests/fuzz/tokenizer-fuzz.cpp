// libFuzzer target: the tokenizer loaders, then the loaded tokenizer on fixed texts. The first
// byte picks the loader; the rest is the file (or files, cut at the line "--8<--"):
//   0: a GGUF image -> GgufFile::OpenFromMemory -> Tokenizer::FromGguf (the vocabulary from
//      GGUF metadata, in memory);
//   1: tokenizer.json [, tokenizer_config.json [, config.json]] in a folder -> FromHfFolder;
//   2: vocab.json, merges.txt [, added_tokens.json] in a folder -> FromHfFolder.
// What must hold: loading fails with a Status or gives a tokenizer whose Encode returns ids in
// [0, n_vocab) for every text (special parsing on and off), whose Decode and Piece never fail,
// and whose StreamDecoder emits valid UTF-8 only. Never a crash, a hang or an absurd allocation.
//
// Single-threaded harness; the folder is this process's own scratch folder.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using impress::Tokenizer;

namespace {

std::string* scratch = nullptr;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "tokenizer-fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// RFC 3629 UTF-8: no overlongs, no surrogates, nothing above U+10FFFF.
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else return false;
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (uint8_t(s[i + k]) & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

void Check(const Tokenizer& tok) {
  const int32_t n_vocab = tok.n_vocab();
  std::vector<std::string> texts = {
      "Hello world! It's 2025, isn't it?",
      "  leading spaces\n\n\ttabs and 12345678 digits  ",
      "\xc3\xa9t\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x99\x82 emoji",
      "invalid \xff\xfe\xc0\x80 bytes \xed\xa0\x80 and a cut \xe2\x82",
      "<|im_start|>user\nhi<|im_end|> <s> </s> <0x41> <unk>",
      std::string("nul\0inside", 10),
  };
  size_t n_special = 0;
  for (const auto& [text, id] : tok.special_tokens()) {
    if (id < 0 || id >= n_vocab) Fail("special token id out of range");
    if (n_special++ < 4) texts.push_back("a" + text + " b" + text + text);
  }
  for (const std::string& text : texts) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true, special);
      for (int32_t id : ids)
        if (id < 0 || id >= n_vocab) Fail("Encode gave id " + std::to_string(id) + " of " + std::to_string(n_vocab));
      (void)tok.Decode(ids, /*skip_special=*/false);
      (void)tok.Decode(ids, /*skip_special=*/true);
      impress::StreamDecoder dec(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += dec.Push(id);
      streamed += dec.Flush();
      if (!ValidUtf8(streamed)) Fail("StreamDecoder emitted invalid UTF-8");
    }
  }
  for (int32_t id : {-1, 0, n_vocab / 2, n_vocab - 1, n_vocab, INT32_MAX}) {
    (void)tok.Piece(id);
    (void)tok.TokenText(id);
    (void)tok.token_type(id);
    (void)tok.IsSpecial(id);
    (void)tok.IsEndOfGeneration(id);
  }
}

// The input cut at lines "--8<--" into at most `names.size()` files written to the folder.
void WriteFiles(std::string_view rest, const std::vector<const char*>& names) {
  fs::remove_all(*scratch);
  fs::create_directories(*scratch);
  static constexpr std::string_view kCut = "\n--8<--\n";
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t at = i + 1 < names.size() ? rest.find(kCut) : std::string_view::npos;
    const std::string_view part = rest.substr(0, at);
    std::ofstream(fs::path(*scratch) / names[i], std::ios::binary).write(part.data(), std::streamsize(part.size()));
    if (at == std::string_view::npos) break;
    rest.remove_prefix(at + kCut.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // loaders warn about odd but accepted vocabularies
  const char* env = std::getenv("TOKENIZER_FUZZ_DIR");
  const std::string base = env && *env ? env : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  scratch = new std::string(base + "/impress-tokenizer-fuzz-" + std::to_string(::getpid()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      std::unique_ptr<uint8_t[]> copy(new uint8_t[rest.size() ? rest.size() : 1]);
      if (!rest.empty()) std::memcpy(copy.get(), rest.data(), rest.size());
      auto g = impress::GgufFile::OpenFromMemory(copy.get(), rest.size(), "fuzz.gguf");
      if (!g.ok()) return 0;
      auto tok = Tokenizer::FromGguf(*g);
      if (tok.ok()) Check(*tok);
      return 0;
    }
    case 1: WriteFiles(rest, {"tokenizer.json", "tokenizer_config.json", "config.json"}); break;
    default: WriteFiles(rest, {"vocab.json", "merges.txt", "added_tokens.json"}); break;
  }
  auto tok = Tokenizer::FromHfFolder(*scratch);
  if (tok.ok()) Check(*tok);
  return 0;
}
