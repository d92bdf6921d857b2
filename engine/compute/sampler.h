// Sampler: picks the next token from a row of logits (greedy, temperature, top-k, top-p,
// repetition penalty), deterministic for a given seed.
//
// Thread contract: a Sampler holds its random state; one thread at a time.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace impress {

struct SamplerOptions {
  float temperature = 0.0f;     // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;                // keep the k most likely; 0 = all
  float top_p = 1.0f;           // keep the smallest set whose probability reaches p; 1 = all
  float repeat_penalty = 1.0f;  // llama.cpp style: logit / p if > 0 else logit * p; 1 = off
  int repeat_last_n = 64;       // how many recent tokens the penalty looks at
  uint64_t seed = 0;
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
