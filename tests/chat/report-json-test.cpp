#include "chat/report-json.h"

#include <gtest/gtest.h>

namespace impress {
namespace {

LayerReport Layer(int k, int n) {
  LayerReport l;
  l.k = k;
  l.n = n;
  return l;
}

TEST(ReportJson, SaysFullAttentionWhenEveryLayerKeptThePrefix) {
  RequestReport r;
  r.layers = {Layer(100, 100), Layer(100, 100)};
  const nlohmann::json j = RequestReportJson(r);
  EXPECT_EQ(j["attention"], "full");
  EXPECT_DOUBLE_EQ(j["attended_share"].get<double>(), 1.0);
  // Nothing reused (a fresh prefix, or recompute): full attention too.
  r.layers = {Layer(0, 0)};
  EXPECT_EQ(RequestReportJson(r)["attention"], "full");
}

TEST(ReportJson, SaysSelectedAttentionWhenOneLayerDroppedTokens) {
  RequestReport r;
  r.layers = {Layer(100, 100), Layer(25, 100), Layer(75, 100)};
  const nlohmann::json j = RequestReportJson(r);
  EXPECT_EQ(j["attention"], "selected");
  EXPECT_DOUBLE_EQ(j["attended_share"].get<double>(), 200.0 / 300.0);
}

TEST(ReportJson, LayersSayWhatTheCrossLayerPrefetchReadAndWhatWasUsed) {
  RequestReport r;
  r.layers = {Layer(25, 100), Layer(30, 100)};
  r.layers[1].prefetched = 25;
  r.layers[1].prefetch_used = 18;
  const nlohmann::json j = RequestReportJson(r);
  EXPECT_EQ(j["layers"][0]["prefetched"], 0);
  EXPECT_EQ(j["layers"][1]["prefetched"], 25);
  EXPECT_EQ(j["layers"][1]["prefetch_used"], 18);
}

}  // namespace
}  // namespace impress
