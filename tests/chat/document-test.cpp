#include "chat/document.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/model/fifo-guard.h"

namespace impress {
namespace {

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const auto dir = std::filesystem::temp_directory_path() / "impress-document-test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Document, LoadsUtf8TextAndNormalisesLineEnds) {
  auto doc = LoadDocument(WriteTemp("a.md", "\xef\xbb\xbf# T\xc3\xadtulo\r\nline two \xf0\x9f\x98\x80\n"));
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->name, "a.md");
  EXPECT_EQ(doc->text, "# T\xc3\xadtulo\nline two \xf0\x9f\x98\x80\n");
}

TEST(Document, MissingFileIsNotFound) {
  auto doc = LoadDocument("/nonexistent/impress/file.txt");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), Status::Code::kNotFound);
  EXPECT_NE(doc.status().message().find("/nonexistent/impress/file.txt"), std::string::npos);
}

TEST(Document, BinaryFileIsRefused) {
  std::string bytes =
      "\x7f"
      "ELF";
  bytes += std::string("\0\0\x01\x02", 4);
  auto doc = LoadDocument(WriteTemp("b.bin", bytes));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("not"), std::string::npos) << doc.status().ToString();
}

TEST(Document, InvalidUtf8NamesTheOffset) {
  auto doc = LoadDocument(WriteTemp("c.txt", "fine text\xc3\x28 more"));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("offset 9"), std::string::npos) << doc.status().ToString();
}

TEST(Document, TooLargeIsRefusedBeforeReading) {
  auto doc = LoadDocument(WriteTemp("d.txt", std::string(2048, 'a')), DocumentLimits{.max_bytes = 1024});
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), Status::Code::kResourceExhausted);
}

TEST(Document, DirectoryAndEmptyFileAreRefused) {
  EXPECT_FALSE(LoadDocument(std::filesystem::temp_directory_path().string()).ok());
  EXPECT_FALSE(LoadDocument(WriteTemp("e.txt", " \n\n")).ok());
}

TEST(Document, FifoAndLinkLoopAreRefusedWithoutBlocking) {
  const auto dir = std::filesystem::temp_directory_path() / "impress-document-test";
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "notes.fifo").string(), loop = (dir / "loop.txt").string();
  std::filesystem::remove(fifo);
  std::filesystem::remove(loop);
  ASSERT_TRUE(test::MakeFifo(fifo));
  bool hung = false;
  auto d = test::CallGuardingFifo(
      fifo, [&] { return LoadDocument(fifo); }, &hung);
  EXPECT_FALSE(hung) << "attaching a FIFO blocked";
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kInvalidArgument) << d.status().ToString();
  std::filesystem::create_symlink("loop.txt", loop);
  d = LoadDocument(loop);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("symbolic links"), std::string::npos) << d.status().ToString();
  std::filesystem::remove(fifo);
  std::filesystem::remove(loop);
}

TEST(Utf8, RejectsOverlongSurrogatesAndTruncation) {
  EXPECT_EQ(FindInvalidUtf8("abc"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("a\xed\xa0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("ab\xe2\x82"), 2u);        // truncated
  EXPECT_EQ(FindInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // > U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xe2\x82\xac\xf0\x9f\x98\x80"), std::string_view::npos);
}

}  // namespace
}  // namespace impress
