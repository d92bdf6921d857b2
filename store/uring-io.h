// ReadEngine: batched asynchronous reads for the store (one layer's chunk reads go in one batch).
// A batch's ops may form groups (a chunk's runs) that the caller hears of as each completes.
//
// Submit() queues a batch and returns a ticket at once; the reads run while the caller computes;
// Wait(ticket) blocks until every read of the batch finished and returns the first error (and,
// when asked, when the batch was submitted and when its last read completed). Two
// implementations: io_uring (liburing; up to queue_depth reads in flight; a completion thread
// reaps them as they finish and refills the queue at once, so a batch larger than the depth keeps
// the disk busy while the caller computes; short reads and -EAGAIN/-EINTR resubmitted) and a
// pread worker pool used when io_uring is refused (seccomp, old kernel), when a file is not opened
// with O_DIRECT, or when forced (option or env IMPRESS_STORE_FORCE_PREAD=1). Internally
// synchronized: any thread may Submit and Wait; each ticket is waited exactly once. Buffers must
// stay alive until Wait returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/env.h"

namespace impress::store {

struct ReadOp {
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  File* file = nullptr;       // read through file->fd() (io_uring) or file->ReadAt (pread)
  uint64_t offset = 0;        // 4 KiB-aligned when file->direct()
  uint32_t length = 0;        // 4 KiB multiple when file->direct()
  void* buf = nullptr;        // 4 KiB-aligned when file->direct()
  uint32_t group = kNoGroup;  // with Submit's on_group: the ops that make one unit (ids < the op count)
};

// When a batch was handed to the engine and when its last read completed (an empty batch
// completes when submitted).
struct ReadTiming {
  std::chrono::steady_clock::time_point submitted{}, completed{};
  double InFlightMs() const { return std::chrono::duration<double, std::milli>(completed - submitted).count(); }
};

class ReadEngine {
 public:
  using Ticket = uint64_t;
  virtual ~ReadEngine() = default;

  // Makes an engine. io_uring unless force_pread or its setup fails; *note receives a one-line
  // explanation when it fell back (empty otherwise). Logs (info, once per process and engine
  // kind) which engine reads, so every test and benchmark output names it.
  static std::unique_ptr<ReadEngine> Create(int queue_depth, bool force_pread, std::string* note);

  // on_group(g), when given, runs on a completion thread as soon as every op of group g has read all
  // its bytes (never for a group with a failed op), so a caller can use a unit's bytes while the
  // rest of the batch is in flight; the batch completes only after its calls returned. Calls for
  // different groups may run at once.
  using GroupDone = std::function<void(uint32_t group)>;
  virtual Ticket Submit(std::vector<ReadOp> ops, GroupDone on_group) = 0;
  Ticket Submit(std::vector<ReadOp> ops) { return Submit(std::move(ops), nullptr); }
  Status Wait(Ticket t) { return Wait(t, nullptr); }
  // The same; *timing (when given) receives the batch's submit and completion times.
  virtual Status Wait(Ticket t, ReadTiming* timing) = 0;
  // True once every op of the batch completed and its group calls returned (or the ticket is not
  // known: already waited); does not wait.
  virtual bool Finished(Ticket t) = 0;
  virtual const char* name() const = 0;  // "io_uring" or "pread"
  virtual int queue_depth() const = 0;
};

}  // namespace impress::store
