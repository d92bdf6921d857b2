#include "bench/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

namespace impress {

namespace {

// A portable uniform integer in [lo, hi] (std::uniform_int_distribution differs between
// standard libraries; the workload must not).
int UniformInt(std::mt19937_64& rng, int lo, int hi) { return lo + int(rng() % uint64_t(hi - lo + 1)); }

double Uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * (1.0 / 9007199254740992.0); }

// The end of the line that holds byte `at` (one past its '\n'), or the text's end.
size_t LineEnd(const std::string& t, size_t at) {
  if (at >= t.size()) return t.size();
  const size_t nl = t.find('\n', at);
  return nl == std::string::npos ? t.size() : nl + 1;
}

}  // namespace

std::vector<double> ZipfProbabilities(int n, double s) {
  std::vector<double> p(size_t(std::max(n, 0)));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += p[size_t(i)] = 1.0 / std::pow(double(i + 1), s);
  for (double& x : p) x /= sum;
  return p;
}

Result<std::vector<WorkloadDocument>> CutDocuments(const std::vector<SourceText>& sources, const WorkloadSpec& spec,
                                                   const std::function<int(const std::string&)>& count_tokens) {
  if (spec.n_docs < 1 || spec.min_doc_tokens < 16 || spec.max_doc_tokens < spec.min_doc_tokens)
    return Status::InvalidArgument(
        fmt::format("workload: need n_docs >= 1 and 16 <= min_doc_tokens <= "
                    "max_doc_tokens (got {}, {}, {})",
                    spec.n_docs, spec.min_doc_tokens, spec.max_doc_tokens));
  std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ull + 17);
  std::vector<WorkloadDocument> docs;
  for (const SourceText& src : sources) {
    if (int(docs.size()) >= spec.n_docs) break;
    const std::string& t = src.text;
    if (t.empty()) continue;
    // Bytes per token of this text, measured once on the whole of it.
    const double bytes_per_token = double(t.size()) / std::max(1, count_tokens(t));
    size_t begin = 0;
    for (int part = 1; int(docs.size()) < spec.n_docs; ++part) {
      const int want = UniformInt(rng, spec.min_doc_tokens, spec.max_doc_tokens);
      size_t end = LineEnd(t, begin + size_t(want * bytes_per_token));
      // The average misjudges a part whose words differ from the whole: correct the cut in
      // proportion to the measured count, a few times (each snapped to a line end).
      for (int round = 0; round < 4 && end > begin; ++round) {
        const int have = count_tokens(t.substr(begin, end - begin));
        if (have <= 0 || std::abs(have - want) * 50 <= want) break;  // within 2%
        end = LineEnd(t, begin + size_t(double(end - begin) * want / have));
      }
      if (end <= begin) break;
      std::string piece = t.substr(begin, end - begin);
      // The last piece of a source may fall short: keep it only if it is long enough.
      if (end == t.size() && count_tokens(piece) < spec.min_doc_tokens) break;
      docs.push_back({fmt::format("{} part {}", src.name, part), std::move(piece), want});
      begin = end;
      if (begin >= t.size()) break;
    }
  }
  return docs;
}

std::vector<WorkloadRequest> MakeRequests(const WorkloadSpec& spec, int n_docs, int n_questions) {
  std::vector<WorkloadRequest> out;
  if (n_docs <= 0 || n_questions <= 0) return out;
  std::mt19937_64 rng(spec.seed * 0xD1B54A32D192ED03ull + 1);
  // Rank -> document: a seeded Fisher-Yates shuffle with the portable draw.
  std::vector<int> by_rank(static_cast<size_t>(n_docs));
  std::iota(by_rank.begin(), by_rank.end(), 0);
  for (int i = n_docs - 1; i > 0; --i) std::swap(by_rank[size_t(i)], by_rank[size_t(UniformInt(rng, 0, i))]);
  const std::vector<double> p = ZipfProbabilities(n_docs, spec.zipf_s);
  std::vector<double> cdf(p.size());
  std::partial_sum(p.begin(), p.end(), cdf.begin());
  auto draw_doc = [&] {
    const double u = Uniform01(rng);
    const size_t rank = size_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    return by_rank[std::min(rank, p.size() - 1)];
  };
  std::vector<int> asked(size_t(n_docs), 0);  // questions asked per document so far
  for (int r = 0; r < spec.n_requests; ++r) {
    WorkloadRequest q;
    q.follow_up = r > 0 && Uniform01(rng) < spec.follow_up;
    q.doc = q.follow_up ? out.back().doc : draw_doc();
    // Each document walks through the questions from its own seeded start, so a follow-up asks
    // something new and two documents do not ask the same thing in lockstep.
    q.question = int((uint64_t(q.doc) * 7919 + spec.seed + uint64_t(asked[size_t(q.doc)]++)) % uint64_t(n_questions));
    out.push_back(q);
  }
  return out;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t next = s.find(sep, at);
    out.push_back(Trim(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at)));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

// Lower-case letters and digits, every other run of bytes one space, and one space at either end
// (so a search for " word" finds it at a word's start).
std::string Normalize(std::string_view s) {
  std::string out(1, ' ');
  bool gap = false;
  for (unsigned char c : s) {
    if (std::isalnum(c)) {
      if (gap && out.size() > 1) out += ' ';
      out += char(std::tolower(c));
      gap = false;
    } else {
      gap = true;
    }
  }
  out += ' ';
  return out;
}

}  // namespace

Result<std::vector<WorkloadFact>> ParseFacts(std::string_view text) {
  std::vector<WorkloadFact> out;
  int line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string_view> f = Split(line, '|');
    if (f.size() != 3 || f[0].empty() || f[1].empty() || f[2].empty())
      return Status::InvalidArgument(
          fmt::format("facts line {}: expected \"statement | question | answer\", got \"{}\"", line_no, line));
    WorkloadFact fact{std::string(f[0]), std::string(f[1]), {}};
    for (std::string_view a : Split(f[2], ';'))
      if (!a.empty()) fact.answers.emplace_back(a);
    if (fact.answers.empty()) return Status::InvalidArgument(fmt::format("facts line {}: no answer", line_no));
    out.push_back(std::move(fact));
  }
  return out;
}

std::vector<PlacedFact> PlaceFacts(std::vector<WorkloadDocument>* docs, const std::vector<WorkloadFact>& facts,
                                   std::span<const double> depths) {
  std::vector<PlacedFact> out;
  if (docs->empty() || facts.empty() || depths.empty()) return out;
  const int n_docs = int(docs->size());
  for (int i = 0; i < int(facts.size()); ++i) {
    PlacedFact p;
    p.fact = i;
    p.doc = int((int64_t(i) * 7) % n_docs);
    p.depth = std::clamp(depths[size_t(i) % depths.size()], 0.0, 1.0);
    std::string& t = (*docs)[size_t(p.doc)].text;
    const size_t target = size_t(p.depth * double(t.size()));
    // The start of the first line beginning at or after `target`.
    size_t at = target == 0 ? 0 : LineEnd(t, target - 1);
    if (at > 0 && t[at - 1] != '\n') {  // the text's end without a final newline
      t += '\n';
      at = t.size();
    }
    const std::string line = facts[size_t(i)].statement + "\n";
    t.insert(at, line);
    for (PlacedFact& q : out)
      if (q.doc == p.doc && q.offset >= at) q.offset += line.size();
    p.offset = at;
    out.push_back(p);
  }
  return out;
}

bool AnswerMatches(std::string_view output, const std::vector<std::string>& answers) {
  const std::string o = Normalize(output);
  for (const std::string& a : answers) {
    std::string n = Normalize(a);
    n.pop_back();  // " answer": from a word's start, to anywhere
    if (n.size() <= 1) continue;
    // From a word's start; a number must end there too ("11" is not in "110", "14" is in "14th").
    for (size_t at = o.find(n); at != std::string::npos; at = o.find(n, at + 1)) {
      const bool digit_end = std::isdigit(static_cast<unsigned char>(n.back()));
      if (!digit_end || !std::isdigit(static_cast<unsigned char>(o[at + n.size()]))) return true;
    }
  }
  return false;
}

std::pair<int, int> PiecesSpelling(std::span<const std::string> pieces, std::string_view statement) {
  if (statement.empty()) return {0, 0};
  std::string text;
  std::vector<size_t> starts;
  starts.reserve(pieces.size());
  for (const std::string& p : pieces) {
    starts.push_back(text.size());
    text += p;
  }
  const size_t at = text.find(statement);
  if (at == std::string::npos) return {0, 0};
  // The last piece starting at or before `at`, and the first starting at or after the end.
  const auto first = std::upper_bound(starts.begin(), starts.end(), at) - starts.begin() - 1;
  const auto last = std::lower_bound(starts.begin(), starts.end(), at + statement.size()) - starts.begin();
  return {int(first), int(last)};
}

int ContinuationMatch(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return int(i);
}

}  // namespace impress
