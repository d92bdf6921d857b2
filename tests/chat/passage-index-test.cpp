// PassageIndex: passages tile documents exactly at paragraph and UTF-8 boundaries; free-text
// questions never break the FTS5 query; ranking and scores equal an independent bm25 written
// here from FTS5's definition; budget selection fits and reads in document order; a damaged
// file is moved aside and a new index started.
#include "chat/passage-index.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

namespace impress::persist {
namespace {

namespace fs = std::filesystem;

class PassageIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("impress-pidx-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "passages.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<PassageIndex> OpenOrDie(PassageIndexOptions o = {}) {
    auto r = PassageIndex::Open(path_, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  fs::path dir_;
  std::string path_;
};

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Checks that spans tile `text` in order, each at most `target` bytes and none starting inside a
// UTF-8 sequence.
void ExpectTiles(const std::string& text, const std::vector<PassageSpan>& spans, size_t target) {
  uint64_t pos = 0;
  std::string joined;
  for (const PassageSpan& s : spans) {
    ASSERT_EQ(s.offset, pos);
    ASSERT_GT(s.length, 0u);
    ASSERT_LE(s.length, target);
    ASSERT_LE(s.offset + s.length, text.size());
    EXPECT_FALSE(IsContinuation(static_cast<unsigned char>(text[s.offset]))) << "span at " << s.offset;
    joined += text.substr(s.offset, s.length);
    pos += s.length;
  }
  EXPECT_EQ(pos, text.size());
  EXPECT_EQ(joined, text);
}

// Text with paragraphs of random sizes, blank lines with spaces/CRs, and runs without any space
// made of 2-, 3- and 4-byte UTF-8 characters.
std::string RandomText(std::mt19937& rng, int n_paragraphs) {
  const std::vector<std::string> words = {"zebra", "river",      "é",  "naïve", "中文字", "🙂",
                                          "a",     "longerword", "x.", "end!",  "line\n"};
  std::string t;
  for (int p = 0; p < n_paragraphs; ++p) {
    int kind = int(rng() % 4);
    int n = 1 + int(rng() % (kind == 0 ? 400 : 60));
    for (int w = 0; w < n; ++w) {
      t += words[rng() % words.size()];
      if (kind != 1) t += ' ';  // kind 1: one long run without spaces
    }
    switch (rng() % 3) {
      case 0: t += "\n\n"; break;
      case 1: t += "\n  \r\n\n"; break;
      default: t += "\n"; break;  // a single newline: not a paragraph break
    }
  }
  return t;
}

TEST(SplitPassagesTest, TilesTheTextAtUtf8BoundariesForManyTargets) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 40; ++trial) {
    const std::string text = RandomText(rng, 1 + int(rng() % 12));
    for (size_t target : {16, 37, 200, 1200}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " target " + std::to_string(target));
      ExpectTiles(text, SplitPassages(text, target), target);
    }
  }
  EXPECT_TRUE(SplitPassages("", 1200).empty());
  // A run of 4-byte characters with no break at all: cuts land between characters.
  std::string emoji;
  for (int i = 0; i < 100; ++i) emoji += "🙂";
  auto spans = SplitPassages(emoji, 30);
  ExpectTiles(emoji, spans, 30);
  for (const PassageSpan& s : spans) EXPECT_EQ(s.length % 4, 0u);
}

TEST(SplitPassagesTest, BreaksOnlyAtParagraphsWhenParagraphsFit) {
  // Paragraphs of 100..300 bytes: every passage boundary must be a paragraph start, and
  // neighbouring paragraphs are packed while they fit in 1,200 bytes.
  std::mt19937 rng(3);
  std::string text;
  std::set<size_t> para_starts = {0};
  std::vector<size_t> para_lengths;
  for (int p = 0; p < 40; ++p) {
    size_t start = text.size();
    size_t n = 100 + rng() % 200;
    std::string para;
    while (para.size() < n) para += "word" + std::to_string(rng() % 100) + (rng() % 9 == 0 ? ".\n" : " ");
    text += para + "\n\n";
    para_lengths.push_back(text.size() - start);
    para_starts.insert(text.size());
  }
  auto spans = SplitPassages(text, 1200);
  ExpectTiles(text, spans, 1200);
  for (const PassageSpan& s : spans)
    EXPECT_TRUE(para_starts.count(s.offset)) << "boundary inside a paragraph at " << s.offset;
  // Packing: no passage could have taken the next paragraph too.
  for (size_t i = 0; i + 1 < spans.size(); ++i) {
    size_t next_end = *para_starts.upper_bound(spans[i + 1].offset);
    EXPECT_GT(spans[i].length + (next_end - spans[i + 1].offset), 1200u) << "passage " << i << " under-packed";
  }
  // An over-long paragraph is cut at a sentence or word boundary, not mid-word.
  std::string long_para;
  for (int i = 0; i < 200; ++i) long_para += "Sentence number " + std::to_string(i) + " is here. ";
  auto cuts = SplitPassages(long_para, 300);
  ExpectTiles(long_para, cuts, 300);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    size_t end = cuts[i].offset + cuts[i].length;
    EXPECT_EQ(long_para[end - 1], ' ');
    EXPECT_EQ(long_para[end - 2], '.');  // a sentence end exists in every 150-byte window
  }
}

TEST_F(PassageIndexTest, StoredPassagesTileEachDocumentAndSurviveReopen) {
  std::mt19937 rng(11);
  std::map<std::string, std::string> docs;
  {
    auto idx = OpenOrDie();
    ASSERT_TRUE(idx);
    for (int d = 0; d < 5; ++d) {
      std::string key = "doc" + std::to_string(d);
      docs[key] = RandomText(rng, 30);
      ASSERT_TRUE(idx->Add(key, key + ".md", docs[key]).ok());
    }
    ASSERT_TRUE(idx->Add("empty", "empty.txt", "").ok());
  }
  auto idx = OpenOrDie();
  ASSERT_TRUE(idx);
  for (const auto& [key, text] : docs) {
    auto ps = idx->Passages(key);
    ASSERT_TRUE(ps.ok()) << ps.status().ToString();
    ASSERT_GT(ps->size(), 1u);
    std::string joined;
    for (size_t i = 0; i < ps->size(); ++i) {
      const Passage& p = (*ps)[i];
      EXPECT_EQ(p.index, int(i));
      EXPECT_EQ(p.offset, joined.size());
      EXPECT_EQ(p.length, p.text.size());
      EXPECT_EQ(p.name, key + ".md");
      joined += p.text;
    }
    EXPECT_EQ(joined, text);
  }
  auto empty = idx->Passages("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(idx->Passages("missing").status().code(), Status::Code::kNotFound);
  auto list = idx->Documents();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 6u);
  EXPECT_EQ((*list)[0].doc_key, "doc0");
  EXPECT_EQ((*list)[0].n_bytes, docs["doc0"].size());
  EXPECT_EQ((*list)[5].n_passages, 0);
}

TEST_F(PassageIndexTest, ReAddingReplacesAndRemoveDeletes) {
  auto idx = OpenOrDie();
  ASSERT_TRUE(idx);
  ASSERT_TRUE(idx->Add("a", "a.txt", "The zebra stripes.\n\nMore about zebra herds.").ok());
  ASSERT_TRUE(idx->Add("b", "b.txt", "Nothing here but a yak.").ok());
  auto r = idx->Search("zebra", 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);  // one passage: both paragraphs fit in 1,200 bytes
  EXPECT_EQ((*r)[0].doc_key, "a");
  ASSERT_TRUE(idx->Add("a", "a2.txt", "Now it is about a yak and an okapi.").ok());
  EXPECT_TRUE(idx->Search("zebra", 10)->empty());
  auto yak = idx->Search("yak", 10);
  ASSERT_TRUE(yak.ok());
  ASSERT_EQ(yak->size(), 2u);
  std::set<std::string> names;
  for (const Passage& p : *yak) names.insert(p.name);
  EXPECT_EQ(names, (std::set<std::string>{"a2.txt", "b.txt"}));
  ASSERT_TRUE(idx->Remove("a").ok());
  EXPECT_EQ(idx->Remove("a").code(), Status::Code::kNotFound);
  EXPECT_FALSE(*idx->Contains("a"));
  EXPECT_TRUE(*idx->Contains("b"));
  EXPECT_TRUE(idx->Search("okapi", 10)->empty());
  ASSERT_EQ(idx->Search("yak", 10)->size(), 1u);
  idx.reset();
  // Independently: no FTS rows or passages are left behind by the replace and the remove.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  for (const char* sql : {"SELECT count(*) FROM pidx_fts", "SELECT count(*) FROM pidx_passages"}) {
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &s, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(s, 0), 1) << sql;
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
}

TEST_F(PassageIndexTest, AFailedAddLeavesTheIndexAsItWas) {
  PassageIndexOptions o;
  o.max_file_bytes = 256 << 10;  // writes past this fail like a full disk
  auto idx = OpenOrDie(o);
  ASSERT_TRUE(idx);
  ASSERT_TRUE(idx->Add("a", "a.txt", "A zebra by the river.\n\nA second paragraph.").ok());
  auto before = idx->Passages("a");
  ASSERT_TRUE(before.ok());
  // Replacing "a" with a text too big for the limit fails as a whole: the old passages stay.
  std::string big;
  while (big.size() < (2u << 20)) big += "yak number " + std::to_string(big.size()) + " grazes.\n\n";
  Status st = idx->Add("a", "a-big.txt", big);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("disk full"), std::string::npos) << st.message();
  auto zebra = idx->Search("zebra", 5);
  ASSERT_TRUE(zebra.ok()) << zebra.status().ToString();
  ASSERT_EQ(zebra->size(), 1u);
  EXPECT_EQ((*zebra)[0].name, "a.txt");
  EXPECT_TRUE(idx->Search("yak", 5)->empty());
  auto after = idx->Passages("a");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < after->size(); ++i) EXPECT_EQ((*after)[i].text, (*before)[i].text);
  // Still usable for what fits.
  ASSERT_TRUE(idx->Add("b", "b.txt", "An okapi.").ok());
  EXPECT_EQ(idx->Search("okapi", 5)->size(), 1u);
}

TEST_F(PassageIndexTest, AdversarialQuestionsNeverError) {
  auto idx = OpenOrDie();
  ASSERT_TRUE(idx);
  ASSERT_TRUE(idx->Add("d", "d.txt", "A zebra near the river. Café über naïve 中文 text; NEAR AND OR NOT.").ok());
  std::string long_question;
  for (int i = 0; i < 5000; ++i) long_question += "word" + std::to_string(i) + " ";
  const std::vector<std::string> questions = {
      "",
      "   ",
      "\"",
      "\"\"\"",
      "AND",
      "OR NOT",
      "NEAR(a b, 3)",
      "zebra*",
      "*",
      "body:zebra",
      "^zebra",
      "(zebra",
      "zebra)",
      "zebra AND",
      "{body}: zebra",
      "'; DROP TABLE pidx_fts; --",
      "über café 中文 🙂",
      "—",
      "\xff\xfe\x80 zebra",
      "zebra\0river",
      "- + : ^ $ % ! ? .",
      "the of and is",
      long_question,
      "a\"b\"c",
      "NEAR",
      "\"zebra\" OR \"",
  };
  for (const std::string& q : questions) {
    auto r = idx->Search(q, 5);
    EXPECT_TRUE(r.ok()) << "question [" << q.substr(0, 40) << "]: " << r.status().ToString();
  }
  // The terms inside the noise still match.
  for (const char* q : {"zebra*", "body:zebra", "^zebra", "(zebra", "zebra AND", "NEAR", "café", "CAFE", "中文"}) {
    auto r = idx->Search(q, 5);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->size(), 1u) << q;
  }
  // Questions with nothing searchable give no passages (not an error).
  for (const char* q : {"", "the of and is", "?!", "—"}) {
    EXPECT_TRUE(idx->Search(q, 5)->empty()) << q;
  }
  EXPECT_EQ(BuildFtsQuery("What is THE zebra, the Zebra and NEAR*?"), "\"zebra\" OR \"near\"");
  EXPECT_EQ(BuildFtsQuery("the of and"), "");
  EXPECT_EQ(QueryTerms(long_question).size(), 64u);
}

// ---- Independent bm25 reference --------------------------------------------------------------
// Source: the FTS5 documentation, section "The bm25() function" (https://sqlite.org/fts5.html
// §5.1.1), and its implementation fts5Bm25GetData/fts5Bm25Function in ext/fts5/fts5_aux.c:
//   bm25(D, Q) = -1 * sum over phrases qi of IDF(qi) * f(qi,D) * (k1 + 1) /
//                                            (f(qi,D) + k1 * (1 - b + b * |D| / avgdl))
//   k1 = 1.2, b = 0.75; |D| = tokens in the row; avgdl = tokens in all rows / number of rows;
//   IDF(qi) = log((N - n(qi) + 0.5) / (n(qi) + 0.5)), N = rows, n(qi) = rows containing qi;
//   "if( idf<=0.0 ) idf = 1e-6;" (a term in more than half the rows would otherwise subtract).
// Tokens as unicode61 makes them for ASCII text: maximal runs of [A-Za-z0-9], lower-cased.
std::vector<std::string> AsciiTokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur.push_back(char(std::tolower(static_cast<unsigned char>(c))));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

struct RefRow {
  std::string doc_key;
  int index = 0;
  std::vector<std::string> tokens;
};

// Reference scores (FTS5 sign: negative, smaller = better) of the rows matching any term.
std::map<std::pair<std::string, int>, double> ReferenceBm25(const std::vector<RefRow>& rows,
                                                            const std::vector<std::string>& terms) {
  const double k1 = 1.2, b = 0.75;
  const double N = double(rows.size());
  double total = 0;
  for (const RefRow& r : rows) total += double(r.tokens.size());
  const double avgdl = total / N;
  std::vector<double> idf;
  for (const std::string& t : terms) {
    double n = 0;
    for (const RefRow& r : rows) n += std::count(r.tokens.begin(), r.tokens.end(), t) > 0 ? 1 : 0;
    double v = std::log((N - n + 0.5) / (n + 0.5));
    idf.push_back(v <= 0.0 ? 1e-6 : v);
  }
  std::map<std::pair<std::string, int>, double> out;
  for (const RefRow& r : rows) {
    double score = 0;
    bool any = false;
    for (size_t i = 0; i < terms.size(); ++i) {
      double f = double(std::count(r.tokens.begin(), r.tokens.end(), terms[i]));
      if (f > 0) any = true;
      score += idf[i] * f * (k1 + 1) / (f + k1 * (1 - b + b * double(r.tokens.size()) / avgdl));
    }
    if (any) out[{r.doc_key, r.index}] = -score;
  }
  return out;
}

TEST_F(PassageIndexTest, RankingAndScoresMatchAnIndependentBm25) {
  auto idx = OpenOrDie();
  ASSERT_TRUE(idx);
  const std::vector<std::pair<std::string, std::string>> corpus = {
      {"savanna", "Zebra herds cross the river each year. The zebra migration follows the rain."},
      {"river", "The river floods in spring; the river banks hold crocodiles waiting by the river."},
      {"stripes",
       "Stripes of a zebra are unique. Researchers photograph each zebra to tell them apart, "
       "and the river of photographs grows every season."},
      {"birds", "Storks and cranes follow the migration south along the river valley."},
      {"cooking", "Simmer the onions slowly; cooking takes patience and a wide pan."},
      {"herds", "Herds of wildebeest and zebra cross rivers together; the herds are enormous, herds upon herds."},
      {"short", "river zebra"},
      {"desert", "Camels cross the desert where no river flows."},
  };
  for (const auto& [key, text] : corpus) ASSERT_TRUE(idx->Add(key, key + ".txt", text).ok());
  // A multi-passage document too: its passages are rows of their own.
  std::string book;
  for (int i = 0; i < 30; ++i)
    book += "Chapter " + std::to_string(i) + ". " + std::string(i % 3 == 0 ? "A zebra appears near the river. " : "") +
            "Filler words describe the landscape, grass, acacia trees and dust number " + std::to_string(i * 7) +
            " in some detail over a long paragraph that keeps going for a while.\n\n";
  ASSERT_TRUE(idx->Add("book", "book.txt", book).ok());

  std::vector<RefRow> rows;
  auto docs = idx->Documents();
  ASSERT_TRUE(docs.ok());
  for (const IndexedDocument& d : *docs) {
    auto ps = idx->Passages(d.doc_key);
    ASSERT_TRUE(ps.ok());
    for (const Passage& p : *ps) rows.push_back({d.doc_key, p.index, AsciiTokens(p.text)});
  }
  ASSERT_GT(rows.size(), corpus.size() + 2);  // the book is several passages
  // "river" is in more than half of the rows, so the IDF clamp is exercised.
  size_t n_river = 0;
  for (const RefRow& r : rows) n_river += std::count(r.tokens.begin(), r.tokens.end(), "river") > 0;
  ASSERT_GT(2 * n_river, rows.size());

  struct Case {
    std::string question;
    std::vector<std::string> terms;  // what the question should search for
  };
  const std::vector<Case> cases = {
      {"Where do zebra herds cross the river during migration?", {"zebra", "herds", "cross", "river", "migration"}},
      {"zebra", {"zebra"}},
      {"River!", {"river"}},  // in more than half of the rows: IDF clamped to 1e-6
      {"ZEBRA zebra Zebra stripes", {"zebra", "stripes"}},
      {"onions patience camels", {"onions", "patience", "camels"}},
      {"acacia chapter 21", {"acacia", "chapter", "21"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.question);
    ASSERT_EQ(QueryTerms(c.question), c.terms);
    const auto ref = ReferenceBm25(rows, c.terms);
    ASSERT_FALSE(ref.empty());
    auto got = idx->Search(c.question, 1000);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), ref.size());
    for (size_t i = 0; i < got->size(); ++i) {
      const Passage& p = (*got)[i];
      auto it = ref.find({p.doc_key, p.index});
      ASSERT_NE(it, ref.end()) << p.doc_key << "#" << p.index << " is not a reference match";
      EXPECT_NEAR(p.bm25, it->second, 1e-9 * std::max(1.0, std::fabs(it->second))) << p.doc_key << "#" << p.index;
      EXPECT_DOUBLE_EQ(p.score(), -p.bm25);
      // Ranking: best first by the reference's own scores (ties may come in either order).
      if (i > 0) {
        double prev = ref.at({(*got)[i - 1].doc_key, (*got)[i - 1].index});
        EXPECT_LE(prev, it->second + 1e-12 * std::fabs(it->second)) << "rank " << i;
      }
    }
    // The reference's best passage comes first, and a smaller k returns the same prefix.
    auto best = std::min_element(ref.begin(), ref.end(), [](auto& a, auto& b) { return a.second < b.second; });
    EXPECT_NEAR((*got)[0].bm25, best->second, 1e-9 * std::fabs(best->second));
    auto top2 = idx->Search(c.question, 2);
    ASSERT_TRUE(top2.ok());
    ASSERT_EQ(top2->size(), std::min<size_t>(2, ref.size()));
    for (size_t i = 0; i < top2->size(); ++i) EXPECT_DOUBLE_EQ((*top2)[i].bm25, (*got)[i].bm25);
  }
}

TEST_F(PassageIndexTest, SelectForBudgetFitsAndReadsInDocumentOrder) {
  PassageIndexOptions o;
  o.target_passage_bytes = 200;
  auto idx = OpenOrDie(o);
  ASSERT_TRUE(idx);
  std::mt19937 rng(5);
  const std::vector<std::string> vocab = {"zebra", "river", "grass", "acacia", "dust", "sun", "lion", "water"};
  for (int d = 0; d < 6; ++d) {
    std::string text;
    for (int p = 0; p < 8; ++p) {
      for (int w = 0; w < 10 + int(rng() % 20); ++w) text += vocab[rng() % vocab.size()] + " ";
      text += "\n\n";
    }
    ASSERT_TRUE(idx->Add("doc" + std::to_string(d), "doc" + std::to_string(d), text).ok());
  }
  // Token counter: words separated by spaces.
  auto count = [](std::string_view s) {
    int n = 0;
    bool in = false;
    for (char c : s) {
      bool w = c != ' ' && c != '\n';
      n += w && !in;
      in = w;
    }
    return n;
  };
  const std::string q = "zebra lion water";
  auto ranked = idx->Search(q, 64);
  ASSERT_TRUE(ranked.ok());
  ASSERT_GT(ranked->size(), 10u);
  for (int budget : {0, 5, 40, 100, 250, 100000}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    auto sel = idx->SelectForBudget(q, budget, count);
    ASSERT_TRUE(sel.ok()) << sel.status().ToString();
    // Reference: greedy in rank order, skipping what does not fit.
    std::set<std::pair<std::string, int>> expect;
    int used = 0;
    for (const Passage& p : *ranked) {
      int n = count(p.text);
      if (used + n <= budget) {
        used += n;
        expect.insert({p.doc_key, p.index});
      }
    }
    std::set<std::pair<std::string, int>> got;
    int sum = 0;
    for (const Passage& p : sel->passages) {
      got.insert({p.doc_key, p.index});
      sum += count(p.text);
    }
    EXPECT_EQ(got, expect);
    EXPECT_EQ(sel->n_tokens, sum);
    EXPECT_EQ(sum, used);
    EXPECT_LE(sum, budget);
    EXPECT_EQ(sel->n_candidates, int(ranked->size()));
    for (size_t i = 1; i < sel->passages.size(); ++i) {
      const Passage& a = sel->passages[i - 1];
      const Passage& b = sel->passages[i];
      EXPECT_TRUE(a.doc_order < b.doc_order || (a.doc_order == b.doc_order && a.offset < b.offset))
          << a.doc_key << "#" << a.index << " before " << b.doc_key << "#" << b.index;
    }
    if (budget == 100000) {
      EXPECT_EQ(sel->passages.size(), ranked->size());
    }
    if (budget == 0) {
      EXPECT_TRUE(sel->passages.empty());
    }
  }
  EXPECT_EQ(idx->SelectForBudget(q, 10, nullptr).status().code(), Status::Code::kInvalidArgument);
}

TEST_F(PassageIndexTest, IndexFileAndFolderArePrivate) {
  auto mode = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  };
  const mode_t old = ::umask(022);
  const fs::path sub = dir_ / "new-folder";
  auto idx = PassageIndex::Open((sub / "conversations.db.passages").string());
  ::umask(old);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  ASSERT_TRUE((*idx)->Add("k", "notes.txt", "the private text of a document").ok());
  EXPECT_EQ(mode(sub), 0700u);
  EXPECT_EQ(mode(sub / "conversations.db.passages"), 0600u);
  ASSERT_TRUE(fs::exists(sub / "conversations.db.passages-wal"));
  EXPECT_EQ(mode(sub / "conversations.db.passages-wal"), 0600u);
  // A foreign file that Open refuses keeps its mode as well as its bytes.
  const fs::path other = dir_ / "foreign.db";
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  fs::permissions(other, fs::perms(0644));
  EXPECT_FALSE(PassageIndex::Open(other.string()).ok());
  EXPECT_EQ(mode(other), 0644u);
}

TEST_F(PassageIndexTest, RefusesAForeignFileAndReportsFts5) {
  // This SQLite must have FTS5 (Open checks it at run time; Debian's libsqlite3 does).
  EXPECT_TRUE(sqlite3_compileoption_used("ENABLE_FTS5"));
  const std::string other = (dir_ / "other.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto before = fs::file_size(other);
  auto r = PassageIndex::Open(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not an IMPRESS passage index"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(other), std::string::npos);
  EXPECT_EQ(fs::file_size(other), before);
  // In memory works too (no file at all).
  auto mem = PassageIndex::Open(":memory:");
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  ASSERT_TRUE((*mem)->Add("k", "n", "in memory zebra").ok());
  EXPECT_EQ((*mem)->Search("zebra", 3)->size(), 1u);
}

// A file of random bytes where the index should be: Open says it is damaged (not that SQLite
// lacks FTS5); OpenOrStartOver keeps it under a new name, logs a warning naming both files, and
// gives a working, empty index. A foreign SQLite file is refused as before, never moved.
TEST_F(PassageIndexTest, DamagedFileIsMovedAsideAndANewIndexStarted) {
  std::mt19937 rng(7);
  std::string garbage(64 * 1024, '\0');
  for (char& c : garbage) c = char(rng());
  std::ofstream(path_, std::ios::binary) << garbage;

  auto plain = PassageIndex::Open(path_);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), Status::Code::kCorruption) << plain.status().ToString();
  EXPECT_EQ(plain.status().message().find("FTS5"), std::string::npos) << plain.status().ToString();

  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  spdlog::default_logger()->sinks().push_back(ring);
  std::string moved_to;
  auto idx = PassageIndex::OpenOrStartOver(path_, {}, &moved_to);
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  ASSERT_FALSE(moved_to.empty());
  EXPECT_NE(moved_to.find("passages.db.unreadable-"), std::string::npos) << moved_to;
  std::ifstream kept(moved_to, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), garbage) << "the damaged file is kept as it was";
  bool logged = false;
  for (const std::string& line : ring->last_formatted())
    logged = logged || (line.find(path_) != std::string::npos && line.find(moved_to) != std::string::npos);
  EXPECT_TRUE(logged) << "no warning naming " << path_ << " and " << moved_to;

  ASSERT_TRUE((*idx)->Add("k", "notes", "the zebra crossed the road").ok());
  EXPECT_EQ((*idx)->Search("zebra", 3)->size(), 1u);
  idx->reset();
  auto again = PassageIndex::OpenOrStartOver(path_, {}, &moved_to);  // healthy now: nothing moved
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(moved_to.empty());
  EXPECT_EQ((*again)->Search("zebra", 3)->size(), 1u);

  const std::string other = (dir_ / "other.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  EXPECT_FALSE(PassageIndex::OpenOrStartOver(other, {}, &moved_to).ok());
  EXPECT_TRUE(moved_to.empty());
  EXPECT_TRUE(fs::exists(other));
}

}  // namespace
}  // namespace impress::persist
