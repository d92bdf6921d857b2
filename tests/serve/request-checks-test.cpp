// The header checks `impress serve` makes before it reads a body (app/serve/request-checks.h),
// the per-address connection counter (http-connection.h), several API keys, and the per-key
// prefix scopes that keep one client's prompts from showing in another's cached tokens
// (prefix-scopes.h), without sockets or a model.
#include <gtest/gtest.h>

#include <numeric>

#include "app/serve/http-connection.h"
#include "app/serve/openai-api.h"
#include "app/serve/prefix-scopes.h"
#include "app/serve/request-checks.h"

namespace impress::serve {
namespace {

int StatusOf(const std::optional<ApiError>& e) { return e ? e->http_status : 0; }

TEST(CheckHost, TheBoundAddressLoopbackNamesAndAllowedHostsPass) {
  const std::vector<std::string> none;
  EXPECT_EQ(StatusOf(CheckHost("127.0.0.1:8080", "127.0.0.1", none)), 0);
  EXPECT_EQ(StatusOf(CheckHost("localhost:8080", "127.0.0.1", none)), 0);
  EXPECT_EQ(StatusOf(CheckHost("LOCALHOST.", "127.0.0.1", none)), 0);
  EXPECT_EQ(StatusOf(CheckHost("[::1]:8080", "127.0.0.1", none)), 0);
  EXPECT_EQ(StatusOf(CheckHost("box.lan:8080", "127.0.0.1", {"box.lan"})), 0);
  EXPECT_EQ(StatusOf(CheckHost("192.168.1.5:8080", "192.168.1.5", none)), 0);
  EXPECT_EQ(StatusOf(CheckHost("10.0.0.7", "0.0.0.0", none)), 0);  // every interface: address literals
}

TEST(CheckHost, ANameAnAttackerControlsIsRefused) {
  const std::vector<std::string> none;
  auto e = CheckHost("attacker.example.com:8080", "127.0.0.1", none);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 403);
  EXPECT_EQ(e->code, "host_not_allowed");
  EXPECT_NE(e->message.find("attacker.example.com"), std::string::npos);
  EXPECT_EQ(StatusOf(CheckHost("attacker.example.com", "0.0.0.0", none)), 403);  // rebinding to any interface
  EXPECT_EQ(StatusOf(CheckHost("localhost", "192.168.1.5", none)), 403);
  EXPECT_EQ(StatusOf(CheckHost("", "127.0.0.1", none)), 400);
}

TEST(CheckOrigin, OnlyAllowedOriginsPass) {
  EXPECT_EQ(StatusOf(CheckOrigin("", {})), 0);  // not a browser
  EXPECT_EQ(StatusOf(CheckOrigin("http://evil.example", {})), 403);
  EXPECT_EQ(StatusOf(CheckOrigin("null", {})), 403);  // a sandboxed page or a file
  EXPECT_EQ(StatusOf(CheckOrigin("http://localhost:3000", {"http://localhost:3000/"})), 0);
  EXPECT_EQ(StatusOf(CheckOrigin("http://localhost:3001", {"http://localhost:3000"})), 403);
  EXPECT_EQ(StatusOf(CheckOrigin("https://anything", {"*"})), 0);
  EXPECT_EQ(CheckOrigin("http://evil.example", {})->code, "origin_not_allowed");
}

TEST(CheckBodyHeaders, JsonWithinTheLimitFramedOneWayPasses) {
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "100", "", "", 4096)), 0);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("Application/JSON; charset=utf-8", "4096", "", "", 4096)), 0);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "", "chunked", "", 4096)), 0);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "12", "", "identity", 4096)), 0);
}

TEST(CheckBodyHeaders, EachBadHeaderHasItsStatus) {
  EXPECT_EQ(StatusOf(CheckBodyHeaders("text/plain", "10", "", "", 4096)), 415);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("", "10", "", "", 4096)), 415);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/x-www-form-urlencoded", "10", "", "", 4096)), 415);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "10", "", "gzip", 4096)), 415);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "4097", "", "", 4096)), 413);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "99999999999999999999999", "", "", 4096)), 400);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "-1", "", "", 4096)), 400);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "10", "chunked", "", 4096)), 400);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "", "gzip, chunked", "", 4096)), 501);
  EXPECT_EQ(StatusOf(CheckBodyHeaders("application/json", "", "", "", 4096)), 411);
  EXPECT_EQ(CheckBodyHeaders("application/json", "4097", "", "", 4096)->code, "request_too_large");
}

TEST(ClientCounter, AnAddressHoldsAtMostItsLimit) {
  ClientCounter c(2);
  EXPECT_TRUE(c.Acquire("10.0.0.1"));
  EXPECT_TRUE(c.Acquire("10.0.0.1"));
  EXPECT_FALSE(c.Acquire("10.0.0.1"));
  EXPECT_TRUE(c.Acquire("10.0.0.2"));  // others are not affected
  c.Release("10.0.0.1");
  EXPECT_TRUE(c.Acquire("10.0.0.1"));
  EXPECT_EQ(c.open("10.0.0.1"), 2u);
  c.Release("10.0.0.2");
  EXPECT_EQ(c.open("10.0.0.2"), 0u);
}

TEST(CheckApiKey, EachOfSeveralKeysIsAcceptedAndNamed) {
  const std::vector<std::string> keys = {"alpha", "beta"};
  int which = -2;
  EXPECT_FALSE(CheckApiKey(keys, "Bearer beta", &which));
  EXPECT_EQ(which, 1);
  EXPECT_FALSE(CheckApiKey(keys, "Bearer alpha", &which));
  EXPECT_EQ(which, 0);
  for (const char* bad : {"Bearer alph", "Bearer alphaa", "alpha", "Bearer ", "", "Basic alpha"}) {
    EXPECT_EQ(StatusOf(CheckApiKey(keys, bad, &which)), 401) << bad;
  }
  EXPECT_FALSE(CheckApiKey({}, "", &which));
  EXPECT_EQ(which, -1);
}

TEST(PrefixScopes, AScopeReusesOnlyPrefixesItRecorded) {
  PrefixScopes scopes;
  const std::vector<int32_t> secret = {1, 2, 3, 4, 5, 6, 7, 8};
  scopes.Record("a", secret);
  EXPECT_EQ(scopes.Reusable("a", secret, 8), 8);
  EXPECT_EQ(scopes.Reusable("a", secret, 5), 5);  // never past the limit
  EXPECT_EQ(scopes.Reusable("b", secret, 8), 0);  // another key: nothing
  // A guess that differs at token 5 is reusable up to there, by its own key only.
  const std::vector<int32_t> guess = {1, 2, 3, 4, 9, 6};
  EXPECT_EQ(scopes.Reusable("a", guess, 6), 4);
  EXPECT_EQ(scopes.Reusable("b", guess, 6), 0);
  scopes.Record("b", guess);
  EXPECT_EQ(scopes.Reusable("b", secret, 8), 4);  // what b sent itself
}

TEST(PrefixScopes, TheOldestRecordsAreForgottenPastTheCap) {
  PrefixScopes scopes(/*max_hashes=*/10);
  std::vector<int32_t> first(6), second(6);
  std::iota(first.begin(), first.end(), 0);
  std::iota(second.begin(), second.end(), 100);
  scopes.Record("a", first);
  scopes.Record("a", second);  // 12 > 10: the first is forgotten
  EXPECT_EQ(scopes.n_hashes(), 6u);
  EXPECT_EQ(scopes.Reusable("a", first, 6), 0);
  EXPECT_EQ(scopes.Reusable("a", second, 6), 6);
}

}  // namespace
}  // namespace impress::serve
