// ModelDownloads: fetches one known model at a time (chat/model-library.h PullModel) on a thread
// of its own, so the window stays responsive for the minutes a gigabyte takes; the model picker
// shows its Status() each frame and offers Cancel.
//
// Thread contract: internally synchronized; Start, Cancel and Status may be called from any
// thread and never block on the download (Status copies a small struct under a mutex). The
// destructor cancels a download in flight and joins its thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "base/mutex.h"

namespace impress::gui {

struct DownloadStatus {
  std::string name;     // the model being (or last) downloaded; empty: none yet
  uint64_t done = 0;    // bytes assembled so far
  uint64_t total = 0;   // the file's size
  bool active = false;  // a download is running
  bool ok = false;      // the last one finished and was verified
  std::string message;  // why the last one failed (or "cancelled")
};

class ModelDownloads {
 public:
  ModelDownloads(std::string assets_dir, std::string models_dir);
  ~ModelDownloads();
  ModelDownloads(const ModelDownloads&) = delete;
  ModelDownloads& operator=(const ModelDownloads&) = delete;

  // Starts fetching `name`; false (nothing started) while another download runs.
  bool Start(const std::string& name);
  void Cancel();
  DownloadStatus Status() const;
  const std::string& models_dir() const { return models_dir_; }

 private:
  void Run(std::string name);

  // Constant after construction.
  const std::string assets_dir_, models_dir_;

  mutable Mutex mu_;
  DownloadStatus status_ GUARDED_BY(mu_);
  std::atomic<bool> cancel_{false};
  std::thread thread_;  // started and joined by the caller's thread (Start, the destructor)
};

}  // namespace impress::gui
