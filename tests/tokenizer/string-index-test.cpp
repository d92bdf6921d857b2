// StringIndex against std::unordered_map on random strings: duplicates keep their first id,
// lookups of absent strings say -1, and growth past the reserved size keeps every entry; the
// same for MergeTable on random pairs of ids.
#include "engine/tokenizer/string-index.h"

#include "engine/tokenizer/merge-table.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

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
  // Lookups with the hash computed beforehand (the load's read-ahead) agree.
  for (const auto& [k, id] : ref) {
    index.Prefetch(StringIndex::Hash(k));
    EXPECT_EQ(index.Find(k, StringIndex::Hash(k)), id) << k;
  }
}

TEST(MergeTable, AgreesWithAMapAndKeepsTheFirstRuleOfAPair) {
  std::mt19937 rng(5);
  MergeTable table;
  table.Reserve(100);  // grows past this
  std::map<std::pair<int32_t, int32_t>, BpeMerge> ref;
  for (int32_t r = 0; r < 30000; ++r) {
    // Ids from a small range (many repeated pairs), and some near 2^31 (the key's top bits).
    const int32_t left = rng() % 8 ? int32_t(rng() % 300) : int32_t(0x7fffffff - rng() % 3);
    const int32_t right = int32_t(rng() % 300);
    const BpeMerge m{r, int32_t(rng() % 1000)};
    const bool fresh = ref.emplace(std::make_pair(left, right), m).second;
    EXPECT_EQ(table.Insert(left, right, m), fresh) << left << " " << right;
  }
  EXPECT_EQ(table.size(), ref.size());
  for (const auto& [pair, m] : ref) {
    const BpeMerge* got = table.Find(pair.first, pair.second);
    ASSERT_NE(got, nullptr) << pair.first << " " << pair.second;
    EXPECT_EQ(got->rank, m.rank);
    EXPECT_EQ(got->merged, m.merged);
  }
  EXPECT_EQ(table.Find(300, 0), nullptr);  // an id no rule has
  EXPECT_EQ(table.Find(0, 300), nullptr);
  EXPECT_EQ(MergeTable().Find(0, 0), nullptr);  // empty table
}

}  // namespace
}  // namespace impress
