// The terminal chat's capped line reader (chat/line-reader.h): lines come back as std::getline
// gives them; a line over the cap is refused after reading one byte past it, also from an
// endless stream with no newline at all (what `impress chat < /dev/zero` reads), and the lines
// after it are read normally.
#include "chat/line-reader.h"

#include <gtest/gtest.h>

#include <sstream>
#include <streambuf>
#include <string>

namespace impress {
namespace {

// An endless stream of zero bytes that counts what was taken from it.
class ZeroBuf : public std::streambuf {
 public:
  uint64_t taken() const { return taken_ - uint64_t(egptr() - gptr()); }

 protected:
  int_type underflow() override {
    setg(buf_, buf_, buf_ + sizeof buf_);
    taken_ += sizeof buf_;
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  char buf_[4096] = {};
  uint64_t taken_ = 0;
};

TEST(LineReader, LinesComeBackLikeGetline) {
  std::istringstream in("first\n\nthird line\nlast without newline");
  std::string line;
  ASSERT_EQ(ReadLineCapped(in, 64, &line), LineRead::kLine);
  EXPECT_EQ(line, "first");
  ASSERT_EQ(ReadLineCapped(in, 64, &line), LineRead::kLine);
  EXPECT_EQ(line, "");
  ASSERT_EQ(ReadLineCapped(in, 64, &line), LineRead::kLine);
  EXPECT_EQ(line, "third line");
  ASSERT_EQ(ReadLineCapped(in, 64, &line), LineRead::kLine);
  EXPECT_EQ(line, "last without newline");
  EXPECT_EQ(ReadLineCapped(in, 64, &line), LineRead::kEnd);
  EXPECT_EQ(ReadLineCapped(in, 64, &line), LineRead::kEnd);
}

TEST(LineReader, ALineAtTheCapIsKeptOneByteMoreIsRefused) {
  const std::string at_cap(100, 'a'), over(101, 'b');
  std::istringstream in(at_cap + "\n" + over + "\nafter\n");
  std::string line;
  ASSERT_EQ(ReadLineCapped(in, 100, &line), LineRead::kLine);
  EXPECT_EQ(line, at_cap);
  ASSERT_EQ(ReadLineCapped(in, 100, &line), LineRead::kTooLong);
  EXPECT_TRUE(line.empty());
  EXPECT_EQ(SkipLine(in), 1u) << "the 101st byte was read by ReadLineCapped; only the newline is left";
  ASSERT_EQ(ReadLineCapped(in, 100, &line), LineRead::kLine);
  EXPECT_EQ(line, "after");
  EXPECT_EQ(ReadLineCapped(in, 100, &line), LineRead::kEnd);
}

TEST(LineReader, HugeLineIsRefusedAndTheNextLineStillRead) {
  std::istringstream in("hello\n" + std::string(3 << 20, 'x') + "\nnext question\n");
  std::string line;
  ASSERT_EQ(ReadLineCapped(in, kMaxInputLineBytes, &line), LineRead::kLine);
  EXPECT_EQ(line, "hello");
  ASSERT_EQ(ReadLineCapped(in, kMaxInputLineBytes, &line), LineRead::kTooLong);
  EXPECT_TRUE(line.empty());
  EXPECT_EQ(SkipLine(in), (3u << 20) - kMaxInputLineBytes);
  ASSERT_EQ(ReadLineCapped(in, kMaxInputLineBytes, &line), LineRead::kLine);
  EXPECT_EQ(line, "next question");
}

TEST(LineReader, EndlessInputWithoutNewlineStopsOneBytePastTheCap) {
  ZeroBuf zeros;
  std::istream in(&zeros);
  std::string line;
  ASSERT_EQ(ReadLineCapped(in, 1 << 16, &line), LineRead::kTooLong);
  EXPECT_EQ(zeros.taken(), (1u << 16) + 1) << "read past the cap";
  EXPECT_TRUE(line.empty());
  EXPECT_LE(line.capacity(), 2u << 16) << "the refused line was held whole";
  ASSERT_EQ(ReadLineCapped(in, 1 << 16, &line), LineRead::kTooLong);
  EXPECT_EQ(zeros.taken(), 2u * ((1u << 16) + 1));
}

}  // namespace
}  // namespace impress
