// The multi-document workload's generator (bench/workload.h) and its summary: deterministic for a
// seed, Zipf popularity as specified, follow-ups on the previous document with a new question,
// documents cut at line boundaries within the asked lengths; the summary against sums by hand;
// facts parsed, hidden where they say, answers and continuations scored right on known outputs.
#include "bench/workload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "bench/workload-bench.h"

namespace impress {
namespace {

// A stand-in tokenizer: one token per space-separated word.
int Words(const std::string& t) {
  int n = 0;
  bool in = false;
  for (char c : t) {
    const bool sp = c == ' ' || c == '\n';
    n += !sp && !in;
    in = !sp;
  }
  return n;
}

std::string Text(int lines, int words_per_line, const std::string& tag) {
  std::string t;
  for (int l = 0; l < lines; ++l) {
    for (int w = 0; w < words_per_line; ++w) t += tag + std::to_string(l) + "w" + std::to_string(w) + " ";
    t += "\n";
  }
  return t;
}

TEST(Workload, RequestsAreDeterministicForASeed) {
  WorkloadSpec s;
  s.n_requests = 500;
  const auto a = MakeRequests(s, 24, 20), b = MakeRequests(s, 24, 20);
  ASSERT_EQ(a.size(), 500u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].doc, b[i].doc);
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].follow_up, b[i].follow_up);
  }
  s.seed = 2;
  const auto c = MakeRequests(s, 24, 20);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].doc == c[i].doc;
  EXPECT_LT(same, 400) << "another seed should give another sequence";
}

TEST(Workload, ZipfProbabilitiesAreNormalisedAndFallWithRank) {
  const auto p = ZipfProbabilities(24, 1.0);
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sum += p[i];
    if (i > 0) {
      EXPECT_LT(p[i], p[i - 1]);
    }
    EXPECT_NEAR(p[i] / p[0], 1.0 / double(i + 1), 1e-12);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  const auto flat = ZipfProbabilities(5, 0.0);
  for (double x : flat) EXPECT_NEAR(x, 0.2, 1e-12);
}

TEST(Workload, DocumentPopularityFollowsZipf) {
  WorkloadSpec s;
  s.n_requests = 40000;
  s.follow_up = 0;  // every request a fresh draw
  const int n_docs = 10;
  const auto reqs = MakeRequests(s, n_docs, 7);
  std::map<int, int> count;
  for (const auto& r : reqs) {
    ASSERT_GE(r.doc, 0);
    ASSERT_LT(r.doc, n_docs);
    EXPECT_FALSE(r.follow_up);
    ++count[r.doc];
  }
  // The counts, sorted, must match the Zipf probabilities by rank within 5 standard deviations.
  std::vector<int> sorted;
  for (auto& [d, c] : count) sorted.push_back(c);
  std::sort(sorted.rbegin(), sorted.rend());
  const auto p = ZipfProbabilities(n_docs, s.zipf_s);
  ASSERT_EQ(sorted.size(), size_t(n_docs));
  for (int i = 0; i < n_docs; ++i) {
    const double expect = p[size_t(i)] * s.n_requests;
    const double sd = std::sqrt(s.n_requests * p[size_t(i)] * (1 - p[size_t(i)]));
    EXPECT_NEAR(sorted[size_t(i)], expect, 5 * sd) << "rank " << i + 1;
  }
}

TEST(Workload, FollowUpsAskAgainAboutThePreviousDocument) {
  WorkloadSpec s;
  s.n_requests = 5000;
  s.follow_up = 0.4;
  const auto reqs = MakeRequests(s, 24, 20);
  int follow = 0;
  std::map<int, std::set<int>> asked;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].follow_up) {
      ++follow;
      ASSERT_GT(i, 0u);
      EXPECT_EQ(reqs[i].doc, reqs[i - 1].doc);
      EXPECT_NE(reqs[i].question, reqs[i - 1].question);
    }
    EXPECT_GE(reqs[i].question, 0);
    EXPECT_LT(reqs[i].question, 20);
  }
  EXPECT_FALSE(reqs[0].follow_up);
  const double sd = std::sqrt(5000 * 0.4 * 0.6);
  EXPECT_NEAR(follow, 2000, 5 * sd);
}

TEST(Workload, DocumentsAreCutAtLineBoundariesWithinTheAskedLengths) {
  WorkloadSpec s;
  s.n_docs = 6;
  s.min_doc_tokens = 100;
  s.max_doc_tokens = 300;
  const std::vector<SourceText> src = {{"a", Text(200, 10, "a")}, {"b", Text(100, 10, "b")}};
  auto docs = CutDocuments(src, s, Words);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  ASSERT_EQ(docs->size(), 6u);
  // Concatenated in order, the pieces of a source are its beginning.
  std::string a_joined;
  for (const auto& d : *docs) {
    EXPECT_EQ(d.text.back(), '\n') << d.name;
    EXPECT_GE(d.target_tokens, s.min_doc_tokens);
    EXPECT_LE(d.target_tokens, s.max_doc_tokens);
    // Lines of 10 words: the cut is within 2% of the target, give or take the line it snaps to.
    EXPECT_GE(Words(d.text), d.target_tokens * 0.98 - 10) << d.name;
    EXPECT_LE(Words(d.text), d.target_tokens * 1.02 + 10) << d.name;
    if (d.name.rfind("a part", 0) == 0) a_joined += d.text;
  }
  EXPECT_EQ(src[0].text.compare(0, a_joined.size(), a_joined), 0);
  // Deterministic.
  auto again = CutDocuments(src, s, Words);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < docs->size(); ++i) EXPECT_EQ((*docs)[i].text, (*again)[i].text);
}

TEST(Workload, TooLittleTextGivesFewerDocumentsAndABadSpecIsRefused) {
  WorkloadSpec s;
  s.n_docs = 50;
  s.min_doc_tokens = 100;
  s.max_doc_tokens = 100;
  auto docs = CutDocuments({{"small", Text(35, 10, "s")}}, s, Words);
  ASSERT_TRUE(docs.ok());
  EXPECT_EQ(docs->size(), 3u);  // 350 words: three of 100, the short rest dropped
  s.max_doc_tokens = 50;        // max < min
  EXPECT_FALSE(CutDocuments({{"small", Text(35, 10, "s")}}, s, Words).ok());
}

TEST(Workload, SummaryMatchesSumsByHand) {
  WorkloadSystemResult s;
  for (int i = 1; i <= 100; ++i) {
    WorkloadRequestResult r;
    r.ttft_ms = i;  // 1..100 ms
    r.io_wait_ms = i * 0.1;
    r.chunks_device = 3;
    r.chunks_host = 1;
    r.chunks_ssd = i % 2 ? 0 : 4;     // 50 requests read 4 chunks from the SSD
    r.chunks_team = i <= 10 ? 2 : 0;  // 10 requests read 2 spans from the team tier
    r.team_bytes = r.chunks_team * 500;
    r.ssd_bytes = r.chunks_ssd * 1000;
    r.ssd_reads = r.chunks_ssd * 3;         // 12 where 4 chunks came from the SSD
    r.probe_key_bytes = i <= 25 ? 400 : 0;  // a quarter of the requests probed
    r.read_amplification = 2;
    r.agrees = i <= 90 ? 1 : 0;
    s.requests.push_back(r);
  }
  SummarizeWorkloadSystem(&s);
  EXPECT_DOUBLE_EQ(s.mean_ttft_ms, 50.5);
  EXPECT_DOUBLE_EQ(s.p50_ttft_ms, 50);
  EXPECT_DOUBLE_EQ(s.p99_ttft_ms, 99);
  const double chunks = 100 * 4 + 50 * 4 + 10 * 2;
  EXPECT_DOUBLE_EQ(s.hit_device, 300 / chunks);
  EXPECT_DOUBLE_EQ(s.hit_host, 100 / chunks);
  EXPECT_DOUBLE_EQ(s.hit_ssd, 200 / chunks);
  EXPECT_DOUBLE_EQ(s.hit_team, 20 / chunks);
  EXPECT_DOUBLE_EQ(s.mean_team_bytes, 100);
  EXPECT_DOUBLE_EQ(s.mean_ssd_bytes, 2000);
  EXPECT_DOUBLE_EQ(s.mean_ssd_reads, 6);
  EXPECT_DOUBLE_EQ(s.mean_probe_key_bytes, 100);
  EXPECT_NEAR(s.unhidden_io_share, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.first_token_agreement, 0.9);
}

TEST(Workload, SummaryScoresFactsAndContinuations) {
  WorkloadSystemResult s;
  for (int i = 0; i < 4; ++i) {
    WorkloadFactResult f;
    f.correct = i < 3;                           // 3 of 4 right
    f.continuation_match = i == 3 ? -1 : 8 * i;  // 0, 8, 16 of 32; the last not compared
    s.facts.push_back(f);
  }
  SummarizeWorkloadSystem(&s, 32);
  EXPECT_DOUBLE_EQ(s.fact_accuracy, 0.75);
  EXPECT_DOUBLE_EQ(s.continuation_match, (0 + 0.25 + 0.5) / 3);
  WorkloadSystemResult none;
  SummarizeWorkloadSystem(&none, 32);
  EXPECT_EQ(none.fact_accuracy, -1);
  EXPECT_EQ(none.continuation_match, -1);
}

TEST(Workload, SummaryAveragesFactSpansPerLayer) {
  WorkloadSystemResult s;
  WorkloadFactResult a, b, missing;
  a.span_kept = {1.0f, 0.5f, 1.0f};
  b.span_kept = {1.0f, 1.0f, 1.0f};  // whole in every layer
  s.facts = {a, b, missing};         // a statement not found counts nowhere
  SummarizeWorkloadSystem(&s, 32);
  ASSERT_EQ(s.span_kept_by_layer.size(), 3u);
  EXPECT_DOUBLE_EQ(s.span_kept_by_layer[0], 1.0);
  EXPECT_DOUBLE_EQ(s.span_kept_by_layer[1], 0.75);
  EXPECT_DOUBLE_EQ(s.span_kept_mean, (1.0 + 0.75 + 1.0) / 3);
  EXPECT_DOUBLE_EQ(s.span_whole_share, 0.5);
  WorkloadSystemResult none;
  none.facts = {missing};
  SummarizeWorkloadSystem(&none, 32);
  EXPECT_TRUE(none.span_kept_by_layer.empty());
  EXPECT_EQ(none.span_kept_mean, -1);
}

TEST(Workload, ContinuationMatchCountsTokensBeforeTheFirstDivergence) {
  const std::vector<int32_t> a = {5, 6, 7, 8, 9};
  EXPECT_EQ(ContinuationMatch(a, a), 5);
  EXPECT_EQ(ContinuationMatch(a, std::vector<int32_t>{5, 6, 0, 8, 9}), 2);  // equal again after: not counted
  EXPECT_EQ(ContinuationMatch(a, std::vector<int32_t>{1, 6, 7, 8, 9}), 0);
  EXPECT_EQ(ContinuationMatch(a, std::vector<int32_t>{5, 6, 7}), 3);  // the shorter one ends the count
  EXPECT_EQ(ContinuationMatch({}, a), 0);
}

TEST(Workload, PiecesSpellingCoversExactlyTheStatementsPieces) {
  const std::vector<std::string> pieces = {"Notes",  ".\n", "The", " meeting", " is", " on",
                                           " March", " 1",  "4",   ".\n",      "End"};
  EXPECT_EQ(PiecesSpelling(pieces, "The meeting is on March 14."), std::make_pair(2, 10));
  EXPECT_EQ(PiecesSpelling(pieces, "meeting is on March 14"), std::make_pair(3, 9));
  // Starting and ending inside pieces takes those pieces whole.
  EXPECT_EQ(PiecesSpelling(pieces, "eting is on March 1"), std::make_pair(3, 8));
  EXPECT_EQ(PiecesSpelling(pieces, "Notes"), std::make_pair(0, 1));
  EXPECT_EQ(PiecesSpelling(pieces, "End"), std::make_pair(10, 11));
  // The first occurrence; absent or empty statements give {0, 0}.
  const std::vector<std::string> twice = {"ab", "c", "ab", "c"};
  EXPECT_EQ(PiecesSpelling(twice, "abc"), std::make_pair(0, 2));
  EXPECT_EQ(PiecesSpelling(twice, "ca"), std::make_pair(1, 3));
  EXPECT_EQ(PiecesSpelling(pieces, "March 15"), std::make_pair(0, 0));
  EXPECT_EQ(PiecesSpelling(pieces, ""), std::make_pair(0, 0));
  EXPECT_EQ(PiecesSpelling({}, "x"), std::make_pair(0, 0));
  // Against a naive search: for every substring of the joined text, the pieces returned spell a
  // text that contains it, and dropping the first or last piece loses it.
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  for (size_t b = 0; b < joined.size(); ++b)
    for (size_t e = b + 1; e <= joined.size(); ++e) {
      const std::string s = joined.substr(b, e - b);
      const auto [first, last] = PiecesSpelling(pieces, s);
      ASSERT_LT(first, last) << s;
      auto spelled = [&](int f, int l) {
        std::string t;
        for (int k = f; k < l; ++k) t += pieces[size_t(k)];
        return t;
      };
      EXPECT_NE(spelled(first, last).find(s), std::string::npos) << s;
      EXPECT_EQ(spelled(first + 1, last).find(s), std::string::npos) << s;
      EXPECT_EQ(spelled(first, last - 1).find(s), std::string::npos) << s;
    }
}

TEST(Workload, FactsParseAndBadLinesAreNamed) {
  auto f = ParseFacts(
      "# comment\n\nThe cat is Tom. | What is the cat called? | Tom\n"
      "  Room 5 is blue.|Which room is blue?| 5 ; five \n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 2u);
  EXPECT_EQ((*f)[0].statement, "The cat is Tom.");
  EXPECT_EQ((*f)[0].question, "What is the cat called?");
  EXPECT_EQ((*f)[1].answers, (std::vector<std::string>{"5", "five"}));
  auto bad = ParseFacts("a | b | c\nonly two | fields\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("line 2"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(ParseFacts("a | | c\n").ok());
  EXPECT_FALSE(ParseFacts("a | b | ;\n").ok());
}

TEST(Workload, ShippedFactsParseAndEachAnswerIsInItsStatement) {
  std::ifstream in(std::string(IMPRESS_SOURCE_DIR) + "/assets/eval/workload-facts.txt");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  auto facts = ParseFacts(text.str());
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_GE(facts->size(), 20u);
  // The statement itself, as an output, answers its question (the checker finds the first
  // alternative in it); another fact's statement does not.
  for (size_t i = 0; i < facts->size(); ++i) {
    const WorkloadFact& f = (*facts)[i];
    EXPECT_TRUE(AnswerMatches(f.statement, {f.answers[0]})) << f.statement;
    EXPECT_FALSE(AnswerMatches((*facts)[(i + 1) % facts->size()].statement, f.answers)) << f.statement;
  }
}

TEST(Workload, AnswerCheckerScoresKnownOutputs) {
  const std::vector<std::string> date = {"March 14"};
  EXPECT_TRUE(AnswerMatches("The meeting is on March 14 in Room 508.", date));
  EXPECT_TRUE(AnswerMatches("It is held on march  14th.", date));  // case, spacing, suffix
  EXPECT_TRUE(AnswerMatches("**March-14**", date));                // punctuation reads as a space
  EXPECT_FALSE(AnswerMatches("The meeting is on March 4.", date));
  EXPECT_FALSE(AnswerMatches("It is in March, on the 14th.", date));
  const std::vector<std::string> eleven = {"eleven", "11"};
  EXPECT_TRUE(AnswerMatches("The committee has 11 members.", eleven));
  EXPECT_TRUE(AnswerMatches("Eleven.", eleven));
  EXPECT_FALSE(AnswerMatches("The committee has 110 members.", eleven));  // a number ends where it ends
  EXPECT_FALSE(AnswerMatches("It has 211 members.", eleven));             // and starts at a word's start
  EXPECT_FALSE(AnswerMatches("", eleven));
  EXPECT_FALSE(AnswerMatches("anything", {""}));
}

TEST(Workload, FactsAreInsertedAsLinesAtTheirDepths) {
  std::vector<WorkloadDocument> docs;
  for (int d = 0; d < 3; ++d) docs.push_back({fmt::format("d{}", d), Text(100, 8, fmt::format("d{}", d)), 800});
  const std::vector<std::string> before = {docs[0].text, docs[1].text, docs[2].text};
  std::vector<WorkloadFact> facts;
  for (int i = 0; i < 7; ++i) facts.push_back({fmt::format("FACT {} is here.", i), "q", {"x"}});
  const std::vector<double> depths = {0.1, 0.5, 0.9};
  const auto placed = PlaceFacts(&docs, facts, depths);
  ASSERT_EQ(placed.size(), 7u);
  std::map<int, int> per_doc;
  for (size_t i = 0; i < placed.size(); ++i) {
    const PlacedFact& p = placed[i];
    EXPECT_EQ(p.fact, int(i));
    EXPECT_EQ(p.doc, int(i * 7 % 3));
    EXPECT_DOUBLE_EQ(p.depth, depths[i % 3]);
    ++per_doc[p.doc];
    const std::string& t = docs[size_t(p.doc)].text;
    // The statement is a line of its own at the offset reported.
    ASSERT_LE(p.offset + facts[i].statement.size() + 1, t.size());
    EXPECT_EQ(t.substr(p.offset, facts[i].statement.size() + 1), facts[i].statement + "\n");
    EXPECT_TRUE(p.offset == 0 || t[p.offset - 1] == '\n');
    // At its depth of the document, within a line or two of the others (a line is ~90 bytes,
    // each fact line ~20; three facts share a document).
    EXPECT_NEAR(double(p.offset) / double(t.size()), p.depth, 0.05) << "fact " << i;
  }
  EXPECT_EQ(per_doc.size(), 3u);
  // Nothing else changed: removing the fact lines gives the text back.
  for (int d = 0; d < 3; ++d) {
    std::string t = docs[size_t(d)].text;
    for (const WorkloadFact& f : facts)
      if (size_t at = t.find(f.statement + "\n"); at != std::string::npos) t.erase(at, f.statement.size() + 1);
    EXPECT_EQ(t, before[size_t(d)]) << "doc " << d;
  }
  // Deterministic, and nothing to place is nothing placed.
  std::vector<WorkloadDocument> again;
  for (int d = 0; d < 3; ++d) again.push_back({"d", before[size_t(d)], 800});
  const auto placed2 = PlaceFacts(&again, facts, depths);
  for (size_t i = 0; i < placed.size(); ++i) EXPECT_EQ(placed2[i].offset, placed[i].offset);
  EXPECT_TRUE(PlaceFacts(&again, {}, depths).empty());
  EXPECT_TRUE(PlaceFacts(&again, facts, {}).empty());
}

TEST(Workload, AFactAtTheEndOfATextWithoutANewlineGetsALineOfItsOwn) {
  std::vector<WorkloadDocument> docs = {{"d", "one line without end", 4}};
  const std::vector<double> end = {1.0};
  const auto placed = PlaceFacts(&docs, {{"Fact.", "q", {"a"}}}, end);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(docs[0].text, "one line without end\nFact.\n");
  EXPECT_EQ(placed[0].offset, 21u);
}

}  // namespace
}  // namespace impress
