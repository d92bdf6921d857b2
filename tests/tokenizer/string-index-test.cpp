// StringIndex against std::unordered_map on random strings: duplicates keep their first id,
// lookups of absent strings say -1, and growth past the reserved size keeps every entry.
#include "engine/tokenizer/string-index.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace impress {
namespace {

TEST(StringIndex, AgreesWithAMapOfCopiesAndKeepsTheFirstOfDuplicates) {
  std::mt19937 rng(3);
  std::vector<std::string> keys;
  for (int i = 0; i < 20000; ++i) {
    std::string s(size_t(rng() % 12), ' ');
    for (char& c : s) c = char('a' + rng() % 4);  // short strings over 4 letters: many duplicates
    keys.push_back(std::move(s));
  }
  StringIndex index;
  index.Reserve(1000);  // grows past this
  std::unordered_map<std::string, int32_t> ref;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool fresh = ref.emplace(keys[i], int32_t(i)).second;
    EXPECT_EQ(index.Insert(keys[i], int32_t(i)), fresh) << keys[i];
  }
  EXPECT_EQ(index.size(), ref.size());
  for (const auto& [k, id] : ref) EXPECT_EQ(index.Find(k), id) << k;
  EXPECT_EQ(index.Find("abcdefghijklmnop"), -1);  // longer than any key
  EXPECT_EQ(index.Find("e"), -1);                 // a letter no key has
  EXPECT_EQ(StringIndex().Find("a"), -1);         // empty index
}

}  // namespace
}  // namespace impress
