#include "chat/line-reader.h"

namespace impress {

LineRead ReadLineCapped(std::istream& in, size_t max_bytes, std::string* line) {
  line->clear();
  std::streambuf* sb = in.rdbuf();
  if (!sb || !in.good()) return LineRead::kEnd;
  using Traits = std::streambuf::traits_type;
  bool any = false;
  for (;;) {
    const Traits::int_type c = sb->sbumpc();
    if (Traits::eq_int_type(c, Traits::eof())) {
      in.setstate(std::ios::eofbit);
      return any ? LineRead::kLine : LineRead::kEnd;
    }
    any = true;
    if (Traits::to_char_type(c) == '\n') return LineRead::kLine;
    if (line->size() == max_bytes) {
      line->clear();  // the capacity stays (bounded by the cap) for the next line: no churn
      return LineRead::kTooLong;
    }
    line->push_back(Traits::to_char_type(c));
  }
}

uint64_t SkipLine(std::istream& in) {
  std::streambuf* sb = in.rdbuf();
  if (!sb || !in.good()) return 0;
  using Traits = std::streambuf::traits_type;
  uint64_t n = 0;
  for (;;) {
    const Traits::int_type c = sb->sbumpc();
    if (Traits::eq_int_type(c, Traits::eof())) {
      in.setstate(std::ios::eofbit);
      return n;
    }
    ++n;
    if (Traits::to_char_type(c) == '\n') return n;
  }
}

}  // namespace impress
