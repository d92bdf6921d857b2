// Sampler: picks the next token from a row of logits (greedy, temperature, top-k, top-p, min-p,
// repetition penalty), deterministic for a given seed. RepetitionGuard: notices a generation
// that has fallen into a loop. ChatSamplerDefaults: the settings a chat starts from.
//
// Thread contract: a Sampler or RepetitionGuard holds its own state; one thread at a time.
// ChatSamplerDefaults is a pure function.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace impress {

// The defaults are greedy (what tests and benchmarks rely on); chats start from
// ChatSamplerDefaults(). Filters apply in this order: repetition penalty, top-k, softmax at the
// temperature, min-p, top-p.
struct SamplerOptions {
  float temperature = 0.0f;     // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;                // keep the k most likely; 0 = all
  float top_p = 1.0f;           // keep the smallest set whose probability reaches p; 1 = all
  float repeat_penalty = 1.0f;  // llama.cpp style: logit / p if > 0 else logit * p; 1 = off
  int repeat_last_n = 64;       // how many recent tokens the penalty looks at
  uint64_t seed = 0;
  float min_p = 0.0f;  // drop tokens less likely than min_p x the most likely one; 0 = off
};

// Sampling for a chat answer: a modest temperature with top-p and min-p (greedy decoding of small
// models falls into loops; these are the values chat front-ends start from).
SamplerOptions ChatSamplerDefaults();

// Stops a degenerate loop: true once the last tokens are one block of `period` tokens repeated
// over and over (period 1..max_period), spanning at least min_tokens tokens and min_repeats
// periods. A list or code, whose lines differ somewhere, never keeps the run going.
struct RepetitionGuardOptions {
  bool enabled = true;
  int max_period = 64;  // longest repeated block looked for, in tokens
  int min_repeats = 4;  // the block occurs at least this often in a row
  int min_tokens = 48;  // and the repetition covers at least this many tokens
};

class RepetitionGuard {
 public:
  explicit RepetitionGuard(const RepetitionGuardOptions& options = {});
  // Adds a generated token; true when the generation is looping (and stays true).
  bool Push(int32_t token);
  // The period of the loop found (0 before one is).
  int period() const { return period_; }

 private:
  RepetitionGuardOptions opt_;
  std::vector<int32_t> recent_;  // the last max_period tokens, a ring
  std::vector<int> run_;         // run_[p]: tokens in a row equal to the one p before
  size_t n_ = 0;                 // tokens pushed
  int period_ = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // history: the tokens so far (prompt and generated), for the repetition penalty.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> idx_;
};

}  // namespace impress
