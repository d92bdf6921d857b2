// What the team tier's store tests share (team-fill-test.cpp, team-remote-test.cpp): the small
// model geometry their synthetic KV has, store options with a team tier on a test redis-server,
// and a pair of store directories removed at the end.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store::testing {

inline constexpr int kTeamLayers = 3, kTeamHeads = 2, kTeamDim = 64, kTeamChunk = 16;

// A store in `dir` whose team tier is the redis-server on 127.0.0.1:port, namespace `team`;
// short timeouts and no retry pause (the tests kill and stall servers on purpose).
inline PrefixStoreOptions TeamTestOptions(const std::string& dir, int port, const std::string& team,
                                          const std::string& model, bool selective) {
  PrefixStoreOptions o = TestOptions(dir, model, kTeamLayers, kTeamHeads, kTeamDim, {1}, kTeamChunk);
  o.team.url = "redis://127.0.0.1:" + std::to_string(port);
  o.team.team = team;
  o.team.connect_timeout = std::chrono::milliseconds(500);
  o.team.request_timeout = std::chrono::milliseconds(1500);
  o.team.retry_pause = std::chrono::milliseconds(0);
  o.team.selective = selective;
  return o;
}

// Two store directories (desktops A and B), removed at the end.
struct TeamDirs {
  std::string a = TempDir("team-a"), b = TempDir("team-b");
  ~TeamDirs() {
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
  }
};

}  // namespace impress::store::testing
