#include "store/extent-files.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace impress::store {

namespace {
constexpr const char* kDiskFullMarker = "disk-full";
// Room asked beyond the write itself before retrying after a disk-full failure, so the retry does
// not fail again on the catalog's growth or the filesystem's own metadata.
constexpr uint64_t kDiskFullSlack = 4ull << 20;
}  // namespace

std::string ExtentFiles::PathOf(uint32_t id) const {
  char name[32];
  std::snprintf(name, sizeof(name), "data-%06u.dat", id);
  return dir_ + "/" + name;
}

Result<std::unique_ptr<ExtentFiles>> ExtentFiles::Open(Env* env, const std::string& dir, uint64_t file_bytes,
                                                       uint64_t cap, bool read_only) {
  if (file_bytes < kIoAlign || file_bytes % kIoAlign)
    return Status::InvalidArgument("data file size must be a positive multiple of 4096, got " +
                                   std::to_string(file_bytes));
  auto s = std::unique_ptr<ExtentFiles>(new ExtentFiles(env, dir, file_bytes, cap, read_only));
  IMPRESS_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  MutexLock lk(&s->mu_);
  for (const auto& n : names) {
    unsigned id = 0;
    char tail = 0;
    if (n == kDiskFullMarker) {
      s->disk_full_ = true;
      continue;
    }
    if (n.size() != 15 || std::sscanf(n.c_str(), "data-%6u.da%c", &id, &tail) != 2 || tail != 't') continue;
    auto opened = s->GetOrCreateLocked(id);
    if (!opened.ok() && opened.status().code() == Status::Code::kInvalidArgument) {
      // Refused (a symlink, not a regular file): never read, written, truncated or removed.
      spdlog::warn("store: {}; its chunks are dropped", opened.status().message());
      s->max_refused_id_ = std::max(s->max_refused_id_, id);
      continue;
    }
    IMPRESS_ASSIGN_OR_RETURN(DataFile * seg, std::move(opened));
    IMPRESS_ASSIGN_OR_RETURN(uint64_t size, seg->file->Size());
    seg->end = size;
  }
  return s;
}

Result<ExtentFiles::DataFile*> ExtentFiles::GetOrCreateLocked(uint32_t id) {
  auto it = files_.find(id);
  if (it != files_.end()) return it->second.get();
  auto seg = std::make_unique<DataFile>();
  OpenOptions oo;
  oo.read_only = read_only_;
  oo.direct = !read_only_;  // read-only stores read with buffered pread
  IMPRESS_ASSIGN_OR_RETURN(seg->file, env_->OpenFile(PathOf(id), oo));
  DataFile* p = seg.get();
  files_[id] = std::move(seg);
  return p;
}

Status ExtentFiles::MarkUsed(const Extent& e) {
  MutexLock lk(&mu_);
  auto it = files_.find(e.file);
  const std::string what =
      PathOf(e.file) + " extent [" + std::to_string(e.offset) + ", +" + std::to_string(e.length) + ")";
  if (it == files_.end()) return Status::NotFound(what + ": data file missing");
  DataFile& s = *it->second;
  if (e.length == 0 || e.offset % kIoAlign || e.length % kIoAlign || e.offset + e.length > s.end)
    return Status::Corruption(what + ": outside the file (size " + std::to_string(s.end) + ") or misaligned");
  auto nx = s.used.lower_bound(e.offset);
  if (nx != s.used.end() && nx->first < e.offset + e.length)
    return Status::Corruption(what + ": overlaps another extent");
  if (nx != s.used.begin()) {
    auto pv = std::prev(nx);
    if (pv->first + pv->second > e.offset) return Status::Corruption(what + ": overlaps another extent");
  }
  s.used[e.offset] = e.length;
  return Status::Ok();
}

void ExtentFiles::ForgetUsed(const Extent& e) {
  MutexLock lk(&mu_);
  auto it = files_.find(e.file);
  if (it != files_.end()) {
    auto u = it->second->used.find(e.offset);
    if (u != it->second->used.end() && u->second == e.length) it->second->used.erase(u);
  }
}

Status ExtentFiles::FinishRecovery() {
  MutexLock lk(&mu_);
  for (auto it = files_.begin(); it != files_.end();) {
    DataFile& s = *it->second;
    uint64_t last_end = 0, cur = 0;
    s.free.clear();
    for (auto [off, len] : s.used) {
      if (off > cur) s.free[cur] = off - cur;
      cur = off + len;
      last_end = cur;
    }
    s.used.clear();
    if (read_only_) {  // the space is only learned; the files stay as they are
      ++it;
      continue;
    }
    if (last_end == 0) {  // nothing committed lives here
      std::string path = s.file->path();
      it = files_.erase(it);
      IMPRESS_RETURN_IF_ERROR(env_->RemoveFile(path));
      continue;
    }
    if (s.end != last_end) {
      IMPRESS_RETURN_IF_ERROR(s.file->Truncate(last_end));
      s.end = last_end;
    }
    ++it;
  }
  return Status::Ok();
}

uint64_t ExtentFiles::TotalLocked() const {
  uint64_t t = 0;
  for (auto& [id, s] : files_) t += s->end;
  return t;
}

Result<Extent> ExtentFiles::Allocate(uint64_t length) {
  length = AlignUp(length);
  if (length == 0 || length > file_bytes_)
    return Status::InvalidArgument("extent of " + std::to_string(length) + " bytes does not fit a data file of " +
                                   std::to_string(file_bytes_));
  MutexLock lk(&mu_);
  for (auto& [id, s] : files_) {  // first fit in the holes
    for (auto f = s->free.begin(); f != s->free.end(); ++f) {
      if (f->second < length) continue;
      Extent e{id, f->first, length};
      uint64_t rest = f->second - length, roff = f->first + length;
      s->free.erase(f);
      if (rest) s->free[roff] = rest;
      return e;
    }
  }
  IMPRESS_RETURN_IF_ERROR(CheckRoomLocked(length));
  const uint64_t total = TotalLocked();
  if (total + length > cap_)
    return Status::ResourceExhausted("SSD budget: " + std::to_string(total) + " bytes used + " +
                                     std::to_string(length) + " would pass the cap of " + std::to_string(cap_) +
                                     " in " + dir_);
  for (auto& [id, s] : files_) {  // grow a file
    if (s->end + length <= file_bytes_) {
      Extent e{id, s->end, length};
      s->end += length;
      return e;
    }
  }
  const uint32_t id = std::max(files_.empty() ? 0u : files_.rbegin()->first, max_refused_id_) + 1;
  IMPRESS_ASSIGN_OR_RETURN(DataFile * s, GetOrCreateLocked(id));
  // The new file's directory entry must survive a crash as surely as the chunks written into it.
  Status synced = env_->SyncDir(dir_);
  if (!synced.ok()) spdlog::warn("store: {}", synced.ToString());
  Extent e{id, 0, length};
  s->end = length;
  return e;
}

void ExtentFiles::FreeLocked(const Extent& e) {
  auto it = files_.find(e.file);
  if (it == files_.end() || e.length == 0) return;
  DataFile& s = *it->second;
  uint64_t off = e.offset, len = e.length;
  auto nx = s.free.lower_bound(off);
  if (nx != s.free.end() && off + len == nx->first) {
    len += nx->second;
    nx = s.free.erase(nx);
  }
  if (nx != s.free.begin()) {
    auto pv = std::prev(nx);
    if (pv->first + pv->second == off) {
      off = pv->first;
      len += pv->second;
      s.free.erase(pv);
    }
  }
  if (off + len >= s.end) {  // tail: give the space back to the filesystem
    s.end = off;
    Status st = s.file->Truncate(off);
    if (!st.ok()) spdlog::warn("store: {}", st.ToString());
  } else {
    s.free[off] = len;
  }
}

void ExtentFiles::Free(const Extent& e) {
  MutexLock lk(&mu_);
  FreeLocked(e);
}

Status ExtentFiles::Write(const Extent& e, const void* buf) {
  File* f = file(e.file);
  if (!f) return Status::Internal("write to unknown data file " + std::to_string(e.file));
  Status s = f->WriteAt(e.offset, buf, e.length);
  NoteWriteFailure(s);
  return s;
}

Status ExtentFiles::Sync(uint32_t file_id) {
  File* f = file(file_id);
  if (!f) return Status::Internal("sync of unknown data file " + std::to_string(file_id));
  Status s = f->Sync();
  NoteWriteFailure(s);
  return s;
}

// Disk full (the Env maps ENOSPC and EDQUOT to kResourceExhausted): remembered in memory and by
// the marker file, so neither this run nor the next repeats the write before room returns.
void ExtentFiles::NoteWriteFailure(const Status& s) {
  if (s.code() != Status::Code::kResourceExhausted) return;
  {
    MutexLock lk(&mu_);
    if (disk_full_) return;
    disk_full_ = true;
  }
  spdlog::warn("store: {}; no data is written to {} until the filesystem shows free space again", s.ToString(), dir_);
  auto marker = env_->OpenFile(dir_ + "/" + kDiskFullMarker, OpenOptions{.create = true, .direct = false});
  if (!marker.ok()) spdlog::warn("store: cannot leave the disk-full marker: {}", marker.status().ToString());
}

// Growing the files after a disk-full failure: only once the filesystem shows room for `length`
// (plus slack); then the marker goes and writing resumes.
Status ExtentFiles::CheckRoomLocked(uint64_t length) {
  if (!disk_full_) return Status::Ok();
  auto free = env_->FreeSpace(dir_);
  const uint64_t want = length + kDiskFullSlack;
  if (free.ok() && *free >= want) {
    disk_full_ = false;
    (void)env_->RemoveFile(dir_ + "/" + kDiskFullMarker);
    spdlog::info("store: {} bytes free in {} again; writing resumes", *free, dir_);
    return Status::Ok();
  }
  return Status::IOError(
      "disk full: an earlier write to " + dir_ + " ran out of space and the filesystem shows " +
      (free.ok() ? std::to_string(*free) + " bytes free" : "no free-space figure (" + free.status().ToString() + ")") +
      ", less than the " + std::to_string(want) + " this write needs; not retried until space returns");
}

bool ExtentFiles::disk_full() const {
  MutexLock lk(&mu_);
  return disk_full_;
}

File* ExtentFiles::file(uint32_t file_id) {
  MutexLock lk(&mu_);
  auto it = files_.find(file_id);
  return it == files_.end() ? nullptr : it->second->file.get();
}

bool ExtentFiles::all_direct() const {
  MutexLock lk(&mu_);
  for (auto& [id, s] : files_)
    if (!s->file->direct()) return false;
  return true;
}

uint64_t ExtentFiles::disk_bytes() const {
  MutexLock lk(&mu_);
  return TotalLocked();
}

uint64_t ExtentFiles::free_bytes_inside() const {
  MutexLock lk(&mu_);
  uint64_t t = 0;
  for (auto& [id, s] : files_)
    for (auto& [o, l] : s->free) t += l;
  return t;
}

uint64_t ExtentFiles::cap() const {
  MutexLock lk(&mu_);
  return cap_;
}

void ExtentFiles::SetCap(uint64_t cap) {
  MutexLock lk(&mu_);
  cap_ = cap;
}

}  // namespace impress::store
