#include "chat/model-library.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

extern char** environ;

namespace impress {

namespace fs = std::filesystem;

namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

Result<KnownModel> ParseEntry(const nlohmann::json& j) {
  KnownModel m;
  m.name = j.at("name").get<std::string>();
  m.display = j.value("display", m.name);
  m.parameters = j.value("parameters", std::string("?"));
  m.file = j.at("file").get<std::string>();
  m.bytes = j.at("bytes").get<uint64_t>();
  m.sha256 = j.at("sha256").get<std::string>();
  m.architecture = j.value("architecture", std::string());
  m.n_layer = j.at("n_layer").get<int>();
  m.n_head = j.at("n_head").get<int>();
  m.n_head_kv = j.at("n_head_kv").get<int>();
  m.head_dim = j.at("head_dim").get<int>();
  m.n_ctx = j.at("n_ctx").get<int>();
  m.license = j.value("license", std::string());
  m.chat_default = j.value("chat_default", false);
  m.n_parts = int(j.at("parts").size());
  if (m.name.empty() || m.file.empty() || m.file.find('/') != std::string::npos || m.file.starts_with(".")) {
    return Status::Corruption("entry '" + m.name + "': a name and a plain file name are required");
  }
  if (m.n_layer <= 0 || m.n_head_kv <= 0 || m.head_dim <= 0 || m.n_ctx <= 0 || m.n_parts <= 0 || m.bytes == 0) {
    return Status::Corruption("entry '" + m.name + "': sizes must be positive");
  }
  return m;
}

// Reads what a child writes to `fd` until EOF, handing each complete line to `on_line`.
class LineReader {
 public:
  // Returns false at EOF or on a read error.
  bool Read(int fd, const std::function<void(const std::string&)>& on_line) {
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      if (!pending_.empty()) on_line(pending_);
      pending_.clear();
      return false;
    }
    pending_.append(buf, size_t(n));
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      on_line(pending_.substr(0, nl));
      pending_.erase(0, nl + 1);
    }
    if (pending_.size() > (1u << 16)) pending_.clear();  // a runaway line is not progress
    return true;
  }

 private:
  std::string pending_;
};

}  // namespace

const KnownModel* ModelCatalog::Find(const std::string& name) const {
  for (const KnownModel& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string ModelCatalog::Names() const {
  std::string out;
  for (const KnownModel& m : models) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

Result<ModelCatalog> LoadModelCatalog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("model catalog " + path + ": cannot open");
  ModelCatalog catalog;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const nlohmann::json& e : j.at("models")) {
      auto m = ParseEntry(e);
      if (!m.ok()) return Status::Corruption("model catalog " + path + ": " + m.status().message());
      if (catalog.Find(m->name)) return Status::Corruption("model catalog " + path + ": '" + m->name + "' twice");
      catalog.models.push_back(std::move(*m));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption("model catalog " + path + ": " + e.what());
  }
  return catalog;
}

std::string CatalogPath(const std::string& assets_dir) { return assets_dir + "/models/models.json"; }
std::string PullScriptPath(const std::string& assets_dir) { return assets_dir + "/models/pull-model.py"; }

std::string ModelsDir() {
  const std::string home = EnvOr("HOME", ".");
  const std::string cache = EnvOr("IMPRESS_CACHE_DIR", EnvOr("XDG_CACHE_HOME", home + "/.cache") + "/impress");
  return cache + "/models";
}

std::string ModelFilePath(const KnownModel& m, const std::string& models_dir) { return models_dir + "/" + m.file; }

bool IsModelPresent(const KnownModel& m, const std::string& models_dir) {
  std::error_code ec;
  const auto size = fs::file_size(ModelFilePath(m, models_dir), ec);
  return !ec && size == m.bytes;
}

Result<std::string> ResolveModelArgument(const std::string& text, const ModelCatalog& catalog,
                                         const std::string& models_dir) {
  std::error_code ec;
  if (fs::exists(text, ec)) return text;
  if (const KnownModel* m = catalog.Find(text)) {
    if (IsModelPresent(*m, models_dir)) return ModelFilePath(*m, models_dir);
    return Status::NotFound("model '" + text + "' (" + m->display + ") is not downloaded: run `impress models pull " +
                            text + "` (" + std::to_string(m->bytes >> 20) + " MiB)");
  }
  return Status::NotFound("'" + text + "' is no file or folder, and not a known model name (known: " + catalog.Names() +
                          ")");
}

Result<std::string> DefaultModelFile(const ModelCatalog& catalog, const std::string& models_dir, std::string* notice) {
  const KnownModel* first_chat = nullptr;
  for (const KnownModel& m : catalog.models) {
    if (!m.chat_default) continue;
    if (!first_chat) first_chat = &m;
    if (IsModelPresent(m, models_dir)) return ModelFilePath(m, models_dir);
  }
  for (const KnownModel& m : catalog.models) {
    if (!IsModelPresent(m, models_dir)) continue;
    if (notice && first_chat) {
      *notice = "using " + m.display + ", a small test model; for real answers run `impress models pull " +
                first_chat->name + "` (" + first_chat->display + ", " + std::to_string(first_chat->bytes >> 20) +
                " MiB)";
    }
    return ModelFilePath(m, models_dir);
  }
  return Status::NotFound("no model in " + models_dir + ": run `impress models pull " +
                          (first_chat ? first_chat->name : std::string("NAME")) + "` or pass --model PATH");
}

Status PullModel(const std::string& name, const std::string& assets_dir, const std::string& models_dir,
                 const ProgressFn& progress, const PullOptions& options) {
  std::string python = options.python;
  if (python.empty()) python = EnvOr("IMPRESS_PYTHON", "python3");
  std::vector<std::string> args = {python, PullScriptPath(assets_dir), name, "--dest", models_dir, "--progress-lines"};
  if (!options.find_links.empty()) {
    args.push_back("--find-links");
    args.push_back(options.find_links);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::IOError("cannot start " + python + " to fetch the model: " + std::strerror(rc));
  }

  bool cancelled = false;
  std::string last_error;
  LineReader out_reader, err_reader;
  unsigned long long done = 0, total = 0;
  // Asks the caller whether to go on (also while a part downloads and no line comes).
  auto report = [&] {
    if (!cancelled && !ReportProgress(progress, done, total, "downloading " + name)) {
      cancelled = true;
      kill(pid, SIGINT);  // the script removes its temporary folder on an interrupt
    }
  };
  auto on_progress = [&](const std::string& line) {
    int part = 0, parts = 0;
    if (std::sscanf(line.c_str(), "progress %llu %llu %d %d", &done, &total, &part, &parts) == 4) report();
  };
  auto on_error = [&](const std::string& line) {
    if (line.empty()) return;
    if (line.starts_with("pull-model:")) last_error = line.substr(12);
    spdlog::info("models pull: {}", line);
  };
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const int ready = poll(fds, 2, 250);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) {
      report();
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const bool more = i == 0 ? out_reader.Read(fds[i].fd, on_progress) : err_reader.Read(fds[i].fd, on_error);
      if (!more) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (cancelled) return Status::Cancelled("download of " + name + " cancelled; nothing was changed");
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status::Ok();
  if (last_error.empty()) last_error = "the fetch script failed (exit status " + std::to_string(wstatus) + ")";
  return Status::IOError("models pull " + last_error);
}

Status RemoveModel(const KnownModel& m, const std::string& models_dir) {
  const std::string path = ModelFilePath(m, models_dir);
  std::error_code ec;
  if (!fs::remove(path, ec)) {
    if (ec) return Status::IOError("remove " + path + ": " + ec.message());
    return Status::NotFound(m.name + " is not downloaded (no " + path + ")");
  }
  return Status::Ok();
}

}  // namespace impress
