// Helpers for the team tier's tests: a redis-server of their own on a free loopback port in a
// temporary directory (no persistence), and a 3-master Redis Cluster made with
// `redis-cli --cluster create`. Servers are killed when their object goes (and when the test
// process dies: PR_SET_PDEATHSIG). redis-server missing is a failure, not a skip:
// scripts/setup.sh installs it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "store/redis-client.h"
#include "tests/store/store-test-util.h"

namespace impress::store::testing {

inline bool ToolOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

// A loopback port nobody listens on (and, for a cluster node, whose bus port +10000 is free too).
inline int FreePort(bool with_bus) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fds[2] = {-1, -1};
    int port = 0;
    bool ok = true;
    for (int i = 0; i < (with_bus ? 2 : 1) && ok; ++i) {
      fds[i] = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(i == 0 ? 0 : port + 10000));
      ok = ::bind(fds[i], reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
      socklen_t len = sizeof(a);
      if (ok && i == 0) {
        ::getsockname(fds[i], reinterpret_cast<sockaddr*>(&a), &len);
        port = ntohs(a.sin_port);
        ok = !with_bus || port < 55000;
      }
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    if (ok && port > 0) return port;
  }
  return 0;
}

class RedisServer {
 public:
  struct Options {
    bool cluster = false;
    std::string password;  // requirepass
  };
  // TLS only (no plain port): the server's certificate and key, and the CA its clients'
  // certificates must come from; `client` is what the server's own readiness check presents.
  struct Tls {
    std::string cert, key, ca;
    TlsFiles client;
  };

  // Starts and waits (bounded) until it answers PING; nullptr after a gtest failure.
  static std::unique_ptr<RedisServer> Start(const Options& o, const Tls& tls = {}) {
    if (!ToolOnPath("redis-server")) {
      ADD_FAILURE() << "redis-server is not installed (bash scripts/setup.sh installs it)";
      return nullptr;
    }
    auto s = std::unique_ptr<RedisServer>(new RedisServer(o));
    s->tls_ = tls;
    s->dir_ = TempDir("redis");
    s->port_ = FreePort(o.cluster);
    if (s->port_ == 0) {
      ADD_FAILURE() << "no free loopback port";
      return nullptr;
    }
    if (!s->Launch()) return nullptr;
    return s;
  }

  ~RedisServer() {
    Kill();
    std::filesystem::remove_all(dir_);
  }

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  void Pause() { ::kill(pid_, SIGSTOP); }  // a stalled server: accepts, never answers
  void Resume() { ::kill(pid_, SIGCONT); }
  // Again on the same port and directory (the data is gone: no persistence).
  bool Restart() {
    Kill();
    return Launch();
  }

  // A client of this node alone (no cluster routing, no namespace).
  std::unique_ptr<RedisClient> Admin() const {
    RedisOptions ro;
    ro.port = port_;
    ro.password = opt_.password;
    ro.allow_cluster = false;
    ro.tls = !tls_.cert.empty();
    ro.tls_files = tls_.client;
    auto c = RedisClient::Connect(ro);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

 private:
  explicit RedisServer(Options o) : opt_(std::move(o)) {}

  bool Launch() {
    const bool tls = !tls_.cert.empty();
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     tls ? "0" : std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_,
                                     "--logfile",
                                     dir_ + "/redis.log",
                                     "--daemonize",
                                     "no"};
    if (tls)
      args.insert(args.end(), {"--tls-port", std::to_string(port_), "--tls-cert-file", tls_.cert, "--tls-key-file",
                               tls_.key, "--tls-ca-cert-file", tls_.ca});
    if (!opt_.password.empty()) args.insert(args.end(), {"--requirepass", opt_.password});
    if (opt_.cluster)
      args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
                               "--cluster-node-timeout", "3000"});
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    // Bounded wait for PING (generous: a loaded machine).
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        ADD_FAILURE() << "redis-server exited at start (status " << status << "): " << Log();
        return false;
      }
      RedisOptions ro;
      ro.port = port_;
      ro.password = opt_.password;
      ro.allow_cluster = false;
      ro.connect_timeout = std::chrono::milliseconds(500);
      ro.tls = tls;
      ro.tls_files = tls_.client;
      if (RedisClient::Connect(ro).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "redis-server on port " << port_ << " did not answer PING: " << Log();
    return false;
  }

  std::string Log() const {
    std::ifstream in(dir_ + "/redis.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  Options opt_;
  Tls tls_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

// Three masters with `redis-cli --cluster create`, waited for (bounded) until every node says
// cluster_state:ok and serves all slots.
class RedisCluster {
 public:
  static std::unique_ptr<RedisCluster> Start() {
    if (!ToolOnPath("redis-cli")) {
      ADD_FAILURE() << "redis-cli is not installed (bash scripts/setup.sh installs redis-server, which has it)";
      return nullptr;
    }
    auto c = std::unique_ptr<RedisCluster>(new RedisCluster());
    std::string cmd = "redis-cli --cluster create";
    for (int i = 0; i < 3; ++i) {
      auto s = RedisServer::Start({.cluster = true, .password = ""});
      if (!s) return nullptr;
      cmd += " 127.0.0.1:" + std::to_string(s->port());
      c->nodes.push_back(std::move(s));
    }
    const std::string log = c->nodes[0]->dir() + "/cluster-create.log";
    cmd += " --cluster-replicas 0 --cluster-yes >" + log + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream in(log);
      std::stringstream ss;
      ss << in.rdbuf();
      ADD_FAILURE() << "redis-cli --cluster create failed: " << ss.str();
      return nullptr;
    }
    for (int i = 0; i < 600; ++i) {
      bool ok = true;
      for (auto& n : c->nodes) {
        auto a = n->Admin();
        auto r = a ? a->Run1({{"CLUSTER", "INFO"}, -1}) : Result<RedisReply>(Status::IOError("no admin"));
        ok = ok && r.ok() && r->str.find("cluster_state:ok") != std::string::npos &&
             r->str.find("cluster_slots_ok:16384") != std::string::npos;
      }
      if (ok) return c;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "the cluster did not reach cluster_state:ok";
    return nullptr;
  }

  // Node i's cluster id, and the index of the node that owns a slot (nodes.size(): none).
  std::string Id(size_t i) const {
    auto r = nodes[i]->Admin()->Run1({{"CLUSTER", "MYID"}, -1});
    return r.ok() ? r->str : "";
  }
  size_t OwnerOf(int slot) const {
    auto m = nodes[0]->Admin()->Run1({{"CLUSTER", "SLOTS"}, -1});
    if (!m.ok()) return nodes.size();
    for (const auto& range : m->elements)
      if (range.elements[0].integer <= slot && slot <= range.elements[1].integer)
        for (size_t j = 0; j < nodes.size(); ++j)
          if (range.elements[2].elements[1].integer == nodes[j]->port()) return j;
    return nodes.size();
  }

  std::vector<std::unique_ptr<RedisServer>> nodes;
};

}  // namespace impress::store::testing
