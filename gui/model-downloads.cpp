#include "gui/model-downloads.h"

#include "chat/model-library.h"

namespace impress::gui {

ModelDownloads::ModelDownloads(std::string assets_dir, std::string models_dir) :
    assets_dir_(std::move(assets_dir)), models_dir_(std::move(models_dir)) {}

ModelDownloads::~ModelDownloads() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

bool ModelDownloads::Start(const std::string& name) {
  {
    MutexLock lock(&mu_);
    if (status_.active) return false;
    status_ = DownloadStatus();
    status_.name = name;
    status_.active = true;
  }
  if (thread_.joinable()) thread_.join();  // the last one has ended (it cleared `active` last)
  cancel_ = false;
  thread_ = std::thread([this, name] { Run(name); });
  return true;
}

void ModelDownloads::Cancel() { cancel_ = true; }

DownloadStatus ModelDownloads::Status() const {
  MutexLock lock(&mu_);
  return status_;
}

void ModelDownloads::Run(std::string name) {
  PullOptions options;
  const impress::Status s = PullModel(
      name, assets_dir_, models_dir_,
      [this](uint64_t done, uint64_t total, std::string_view) {
        MutexLock lock(&mu_);
        status_.done = done;
        status_.total = total;
        return !cancel_.load();
      },
      options);
  MutexLock lock(&mu_);
  status_.active = false;
  status_.ok = s.ok();
  status_.message = s.ok() ? std::string() : s.message();
}

}  // namespace impress::gui
