// FormatMib and ElideMiddle: sizes read as a person writes them (no six decimals, MiB to GiB
// to TiB), and elided text that fits the width, keeps the start and the (longer) end of the
// original around one "...", never cuts a UTF-8 character, and is the text itself when it fits.
#include "gui/text-format.h"

#include <gtest/gtest.h>

namespace impress::gui {
namespace {

// One unit per character (UTF-8 continuation bytes are not characters).
float Chars(std::string_view s) {
  float n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(TextFormat, MibReadsWithoutTrailingDecimals) {
  EXPECT_EQ(FormatMib(0), "0 MiB");
  EXPECT_EQ(FormatMib(-5), "0 MiB");
  EXPECT_EQ(FormatMib(0.5), "0.5 MiB");
  EXPECT_EQ(FormatMib(256), "256 MiB");
  EXPECT_EQ(FormatMib(1000.25), "1000.25 MiB");
  EXPECT_EQ(FormatMib(1024), "1 GiB");
  EXPECT_EQ(FormatMib(1536), "1.5 GiB");
  EXPECT_EQ(FormatMib(16384), "16 GiB");
  EXPECT_EQ(FormatMib(1000), "1000 MiB");
  EXPECT_EQ(FormatMib(1024.0 * 1024 * 1.25), "1.25 TiB");
  EXPECT_EQ(FormatMib(1024 * 1.333333), "1.33 GiB");
}

TEST(TextFormat, ElideKeepsTextThatFits) {
  EXPECT_EQ(ElideMiddle("model.gguf", 10, Chars), "model.gguf");
  EXPECT_EQ(ElideMiddle("", 0, Chars), "");
}

TEST(TextFormat, ElidedTextFitsAndKeepsBothEnds) {
  const std::string path = "/home/someone/models/very-long-directory-name/SmolLM2-135M-Instruct.Q4_1.gguf";
  for (float w : {5.f, 10.f, 20.f, 40.f, float(path.size() - 1)}) {
    const std::string e = ElideMiddle(path, w, Chars);
    EXPECT_LE(Chars(e), w) << e;
    const size_t dots = e.find("...");
    ASSERT_NE(dots, std::string::npos) << e;
    const std::string head = e.substr(0, dots), tail = e.substr(dots + 3);
    EXPECT_EQ(path.compare(0, head.size(), head), 0) << e;
    EXPECT_EQ(path.compare(path.size() - tail.size(), tail.size(), tail), 0) << e;
    EXPECT_GE(tail.size(), head.size()) << e;  // the file name end is kept longer
    EXPECT_GE(Chars(e), w - 2) << e;           // nearly all the room is used
  }
  EXPECT_EQ(ElideMiddle(path, 2.5f, Chars), "...");
}

TEST(TextFormat, ElideNeverCutsAUtf8Character) {
  const std::string name = "\xC3\xA9t\xC3\xA9-r\xC3\xA9sum\xC3\xA9-\xE6\x96\x87\xE6\x9B\xB8-\xF0\x9F\x93\x84-notes.md";
  for (float w = 3; w < Chars(name); ++w) {  // "..." alone needs 3
    const std::string e = ElideMiddle(name, w, Chars);
    EXPECT_TRUE(ValidUtf8(e)) << "width " << w;
    EXPECT_LE(Chars(e), w);
  }
}

}  // namespace
}  // namespace impress::gui
