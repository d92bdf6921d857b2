// The multi-document workload's generator (bench/workload.h) and its summary: deterministic for a
// seed, Zipf popularity as specified, follow-ups on the previous document with a new question,
// documents cut at line boundaries within the asked lengths; the summary against sums by hand.
#include "bench/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
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
    r.chunks_ssd = i % 2 ? 0 : 4;  // 50 requests read 4 chunks from the SSD
    r.ssd_bytes = r.chunks_ssd * 1000;
    r.read_amplification = 2;
    r.agrees = i <= 90 ? 1 : 0;
    s.requests.push_back(r);
  }
  SummarizeWorkloadSystem(&s);
  EXPECT_DOUBLE_EQ(s.mean_ttft_ms, 50.5);
  EXPECT_DOUBLE_EQ(s.p50_ttft_ms, 50);
  EXPECT_DOUBLE_EQ(s.p99_ttft_ms, 99);
  const double chunks = 100 * 4 + 50 * 4;
  EXPECT_DOUBLE_EQ(s.hit_device, 300 / chunks);
  EXPECT_DOUBLE_EQ(s.hit_host, 100 / chunks);
  EXPECT_DOUBLE_EQ(s.hit_ssd, 200 / chunks);
  EXPECT_DOUBLE_EQ(s.mean_ssd_bytes, 2000);
  EXPECT_NEAR(s.unhidden_io_share, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.first_token_agreement, 0.9);
}

}  // namespace
}  // namespace impress
