// RedisClient: a small synchronous Redis client over hiredis for the team KV tier
// (store/team-tier.h, docs/team-tier.md), standalone or Redis Cluster.
//
// Commands are pipelined: Run() sends a batch (up to max_in_flight per node at a time, to every
// node before reading any reply) and returns one reply or Status per command, in order. Every
// command names its key argument; the client puts the namespace prefix in front of it, so two
// namespaces on one Redis never see each other's keys (SCAN strips it again).
//
// Redis Cluster (hiredis 0.14, Debian's libhiredis-dev, knows nothing of it, so it lives here):
// Connect() asks the seed node for CLUSTER SLOTS; a server without cluster support is used
// standalone. Each key goes to the master of its slot (CRC16 of the key or of its hash tag, the
// part between the first '{' and the next '}' when not empty). A MOVED reply refreshes the slot
// map and resends the command to the node it names; an ASK reply resends it there once, after
// ASKING; TRYAGAIN and CLUSTERDOWN are retried after a pause; a connection that fails is
// dropped, the slot map refreshed and the command resent. Every command has a deadline
// (request_timeout from the start of its Run) and at most max_redirects redirections or
// retries; then it fails with a Status naming the cause. Only idempotent commands (GET, SET,
// GETRANGE, EXISTS, DEL, ...) may be run: a command whose reply was lost may have run twice.
//
// Errors: kIOError for the network (connection refused, timed out, closed), kInvalidArgument for
// authentication (wrong user or password, a password the server wants and was not given), and
// an error reply of the server to a command as that command's kInvalidArgument status. A cluster
// that stays down (CLUSTERDOWN past the retries) or a request past its deadline is a kIOError
// that says so.
//
// Writing to a socket the server closed raises SIGPIPE; the first Connect() sets SIGPIPE to be
// ignored when it still has its default action (the error then comes back as EPIPE).
//
// Thread contract: internally synchronized (one Mutex around the connections and the slot map):
// any thread may call any method, calls run one at a time. KeySlot and Crc16 are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/tls-tunnel.h"

namespace impress::store {

constexpr int kRedisClusterSlots = 16384;

// CRC16-CCITT (XModem: polynomial 0x1021, initial value 0), as Redis Cluster hashes keys.
uint16_t Crc16(const void* p, size_t n);
// The cluster slot of a key: CRC16 of its hash tag (when it has a non-empty one) mod 16384.
int KeySlot(std::string_view key);

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;      // empty: AUTH with the password alone (the default user)
  std::string password;  // empty: no AUTH
  // Put in front of every key (e.g. "impress:teamA:"). Must not contain '{' or '}' (hash tags
  // belong to the keys). Empty: keys are used as given.
  std::string key_prefix;
  std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(2000);
  std::chrono::milliseconds request_timeout = std::chrono::milliseconds(5000);  // per Run()
  int max_redirects = 8;      // MOVED/ASK/TRYAGAIN/CLUSTERDOWN/reconnects, per command
  int max_in_flight = 64;     // commands sent to one node before reading its replies
  bool allow_cluster = true;  // false: never ask for CLUSTER SLOTS (a plain server)
  // TLS to every node (store/tls-tunnel.h): the server verified against tls_files.ca_file (else
  // the system's CAs), the client certificate sent when given.
  bool tls = false;
  TlsFiles tls_files;
};

struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus
  int64_t integer = 0;
  std::vector<RedisReply> elements;
  bool nil() const { return type == Type::kNil; }
};

struct RedisCommand {
  std::vector<std::string> args;  // e.g. {"GETRANGE", key, "0", "4095"}
  int key_arg = 1;                // index of the key in args (prefixed and routed by it); -1: none
};

struct RedisClientStats {
  uint64_t commands = 0;
  uint64_t moved = 0;
  uint64_t asked = 0;
  uint64_t retries = 0;  // TRYAGAIN, CLUSTERDOWN, lost connections
  uint64_t slot_map_refreshes = 0;
  uint64_t connects = 0;
  uint64_t errors = 0;  // commands that failed in the end
};

class RedisClient {
 public:
  // Connects to the seed node (AUTH, then CLUSTER SLOTS unless !allow_cluster).
  static Result<std::unique_ptr<RedisClient>> Connect(const RedisOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends every command (pipelined) and returns one result per command, in order. A reply that
  // is a Redis error comes back as a kInvalidArgument Status carrying its text.
  std::vector<Result<RedisReply>> Run(std::span<const RedisCommand> commands);
  Result<RedisReply> Run1(RedisCommand command);

  // Conveniences over Run (keys without the namespace prefix).
  Result<std::optional<std::string>> Get(const std::string& key);  // nullopt: no such key
  Status Set(const std::string& key, const std::string& value, std::chrono::seconds ttl = std::chrono::seconds(0));
  Result<bool> Exists(const std::string& key);
  Status Del(const std::string& key);
  // Bytes [begin, begin + length) of each range of one key, pipelined (GETRANGE). A range past
  // the value's end comes back shorter (a missing key: empty); callers check the lengths.
  struct ByteRange {
    uint64_t begin = 0;
    uint64_t length = 0;
  };
  std::vector<Result<std::string>> GetRanges(const std::string& key, std::span<const ByteRange> ranges);
  // Every key that starts with `prefix` (SCAN on every master), without the namespace prefix.
  Result<std::vector<std::string>> ScanPrefix(const std::string& prefix);
  // Runs a command on every master (no key, no namespace): e.g. FLUSHALL in tests.
  Status RunOnEveryNode(const std::vector<std::string>& args);

  bool cluster() const;  // the server runs Redis Cluster
  const std::string& key_prefix() const;
  RedisClientStats stats() const;

  class Impl;

 private:
  explicit RedisClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace impress::store
