// The multi-document workload of `impress bench workload`: documents cut from plain texts, and a
// request sequence over them with Zipf-distributed popularity and follow-up questions (the
// shape of the IMPRESS paper's evaluation: many documents whose KV does not fit the fast tiers,
// a few of them asked about most of the time).
//
// Everything here is a pure function of its inputs and the seed: the same texts, token counts
// and seed give the same documents and the same requests on every machine. Thread-safe (no
// shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace impress {

struct WorkloadSpec {
  int n_docs = 24;
  int min_doc_tokens = 2000;  // each document's length is drawn uniformly in [min, max]
  int max_doc_tokens = 8000;
  int n_requests = 120;
  double zipf_s = 1.0;     // popularity of the document ranked i is proportional to 1 / i^s
  double follow_up = 0.3;  // probability that a request asks again about the previous document
  uint64_t seed = 1;
};

struct SourceText {
  std::string name;  // where it came from (a file name)
  std::string text;
};

struct WorkloadDocument {
  std::string name;  // "<source> part N"
  std::string text;
  int target_tokens = 0;  // the length it was cut for (the tokenizer decides the exact count)
};

// Cuts documents from `sources`, in order, each starting and ending at a line boundary, with
// lengths drawn from the spec. `count_tokens` measures a text (the model's tokenizer); a source
// too short for the next document starts the next source. Returns fewer than n_docs documents
// only when the texts run out (the caller says so); InvalidArgument for an unusable spec.
Result<std::vector<WorkloadDocument>> CutDocuments(const std::vector<SourceText>& sources, const WorkloadSpec& spec,
                                                   const std::function<int(const std::string&)>& count_tokens);

struct WorkloadRequest {
  int doc = 0;       // index into the documents
  int question = 0;  // index into the questions
  bool follow_up = false;
};

// The request sequence: a first request on a Zipf-drawn document, then each request either a
// follow-up (same document as the previous request, another question) with probability
// spec.follow_up, or a new Zipf draw. Documents are ranked by a seeded permutation, so the most
// popular one is not always the first cut.
std::vector<WorkloadRequest> MakeRequests(const WorkloadSpec& spec, int n_docs, int n_questions);

// The Zipf probabilities of ranks 1..n (sum 1), for tests and reports.
std::vector<double> ZipfProbabilities(int n, double s);

// A natural-language fact the bench hides in a document, the question that asks for it and the
// answer expected in the model's output (alternatives: any of them counts).
struct WorkloadFact {
  std::string statement;  // "The annual review meeting is on March 14 in Room 508."
  std::string question;
  std::vector<std::string> answers;
};

// Parses "statement | question | answer[;answer...]" lines ('#' starts a comment line, blank
// lines are skipped). InvalidArgument naming the line for one without three non-empty fields.
Result<std::vector<WorkloadFact>> ParseFacts(std::string_view text);

// Where a fact went: document `doc`, byte `offset` of its text (the statement starts there, as a
// line of its own), asked to sit at `depth` (0 = start, 1 = end) of the document.
struct PlacedFact {
  int fact = 0;
  int doc = 0;
  double depth = 0;
  size_t offset = 0;
};

// Inserts fact i into document (i * 7) % n_docs (spread over the documents, several per document
// when there are more facts than documents) at depth depths[i % depths.size()]: at the start of
// the first line that begins at or after that share of the document's bytes (the end when none
// does). Offsets are final: a later insertion in the same document shifts the earlier ones it
// precedes. Returns one PlacedFact per fact, in fact order; empty when docs, facts or depths are.
std::vector<PlacedFact> PlaceFacts(std::vector<WorkloadDocument>* docs, const std::vector<WorkloadFact>& facts,
                                   std::span<const double> depths);

// True when `output` contains one of `answers`, both compared lower-case with every run of
// characters other than letters and digits read as one space (so "Room  508." matches "room
// 508"). A match starts at a word's start; an answer ending in a digit must not run on into more
// digits ("11" is not in "110", "14" is in "14th").
bool AnswerMatches(std::string_view output, const std::vector<std::string>& answers);

// The greedy-continuation match: how many leading tokens of `a` and `b` are equal (tokens before
// the first divergence), at most min(a.size(), b.size()).
int ContinuationMatch(std::span<const int32_t> a, std::span<const int32_t> b);

// Where `statement` lies in a text given as the pieces its tokens decode to (byte-level tokens
// decode piece by piece): [begin, end) of the pieces that spell it, including those it starts or
// ends inside; its first occurrence. {0, 0} when it is not there or empty.
std::pair<int, int> PiecesSpelling(std::span<const std::string> pieces, std::string_view statement);

}  // namespace impress
