// RedisClient: connections, pipelining and the Redis Cluster logic (slot map, MOVED/ASK) in one
// place, over hiredis's blocking API (store/redis-client.h).
#include "store/redis-client.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>
#include <sys/time.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

#include "base/mutex.h"

namespace impress::store {

uint16_t Crc16(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint16_t crc = 0;
  for (size_t i = 0; i < n; ++i) {
    crc ^= uint16_t(uint16_t(b[i]) << 8);
    for (int k = 0; k < 8; ++k) crc = (crc & 0x8000) ? uint16_t((crc << 1) ^ 0x1021) : uint16_t(crc << 1);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key.data(), key.size()) & (kRedisClusterSlots - 1);
}

namespace {

using Clock = std::chrono::steady_clock;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;
struct ReplyFree {
  void operator()(void* r) const { freeReplyObject(r); }
};
using RawReply = std::unique_ptr<redisReply, ReplyFree>;

constexpr uint16_t kNoOwner = 0xffff;

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default: break;
  }
  return out;
}

timeval Timeval(Clock::duration d) {
  const int64_t us = std::max<int64_t>(1000, std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  timeval tv;
  tv.tv_sec = time_t(us / 1000000);
  tv.tv_usec = suseconds_t(us % 1000000);
  return tv;
}

std::string EndpointOf(const std::string& host, int port) { return host + ":" + std::to_string(port); }

// "MOVED 3999 127.0.0.1:6381" -> the endpoint; an empty host means the replying node's.
std::string RedirectTarget(const std::string& err, const std::string& from) {
  const size_t sp = err.rfind(' ');
  std::string ep = sp == std::string::npos ? "" : err.substr(sp + 1);
  if (!ep.empty() && ep[0] == ':' && ep.find(':', 1) == std::string::npos) ep = from.substr(0, from.rfind(':')) + ep;
  return ep;
}

// The error reply of a command as a Status (authentication errors say what to fix).
Status ErrorReply(const std::string& ep, const std::string& text) {
  if (text.starts_with("NOAUTH"))
    return Status::InvalidArgument("redis " + ep + ": the server needs a password (give the team's user and password)");
  if (text.starts_with("WRONGPASS") || text.find("invalid password") != std::string::npos)
    return Status::InvalidArgument("redis " + ep + ": authentication failed, wrong user or password (" + text + ")");
  if (text.starts_with("NOPERM"))
    return Status::InvalidArgument("redis " + ep + ": the user may not do this (" + text + ")");
  return Status::InvalidArgument("redis " + ep + ": " + text);
}

bool IsRetryable(const std::string& err) {
  return err.starts_with("TRYAGAIN") || err.starts_with("CLUSTERDOWN") || err.starts_with("LOADING");
}

void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

class RedisClient::Impl {
 public:
  explicit Impl(RedisOptions o) : opt(std::move(o)), seed(EndpointOf(opt.host, opt.port)) {}

  // One command of a Run on its way.
  struct Pending {
    size_t idx = 0;
    std::string ep;
    bool asking = false;
    int tries = 0;
  };

  Result<redisContext*> ConnLocked(const std::string& ep, Clock::time_point deadline) REQUIRES(mu);
  void DropLocked(const std::string& ep) REQUIRES(mu) {
    conns.erase(ep);  // closes hiredis's end first, then the tunnel stops
    tunnels.erase(ep);
  }
  Result<RedisReply> CommandLocked(const std::string& ep, const std::vector<std::string>& args,
                                   Clock::time_point deadline) REQUIRES(mu);
  Status RefreshSlotMapLocked(Clock::time_point deadline) REQUIRES(mu);
  Status ParseSlotMapLocked(const RedisReply& r, const std::string& from) REQUIRES(mu);
  std::string RouteLocked(const RedisCommand& c) const REQUIRES(mu);
  std::vector<std::string> MastersLocked() const REQUIRES(mu) { return cluster ? masters : std::vector{seed}; }
  Status FailureLocked(const std::string& ep, const std::string& what, Clock::time_point start,
                       Clock::time_point deadline) REQUIRES(mu);
  // One round of Run: sends the pending commands (per node, up to max_in_flight) and reads their
  // replies; returns the commands to send again (redirected, retried, or past the window).
  std::vector<Pending> RoundLocked(std::vector<Pending> todo, std::span<const RedisCommand> cmds,
                                   std::vector<Result<RedisReply>>* out, Clock::time_point start,
                                   Clock::time_point deadline, bool* pause) REQUIRES(mu);
  // Reads one reply of `p` (after the ASKING reply when it was asked) and files it.
  bool ReadOneLocked(redisContext* c, Pending p, std::vector<Result<RedisReply>>* out, std::vector<Pending>* again,
                     bool* pause) REQUIRES(mu);
  void RetryLocked(Pending p, const Status& why, std::vector<Result<RedisReply>>* out, std::vector<Pending>* again)
      REQUIRES(mu);

  const RedisOptions opt;
  const std::string seed;
  bool cluster = false;  // set by Connect before the client is shared, then constant
  mutable Mutex mu;
  std::map<std::string, std::unique_ptr<TlsTunnel>> tunnels GUARDED_BY(mu);  // with opt.tls; after conns dies
  std::map<std::string, ContextPtr> conns GUARDED_BY(mu);                    // by "host:port"
  std::vector<std::string> masters GUARDED_BY(mu);
  std::vector<uint16_t> slot_owner GUARDED_BY(mu);  // [slot] -> index into masters
  bool map_stale GUARDED_BY(mu) = false;
  RedisClientStats st GUARDED_BY(mu);
};

Result<redisContext*> RedisClient::Impl::ConnLocked(const std::string& ep, Clock::time_point deadline) {
  if (auto it = conns.find(ep); it != conns.end()) return it->second.get();
  const size_t colon = ep.rfind(':');
  const std::string host = ep.substr(0, colon);
  const int port = std::atoi(ep.c_str() + colon + 1);
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return Status::IOError("redis " + ep + ": request timed out before connecting");
  const auto connect_timeout = std::min<Clock::duration>(opt.connect_timeout, left);
  std::unique_ptr<TlsTunnel> tunnel;
  if (opt.tls) {
    auto t = TlsTunnel::Open(host, port, opt.tls_files,
                             std::chrono::duration_cast<std::chrono::milliseconds>(connect_timeout));
    if (!t.ok()) return t.status().WithContext("redis " + ep);
    tunnel = std::move(*t);
  }
  ContextPtr c(tunnel ? redisConnectFd(tunnel->TakeClientFd())
                      : redisConnectWithTimeout(host.c_str(), port, Timeval(connect_timeout)));
  if (!c) return Status::ResourceExhausted("redis " + ep + ": out of memory for a connection");
  if (c->err) return Status::IOError("redis " + ep + ": cannot connect: " + c->errstr);
  if (tunnel) tunnels[ep] = std::move(tunnel);
  ++st.connects;
  if (!opt.password.empty()) {
    std::vector<const char*> argv = {"AUTH"};
    std::vector<size_t> lens = {4};
    if (!opt.user.empty()) {
      argv.push_back(opt.user.c_str());
      lens.push_back(opt.user.size());
    }
    argv.push_back(opt.password.c_str());
    lens.push_back(opt.password.size());
    redisSetTimeout(c.get(), Timeval(deadline - Clock::now()));
    RawReply r(static_cast<redisReply*>(redisCommandArgv(c.get(), int(argv.size()), argv.data(), lens.data())));
    if (!r) return Status::IOError("redis " + ep + ": AUTH failed: " + c->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string text(r->str, r->len);
      return text.starts_with("ERR") && text.find("without any password") != std::string::npos
                 ? Status::InvalidArgument("redis " + ep + ": a password was given but the server has none set")
                 : ErrorReply(ep, text.starts_with("ERR") ? "WRONGPASS " + text : text);
    }
  }
  redisContext* raw = c.get();
  conns[ep] = std::move(c);
  return raw;
}

Status RedisClient::Impl::FailureLocked(const std::string& ep, const std::string& what, Clock::time_point start,
                                        Clock::time_point deadline) {
  DropLocked(ep);
  if (Clock::now() >= deadline) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return Status::IOError("redis " + ep + ": request timed out after " + std::to_string(ms) + " ms");
  }
  return Status::IOError("redis " + ep + ": " + what);
}

Result<RedisReply> RedisClient::Impl::CommandLocked(const std::string& ep, const std::vector<std::string>& args,
                                                    Clock::time_point deadline) {
  const auto start = Clock::now();
  IMPRESS_ASSIGN_OR_RETURN(redisContext * c, ConnLocked(ep, deadline));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisSetTimeout(c, Timeval(deadline - Clock::now()));
  RawReply r(static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data())));
  if (!r) return FailureLocked(ep, std::string("connection lost: ") + c->errstr, start, deadline);
  if (r->type == REDIS_REPLY_ERROR) return ErrorReply(ep, std::string(r->str, r->len));
  return Convert(r.get());
}

Status RedisClient::Impl::ParseSlotMapLocked(const RedisReply& r, const std::string& from) {
  std::vector<std::string> ms;
  std::vector<uint16_t> owner(kRedisClusterSlots, kNoOwner);
  const std::string from_host = from.substr(0, from.rfind(':'));
  for (const auto& range : r.elements) {
    if (range.elements.size() < 3 || range.elements[2].elements.size() < 2)
      return Status::Corruption("redis " + from + ": CLUSTER SLOTS reply malformed");
    const auto& node = range.elements[2].elements;
    std::string host = node[0].str;
    if (host.empty() || host == "?") host = from_host;
    const std::string ep = EndpointOf(host, int(node[1].integer));
    auto it = std::find(ms.begin(), ms.end(), ep);
    const size_t index = size_t(it - ms.begin());
    if (it == ms.end()) ms.push_back(ep);
    const int64_t lo = range.elements[0].integer, hi = range.elements[1].integer;
    if (lo < 0 || hi >= kRedisClusterSlots || lo > hi)
      return Status::Corruption("redis " + from + ": CLUSTER SLOTS names slots out of range");
    for (int64_t s = lo; s <= hi; ++s) owner[size_t(s)] = uint16_t(index);
  }
  if (ms.empty()) return Status::IOError("redis " + from + ": the cluster has no slots assigned");
  masters = std::move(ms);
  slot_owner = std::move(owner);
  map_stale = false;
  ++st.slot_map_refreshes;
  return Status::Ok();
}

// Asks the known masters (then the seed) in turn until one answers CLUSTER SLOTS.
Status RedisClient::Impl::RefreshSlotMapLocked(Clock::time_point deadline) {
  std::vector<std::string> ask = masters;
  if (std::find(ask.begin(), ask.end(), seed) == ask.end()) ask.push_back(seed);
  Status last = Status::IOError("redis: no node to ask for the slot map");
  for (const auto& ep : ask) {
    auto r = CommandLocked(ep, {"CLUSTER", "SLOTS"}, deadline);
    if (r.ok()) return ParseSlotMapLocked(*r, ep);
    last = r.status();
  }
  return last;
}

std::string RedisClient::Impl::RouteLocked(const RedisCommand& c) const {
  if (!cluster || c.key_arg < 0 || size_t(c.key_arg) >= c.args.size() || masters.empty()) return seed;
  const uint16_t o = slot_owner[size_t(KeySlot(c.args[size_t(c.key_arg)]))];
  return o == kNoOwner ? masters[0] : masters[o];
}

void RedisClient::Impl::RetryLocked(Pending p, const Status& why, std::vector<Result<RedisReply>>* out,
                                    std::vector<Pending>* again) {
  if (why.code() == Status::Code::kInvalidArgument) {  // authentication: trying again changes nothing
    ++st.errors;
    (*out)[p.idx] = why;
    return;
  }
  if (++p.tries > opt.max_redirects) {
    ++st.errors;
    (*out)[p.idx] = Status(why.code(), why.message() + " (after " + std::to_string(p.tries) + " tries)");
    return;
  }
  ++st.retries;
  again->push_back(std::move(p));
}

bool RedisClient::Impl::ReadOneLocked(redisContext* c, Pending p, std::vector<Result<RedisReply>>* out,
                                      std::vector<Pending>* again, bool* pause) {
  void* raw = nullptr;
  if (p.asking) {
    if (redisGetReply(c, &raw) != REDIS_OK) return false;
    freeReplyObject(raw);
    raw = nullptr;
  }
  if (redisGetReply(c, &raw) != REDIS_OK) return false;
  RawReply r(static_cast<redisReply*>(raw));
  if (r->type != REDIS_REPLY_ERROR) {
    (*out)[p.idx] = Convert(r.get());
    return true;
  }
  const std::string err(r->str, r->len);
  const std::string from = p.ep;
  if (err.starts_with("MOVED ") || err.starts_with("ASK ")) {
    const bool ask = err[0] == 'A';
    ++(ask ? st.asked : st.moved);
    if (!ask) map_stale = true;
    p.ep = RedirectTarget(err, from);
    p.asking = ask;
    RetryLocked(std::move(p), Status::IOError("redis " + from + ": too many redirections (" + err + ")"), out, again);
  } else if (IsRetryable(err)) {
    *pause = true;
    map_stale = map_stale || err.starts_with("CLUSTERDOWN");
    RetryLocked(std::move(p), Status::IOError("redis " + from + ": " + err), out, again);
  } else {
    ++st.errors;
    (*out)[p.idx] = ErrorReply(from, err);
  }
  return true;
}

std::vector<RedisClient::Impl::Pending> RedisClient::Impl::RoundLocked(std::vector<Pending> todo,
                                                                       std::span<const RedisCommand> cmds,
                                                                       std::vector<Result<RedisReply>>* out,
                                                                       Clock::time_point start,
                                                                       Clock::time_point deadline, bool* pause) {
  std::map<std::string, std::vector<Pending>> by_node;
  for (auto& p : todo) by_node[p.ep].push_back(std::move(p));
  std::vector<Pending> again;
  std::vector<std::pair<redisContext*, std::vector<Pending>>> sent;
  for (auto& [ep, ps] : by_node) {
    const size_t n = std::min(ps.size(), size_t(std::max(1, opt.max_in_flight)));
    for (size_t i = n; i < ps.size(); ++i) again.push_back(std::move(ps[i]));
    ps.resize(n);
    auto c = ConnLocked(ep, deadline);
    if (!c.ok()) {
      *pause = true;
      map_stale = cluster;
      for (auto& p : ps) RetryLocked(std::move(p), c.status(), out, &again);
      continue;
    }
    redisSetTimeout(*c, Timeval(deadline - Clock::now()));
    for (const auto& p : ps) {
      if (p.asking) redisAppendCommand(*c, "ASKING");
      const auto& args = cmds[p.idx].args;
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      redisAppendCommandArgv(*c, int(argv.size()), argv.data(), lens.data());
      ++st.commands;
    }
    // Everything goes out to every node before any reply is read.
    int done = 0;
    while (!done && redisBufferWrite(*c, &done) == REDIS_OK) {
    }
    sent.emplace_back(*c, std::move(ps));
  }
  for (auto& [c, ps] : sent) {
    const std::string ep = ps[0].ep;
    size_t i = 0;
    for (; i < ps.size(); ++i)
      if (!ReadOneLocked(c, ps[i], out, &again, pause)) break;
    if (i == ps.size()) continue;
    // The connection failed (closed, reset, timed out): the rest of its commands are resent.
    const Status why = FailureLocked(ep, std::string("connection lost: ") + c->errstr, start, deadline);
    map_stale = cluster;
    for (; i < ps.size(); ++i) RetryLocked(std::move(ps[i]), why, out, &again);
  }
  return again;
}

std::vector<Result<RedisReply>> RedisClient::Run(std::span<const RedisCommand> commands) {
  Impl& m = *impl_;
  const auto start = Clock::now();
  const auto deadline = start + m.opt.request_timeout;
  std::vector<Result<RedisReply>> out(commands.size(), Result<RedisReply>(Status::Internal("redis: no reply")));
  std::vector<RedisCommand> cmds(commands.begin(), commands.end());
  for (auto& c : cmds)
    if (c.key_arg >= 0 && size_t(c.key_arg) < c.args.size()) c.args[size_t(c.key_arg)].insert(0, m.opt.key_prefix);
  MutexLock lk(&m.mu);
  std::vector<Impl::Pending> todo;
  for (size_t i = 0; i < cmds.size(); ++i) todo.push_back(Impl::Pending{i, m.RouteLocked(cmds[i]), false, 0});
  int pauses = 0;
  while (!todo.empty()) {
    if (Clock::now() >= deadline) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      for (const auto& p : todo) {
        out[p.idx] = Status::IOError("redis " + p.ep + ": request timed out after " + std::to_string(ms) + " ms");
        ++m.st.errors;
      }
      break;
    }
    if (m.cluster && m.map_stale) {
      Status s = m.RefreshSlotMapLocked(deadline);
      if (!s.ok()) spdlog::debug("team tier: slot map refresh failed: {}", s.ToString());
      for (auto& p : todo)
        if (!p.asking && p.tries > 0) p.ep = m.RouteLocked(cmds[p.idx]);
    }
    bool pause = false;
    todo = m.RoundLocked(std::move(todo), cmds, &out, start, deadline, &pause);
    if (pause && !todo.empty()) {
      const auto nap = std::chrono::milliseconds(std::min(500, 20 << std::min(pauses++, 5)));
      std::this_thread::sleep_for(
          std::min<Clock::duration>(nap, std::max<Clock::duration>(deadline - Clock::now(), {})));
    }
  }
  return out;
}

Result<RedisReply> RedisClient::Run1(RedisCommand command) {
  auto r = Run(std::span<const RedisCommand>(&command, 1));
  return std::move(r[0]);
}

Result<std::optional<std::string>> RedisClient::Get(const std::string& key) {
  IMPRESS_ASSIGN_OR_RETURN(RedisReply r, Run1({{"GET", key}}));
  if (r.nil()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(r.str));
}

Status RedisClient::Set(const std::string& key, const std::string& value, std::chrono::seconds ttl) {
  RedisCommand c{{"SET", key, value}};
  if (ttl.count() > 0) {
    c.args.push_back("EX");
    c.args.push_back(std::to_string(ttl.count()));
  }
  return Run1(std::move(c)).status();
}

Result<bool> RedisClient::Exists(const std::string& key) {
  IMPRESS_ASSIGN_OR_RETURN(RedisReply r, Run1({{"EXISTS", key}}));
  return r.integer > 0;
}

Status RedisClient::Del(const std::string& key) { return Run1({{"DEL", key}}).status(); }

std::vector<Result<std::string>> RedisClient::GetRanges(const std::string& key, std::span<const ByteRange> ranges) {
  std::vector<RedisCommand> cmds;
  cmds.reserve(ranges.size());
  for (const auto& r : ranges) {
    // GETRANGE's end is inclusive; an empty range asks for nothing.
    cmds.push_back({{"GETRANGE", key, std::to_string(r.begin), std::to_string(r.begin + r.length - 1)}});
  }
  auto replies = Run(cmds);
  std::vector<Result<std::string>> out;
  out.reserve(ranges.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    if (ranges[i].length == 0) out.emplace_back(std::string());
    else if (!replies[i].ok()) out.emplace_back(replies[i].status());
    else out.emplace_back(std::move(replies[i]->str));
  }
  return out;
}

namespace {

std::string GlobEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> RedisClient::ScanPrefix(const std::string& prefix) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + m.opt.request_timeout;
  const std::string pattern = GlobEscape(m.opt.key_prefix + prefix) + "*";
  std::vector<std::string> keys;
  MutexLock lk(&m.mu);
  for (const auto& ep : m.MastersLocked()) {
    std::string cursor = "0";
    do {
      IMPRESS_ASSIGN_OR_RETURN(RedisReply r,
                               m.CommandLocked(ep, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, deadline));
      if (r.elements.size() != 2) return Status::Corruption("redis " + ep + ": SCAN reply malformed");
      cursor = r.elements[0].str;
      for (const auto& k : r.elements[1].elements) keys.push_back(k.str.substr(m.opt.key_prefix.size()));
    } while (cursor != "0");
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Status RedisClient::RunOnEveryNode(const std::vector<std::string>& args) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + m.opt.request_timeout;
  MutexLock lk(&m.mu);
  for (const auto& ep : m.MastersLocked()) IMPRESS_RETURN_IF_ERROR(m.CommandLocked(ep, args, deadline).status());
  return Status::Ok();
}

Result<std::unique_ptr<RedisClient>> RedisClient::Connect(const RedisOptions& o) {
  if (o.key_prefix.find_first_of("{}") != std::string::npos)
    return Status::InvalidArgument("redis: the key prefix must not contain '{' or '}': " + o.key_prefix);
  if (o.port <= 0 || o.port > 65535)
    return Status::InvalidArgument("redis: port out of range: " + std::to_string(o.port));
  if (o.host.empty()) return Status::InvalidArgument("redis: no host");
  IgnoreSigpipeOnce();
  auto impl = std::make_unique<Impl>(o);
  Impl& m = *impl;
  const auto deadline = Clock::now() + o.connect_timeout + o.request_timeout;
  {
    MutexLock lk(&m.mu);
    if (o.allow_cluster) {
      auto r = m.CommandLocked(m.seed, {"CLUSTER", "SLOTS"}, deadline);
      if (r.ok()) {
        m.cluster = true;
        IMPRESS_RETURN_IF_ERROR(m.ParseSlotMapLocked(*r, m.seed));
      } else if (r.status().message().find("cluster support disabled") == std::string::npos) {
        return r.status();
      }
    }
    // A plain server: PING says whether it takes us (a password it wants shows here).
    if (!m.cluster) IMPRESS_RETURN_IF_ERROR(m.CommandLocked(m.seed, {"PING"}, deadline).status());
  }
  spdlog::debug("redis {}: connected ({})", m.seed, m.cluster ? "cluster" : "standalone");
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(impl)));
}

RedisClient::RedisClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisClient::~RedisClient() = default;

bool RedisClient::cluster() const { return impl_->cluster; }
const std::string& RedisClient::key_prefix() const { return impl_->opt.key_prefix; }
RedisClientStats RedisClient::stats() const {
  MutexLock lk(&impl_->mu);
  return impl_->st;
}

}  // namespace impress::store
