#include "store/uring-io.h"

#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"

namespace impress::store {

namespace {

using Clock = std::chrono::steady_clock;

// Bookkeeping shared by both engines: a ticket completes when its last op completes, after the
// group calls its ops made due. Requires external synchronization: each engine keeps its table
// GUARDED_BY its mutex.
struct Batch {
  size_t n_left = 0;
  Status status;  // first error
  ReadTiming timing;
  ReadEngine::GroupDone on_group;
  std::vector<uint32_t> group_left;  // per group: ops not yet completed
  std::vector<uint8_t> group_failed;
};

class TicketTable {
 public:
  ReadEngine::Ticket NewLocked(const std::vector<ReadOp>& ops, ReadEngine::GroupDone on_group) {
    ReadEngine::Ticket t = ++next_;
    Batch& b = batches_[t];
    b.n_left = ops.size();
    b.timing.submitted = b.timing.completed = Clock::now();
    if (on_group) {
      for (const ReadOp& op : ops) {
        if (op.group == ReadOp::kNoGroup) continue;
        if (op.group >= b.group_left.size()) b.group_left.resize(size_t(op.group) + 1, 0);
        ++b.group_left[op.group];
      }
      b.group_failed.assign(b.group_left.size(), 0);
      b.on_group = std::move(on_group);
    }
    return t;
  }
  // One op of ticket t finished (st: its outcome) at `now`. Returns the call now due when it was
  // the last op of a group that read whole: the caller runs it unlocked, then FinishLocked. Else
  // the op is finished here, and *done says whether the batch completed.
  const ReadEngine::GroupDone* CompleteLocked(ReadEngine::Ticket t, uint32_t group, const Status& st,
                                              Clock::time_point now, bool* done) {
    Batch& b = batches_[t];
    if (!st.ok() && b.status.ok()) b.status = st;
    b.timing.completed = now;
    *done = false;
    if (b.on_group && group < b.group_left.size()) {
      if (!st.ok()) b.group_failed[group] = 1;
      if (--b.group_left[group] == 0 && !b.group_failed[group]) return &b.on_group;
    }
    *done = --b.n_left == 0;
    return nullptr;
  }
  // The op whose group call ran; true when the batch completed.
  bool FinishLocked(ReadEngine::Ticket t) { return --batches_[t].n_left == 0; }
  bool KnownLocked(ReadEngine::Ticket t) const { return batches_.count(t) != 0; }
  bool DoneLocked(ReadEngine::Ticket t) const { return batches_.at(t).n_left == 0; }
  Status TakeLocked(ReadEngine::Ticket t, ReadTiming* timing) {
    auto it = batches_.find(t);
    Status st = it->second.status;
    if (timing) *timing = it->second.timing;
    batches_.erase(it);
    return st;
  }

 private:
  ReadEngine::Ticket next_ = 0;
  std::unordered_map<ReadEngine::Ticket, Batch> batches_;  // nodes stay put: a due call's address too
};

// A group call made due, to run without the engine's lock.
struct DueCall {
  ReadEngine::Ticket ticket;
  uint32_t group;
  const ReadEngine::GroupDone* fn;
};

// What both engines share: the queue depth, the mutex, the ticket table under it and Wait on it.
// An engine completes ops in its table under mu_ and signals done_cv_ when a batch finished.
class TicketedEngine : public ReadEngine {
 public:
  using ReadEngine::Wait;
  Status Wait(Ticket t, ReadTiming* timing) final {
    MutexLock lk(&mu_);
    if (!table_.KnownLocked(t))
      return Status::InvalidArgument("read ticket " + std::to_string(t) + " unknown or already waited");
    while (!table_.DoneLocked(t)) done_cv_.Wait(&mu_);
    return table_.TakeLocked(t, timing);
  }
  bool Finished(Ticket t) final {
    MutexLock lk(&mu_);
    return !table_.KnownLocked(t) || table_.DoneLocked(t);
  }
  int queue_depth() const final { return qd_; }

 protected:
  explicit TicketedEngine(int queue_depth) : qd_(queue_depth) {}

  const int qd_;
  Mutex mu_;
  CondVar done_cv_;  // waits under mu_
  bool stop_ GUARDED_BY(mu_) = false;
  TicketTable table_ GUARDED_BY(mu_);
};

// ---------------------------------------------------------------- pread pool
class PreadEngine final : public TicketedEngine {
 public:
  explicit PreadEngine(int queue_depth) : TicketedEngine(queue_depth) {
    int n = std::max(1, std::min(queue_depth, 4));
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~PreadEngine() override {
    {
      MutexLock lk(&mu_);
      stop_ = true;
    }
    work_cv_.SignalAll();
    for (auto& w : workers_) w.join();
  }
  using ReadEngine::Submit;
  Ticket Submit(std::vector<ReadOp> ops, GroupDone on_group) override {
    MutexLock lk(&mu_);
    Ticket t = table_.NewLocked(ops, std::move(on_group));
    for (auto& op : ops) queue_.push_back({t, op});
    work_cv_.SignalAll();
    return t;
  }
  const char* name() const override { return "pread"; }

 private:
  void Loop() EXCLUDES(mu_) {
    MutexLock lk(&mu_);
    for (;;) {
      while (!stop_ && queue_.empty()) work_cv_.Wait(&mu_);
      if (queue_.empty()) return;
      auto [t, op] = queue_.front();
      queue_.pop_front();
      mu_.Unlock();  // the read runs unlocked; other workers take the next ops meanwhile
      size_t n_read = 0;
      Status st = op.file->ReadAt(op.offset, op.buf, op.length, &n_read);
      if (st.ok() && n_read != op.length)
        st =
            Status::Corruption(op.file->path() + ": short read at offset " + std::to_string(op.offset) + " (" +
                               std::to_string(n_read) + " of " + std::to_string(op.length) + " bytes): file truncated");
      const Clock::time_point now = Clock::now();
      mu_.Lock();
      bool done = false;
      if (const GroupDone* fn = table_.CompleteLocked(t, op.group, st, now, &done)) {
        mu_.Unlock();
        (*fn)(op.group);
        mu_.Lock();
        done = table_.FinishLocked(t);
      }
      if (done) done_cv_.SignalAll();
    }
  }

  CondVar work_cv_;  // waits under mu_
  std::deque<std::pair<Ticket, ReadOp>> queue_ GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

// ---------------------------------------------------------------- io_uring
// One thread owns the ring: it submits every read and reaps every completion. A caller only
// queues its reads and wakes that thread through an eventfd (one write), so the kernel's work for
// each read (pinning the buffer's pages, building and queueing the bio: several microseconds a
// read on a virtual disk, a millisecond for a layer's selection) runs beside the caller's compute
// instead of in it, and no caller ever waits for the ring while a large batch goes in.
class UringEngine final : public TicketedEngine {
 public:
  static std::unique_ptr<UringEngine> Make(int queue_depth, std::string* err) {
    auto e = std::unique_ptr<UringEngine>(new UringEngine(queue_depth));
    // One entry more than the depth: the read of the wake-up counter always finds a slot.
    unsigned entries = 1;
    while (entries < unsigned(queue_depth) + 1) entries <<= 1;
    int r = io_uring_queue_init(entries, &e->ring_, 0);
    if (r < 0) {
      *err = std::string("io_uring_queue_init: ") + std::strerror(-r);
      return nullptr;
    }
    e->ring_ok_ = true;
    e->wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (e->wake_fd_ < 0) {
      *err = std::string("eventfd: ") + std::strerror(errno);
      return nullptr;
    }
    e->reaper_ = std::thread([p = e.get()] { p->RingLoop(); });
    return e;
  }
  ~UringEngine() override {
    if (ring_ok_ && reaper_.joinable()) {
      // Reads still in flight write into caller buffers: the ring's thread drains them, then
      // stops; reads not yet submitted are cancelled here.
      {
        MutexLock lk(&mu_);
        stop_ = true;
        for (Op* o : pending_) {
          bool done = false;
          table_.CompleteLocked(o->ticket, ReadOp::kNoGroup, Status::Cancelled("store reader closed"), Clock::now(),
                                &done);
          delete o;
        }
        pending_.clear();
      }
      Wake();
      reaper_.join();
    }
    if (ring_ok_) io_uring_queue_exit(&ring_);  // cancels the wake-up read
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  using ReadEngine::Submit;
  Ticket Submit(std::vector<ReadOp> ops, GroupDone on_group) override {
    Ticket t;
    {
      MutexLock lk(&mu_);
      t = table_.NewLocked(ops, std::move(on_group));
      for (auto& op : ops) pending_.push_back(new Op{t, op, 0});
    }
    if (!ops.empty()) Wake();
    return t;
  }
  const char* name() const override { return "io_uring"; }

 private:
  struct Op {
    Ticket ticket;
    ReadOp op;
    uint32_t done;  // bytes already read (short reads resubmit the rest)
  };

  explicit UringEngine(int qd) : TicketedEngine(qd), cqes_(size_t(qd) + 2) {}

  void Wake() {
    const uint64_t one = 1;
    while (write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

  // The ring's thread: submits what callers queued (while fewer than qd_ reads are in flight),
  // sleeps in the kernel until reads complete or a caller wakes it, then (under mu_) completes
  // their tickets at the time it saw them and requeues short reads. Only this thread touches the
  // ring, cqes_, due_ and wake_count_.
  void RingLoop() EXCLUDES(mu_) {
    ArmWake();
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR || r == -EAGAIN) continue;
      if (r < 0) {
        spdlog::error("store: io_uring wait failed: {}", std::strerror(-r));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes_.data(), unsigned(cqes_.size()));
      const Clock::time_point now = Clock::now();
      bool woken = false, any_done = false;
      due_.clear();
      {
        MutexLock lk(&mu_);
        for (unsigned i = 0; i < n; ++i) {
          if (io_uring_cqe_get_data(cqes_[i]) == &wake_count_) woken = true;
          else any_done |= CompleteLocked(cqes_[i], now);
        }
      }
      io_uring_cq_advance(&ring_, n);
      SubmitQueued();  // the disk keeps busy while the group calls run
      for (const DueCall& d : due_) (*d.fn)(d.group);
      {
        MutexLock lk(&mu_);
        for (const DueCall& d : due_) any_done |= table_.FinishLocked(d.ticket);
        if (any_done) done_cv_.SignalAll();
        if (stop_ && in_flight_ == 0) return;
      }
      if (woken) ArmWake();
    }
  }

  // A read of the wake-up counter: it completes when a caller writes it.
  void ArmWake() {
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_read(sqe, wake_fd_, &wake_count_, sizeof wake_count_, 0);
    io_uring_sqe_set_data(sqe, &wake_count_);
    SubmitRing();
  }

  // Moves queued reads into the ring while fewer than qd_ are in flight; the kernel's work for
  // them runs here, unlocked.
  void SubmitQueued() EXCLUDES(mu_) {
    batch_.clear();
    {
      MutexLock lk(&mu_);
      while (!pending_.empty() && in_flight_ < qd_) {
        batch_.push_back(pending_.front());
        pending_.pop_front();
        ++in_flight_;
      }
    }
    for (Op* o : batch_) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_read(sqe, o->op.file->fd(), static_cast<uint8_t*>(o->op.buf) + o->done, o->op.length - o->done,
                         o->op.offset + o->done);
      io_uring_sqe_set_data(sqe, o);
    }
    if (!batch_.empty()) SubmitRing();
  }

  // A free submission entry (the queue is submitted whole each time, so one is free unless this
  // batch filled it: then that part goes in first).
  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (!sqe) {
      SubmitRing();
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }
  void SubmitRing() {
    for (;;) {
      int r = io_uring_submit(&ring_);
      if (r == -EINTR || r == -EAGAIN || r == -EBUSY) continue;
      break;
    }
  }

  // One completion; true when it finished a batch (successfully or not). A group call it makes
  // due goes to due_.
  bool CompleteLocked(io_uring_cqe* cqe, Clock::time_point now) REQUIRES(mu_) {
    Op* o = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    --in_flight_;
    Status st;
    if (res == -EAGAIN || res == -EINTR) {
      pending_.push_front(o);
      return false;
    }
    if (res < 0) {
      st = Status::IOError(o->op.file->path() + ": io_uring read at offset " + std::to_string(o->op.offset) + ": " +
                           std::strerror(-res));
    } else if (res == 0) {
      st = Status::Corruption(o->op.file->path() + ": short read at offset " + std::to_string(o->op.offset) + " (" +
                              std::to_string(o->done) + " of " + std::to_string(o->op.length) +
                              " bytes): file truncated");
    } else {
      o->done += uint32_t(res);
      if (o->done < o->op.length) {  // short read: resubmit the remainder
        pending_.push_front(o);
        return false;
      }
    }
    bool done = false;
    if (const GroupDone* fn = table_.CompleteLocked(o->ticket, o->op.group, st, now, &done))
      due_.push_back({o->ticket, o->op.group, fn});
    delete o;
    return done;
  }

  io_uring ring_{};  // the ring's thread's alone (after Make)
  bool ring_ok_ = false;
  int wake_fd_ = -1;
  uint64_t wake_count_ = 0;  // the wake-up read's target; its address tags that read
  int in_flight_ GUARDED_BY(mu_) = 0;
  std::deque<Op*> pending_ GUARDED_BY(mu_);
  std::vector<io_uring_cqe*> cqes_;  // the ring's thread's alone
  std::vector<DueCall> due_;         // likewise
  std::vector<Op*> batch_;           // likewise
  std::thread reaper_;
};

}  // namespace

namespace {
// Which engine reads the chunks matters to every measurement: say it, once per process and kind.
void AnnounceEngine(const ReadEngine& e, const std::string& note) {
  static std::atomic<bool> said_uring{false}, said_pread{false};
  std::atomic<bool>& said = std::string_view(e.name()) == "io_uring" ? said_uring : said_pread;
  if (said.exchange(true)) return;
  if (note.empty()) spdlog::info("store: chunk reads through {} (queue depth {})", e.name(), e.queue_depth());
  else spdlog::info("store: chunk reads through {} (queue depth {}): {}", e.name(), e.queue_depth(), note);
}
}  // namespace

std::unique_ptr<ReadEngine> ReadEngine::Create(int queue_depth, bool force_pread, std::string* note) {
  note->clear();
  queue_depth = std::max(1, std::min(queue_depth, 1024));
  const char* env = std::getenv("IMPRESS_STORE_FORCE_PREAD");
  if (env && env[0] && env[0] != '0') force_pread = true;
  std::unique_ptr<ReadEngine> e;
  if (force_pread) {
    *note = "io_uring disabled by request (option or IMPRESS_STORE_FORCE_PREAD); using pread";
    e = std::make_unique<PreadEngine>(queue_depth);
  } else {
    std::string err;
    e = UringEngine::Make(queue_depth, &err);
    if (!e) {
      *note = "io_uring refused (" + err + "); falling back to pread";
      e = std::make_unique<PreadEngine>(queue_depth);
    }
  }
  AnnounceEngine(*e, *note);
  return e;
}

}  // namespace impress::store
