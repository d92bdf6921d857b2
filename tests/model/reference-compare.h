// Test helper: runs the numpy reference forward pass (tests/reference/reference.py) on token
// sequences (optionally cached per machine) and compares logits with ours: largest relative
// error, top-1 agreement and mean KL(reference || ours) over the compared rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/model/python-ref.h"
#include "tests/support/default-model.h"

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

// Reads the logits and greedy continuations reference.py wrote to PREFIX.json / PREFIX.bin for
// seqs; false when they are missing or short.
inline bool ReadNumpyReference(const std::string& prefix, const std::vector<RefSequence>& seqs, RefResult* out) {
  std::ifstream js(prefix + ".json");
  if (!js) return false;
  const nlohmann::json res = nlohmann::json::parse(js, nullptr, false);
  if (res.is_discarded() || !res.contains("n_vocab") || !res.contains("greedy")) return false;
  out->n_vocab = res["n_vocab"];
  out->greedy = res["greedy"].get<std::vector<std::vector<int32_t>>>();
  out->logits.clear();
  std::ifstream bin(prefix + ".bin", std::ios::binary);
  for (const auto& s : seqs) {
    std::vector<float> l(s.rows.size() * size_t(out->n_vocab));
    bin.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * sizeof(float)));
    if (!bin) return false;
    out->logits.push_back(std::move(l));
  }
  return out->greedy.size() == seqs.size();
}

// Runs reference.py on seqs, writing its output to PREFIX.json / PREFIX.bin. 0 on success; -1
// when there is no reference python; another value when the script failed or its output is short.
inline int RunNumpyReferenceTo(const std::string& model, const std::vector<RefSequence>& seqs,
                               const std::string& prefix, RefResult* out) {
  const std::string py = ReferencePython();
  if (py.empty() || !std::filesystem::exists(py)) return -1;
  nlohmann::json req;
  req["sequences"] = nlohmann::json::array();
  for (const auto& s : seqs) req["sequences"].push_back({{"tokens", s.tokens}, {"rows", s.rows}, {"greedy", s.greedy}});
  const std::string req_path = prefix + ".request.json";
  std::ofstream(req_path) << req.dump();
  const std::string cmd = "'" + py + "' '" + SourceDir() + "/tests/reference/reference.py' --model '" + model +
                          "' --request '" + req_path + "' --out '" + prefix + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  return ReadNumpyReference(prefix, seqs, out) ? 0 : 2;
}

inline int RunNumpyReference(const std::string& model, const std::vector<RefSequence>& seqs, const std::string& dir,
                             RefResult* out) {
  return RunNumpyReferenceTo(model, seqs, dir + "/ref", out);
}

// Like RunNumpyReference, but kept under $IMPRESS_CACHE_DIR/reference (else
// $XDG_CACHE_HOME/impress, else ~/.cache/impress) keyed by the model's fingerprint, reference.py's
// text, the reference packages' pinned versions and the request, so a long reference pass (a trained model over 1,000+
// tokens) is paid once per machine, not on every run. Any change to the weights, the script or the request makes a new
// key; an entry is written under a temporary name and renamed when complete.
inline int CachedNumpyReference(const std::string& model, const std::string& fingerprint,
                                const std::vector<RefSequence>& seqs, RefResult* out) {
  std::string cache = test_support::CacheDir();
  cache += "/reference";
  std::error_code ec;
  std::filesystem::create_directories(cache, ec);
  std::ifstream script(SourceDir() + "/tests/reference/reference.py");
  std::string key_text((std::istreambuf_iterator<char>(script)), std::istreambuf_iterator<char>());
  // The reference packages' pinned versions: an upgraded numpy or gguf computes the reference anew.
  std::ifstream pins(SourceDir() + "/scripts/requirements-reference.txt");
  key_text.append((std::istreambuf_iterator<char>(pins)), std::istreambuf_iterator<char>());
  for (const auto& s : seqs) {
    nlohmann::json j = {{"tokens", s.tokens}, {"rows", s.rows}, {"greedy", s.greedy}};
    key_text.append(j.dump());
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(key_text));
  const std::string prefix = cache + "/" + fingerprint.substr(0, 32) + "-" + hex;
  if (ReadNumpyReference(prefix, seqs, out)) return 0;
  const std::string tmp = prefix + ".part";
  const int rc = RunNumpyReferenceTo(model, seqs, tmp, out);
  std::filesystem::remove(tmp + ".request.json", ec);
  if (rc != 0) return rc;
  std::filesystem::rename(tmp + ".bin", prefix + ".bin", ec);
  if (!ec) std::filesystem::rename(tmp + ".json", prefix + ".json", ec);
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
