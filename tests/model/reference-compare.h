// Test helper: runs the numpy reference forward pass (tests/reference/reference.py) on token
// sequences and compares logits with ours: largest relative error, top-1 agreement and mean
// KL(reference || ours) over the compared rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/model/python-ref.h"

namespace impress::test {

struct RefSequence {
  std::vector<int32_t> tokens;
  std::vector<int> rows;  // positions whose logits are compared
  int greedy = 0;         // greedy continuation length
};

struct RefResult {
  int n_vocab = 0;
  std::vector<std::vector<float>> logits;  // per sequence: rows x n_vocab
  std::vector<std::vector<int32_t>> greedy;
};

// 0 on success; -1 when there is no reference python; another value when the script failed or
// its output is short.
inline int RunNumpyReference(const std::string& model, const std::vector<RefSequence>& seqs, const std::string& dir,
                             RefResult* out) {
  const std::string py = ReferencePython();
  if (py.empty() || !std::filesystem::exists(py)) return -1;
  nlohmann::json req;
  req["sequences"] = nlohmann::json::array();
  for (const auto& s : seqs) req["sequences"].push_back({{"tokens", s.tokens}, {"rows", s.rows}, {"greedy", s.greedy}});
  const std::string req_path = dir + "/request.json", prefix = dir + "/ref";
  std::ofstream(req_path) << req.dump();
  const std::string cmd = "'" + py + "' '" + SourceDir() + "/tests/reference/reference.py' --model '" + model +
                          "' --request '" + req_path + "' --out '" + prefix + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  const nlohmann::json res = nlohmann::json::parse(std::ifstream(prefix + ".json"));
  out->n_vocab = res["n_vocab"];
  out->greedy = res["greedy"].get<std::vector<std::vector<int32_t>>>();
  std::ifstream bin(prefix + ".bin", std::ios::binary);
  for (const auto& s : seqs) {
    std::vector<float> l(s.rows.size() * size_t(out->n_vocab));
    bin.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * sizeof(float)));
    if (!bin) return 2;
    out->logits.push_back(std::move(l));
  }
  return 0;
}

struct LogitStats {
  int n_rows = 0;
  int n_top1 = 0;      // rows whose argmax agrees
  double kl_sum = 0;   // sum over rows of KL(ref || got)
  double max_rel = 0;  // max over rows of max|got - ref| / max|ref|
  double top1() const { return n_rows ? double(n_top1) / n_rows : 0; }
  double mean_kl() const { return n_rows ? kl_sum / n_rows : 0; }
};

inline void AddLogitRows(const float* got, const float* ref, size_t n_rows, size_t V, LogitStats* st) {
  for (size_t r = 0; r < n_rows; ++r) {
    const float* g = got + r * V;
    const float* w = ref + r * V;
    const double gmax = *std::max_element(g, g + V), wmax = *std::max_element(w, w + V);
    double gz = 0, wz = 0, max_diff = 0, max_logit = 0;
    for (size_t j = 0; j < V; ++j) {
      gz += std::exp(double(g[j]) - gmax);
      wz += std::exp(double(w[j]) - wmax);
      max_diff = std::max(max_diff, std::abs(double(g[j]) - w[j]));
      max_logit = std::max(max_logit, std::abs(double(w[j])));
    }
    double kl = 0;
    for (size_t j = 0; j < V; ++j) {
      const double lp = double(w[j]) - wmax - std::log(wz), lq = double(g[j]) - gmax - std::log(gz);
      kl += std::exp(lp) * (lp - lq);
    }
    st->kl_sum += kl;
    st->max_rel = std::max(st->max_rel, max_diff / std::max(max_logit, 1e-30));
    st->n_top1 += (std::max_element(g, g + V) - g) == (std::max_element(w, w + V) - w);
    ++st->n_rows;
  }
}

}  // namespace impress::test
