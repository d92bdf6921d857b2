// SigbusGuard: see sigbus-guard.h.
#include "engine/model/sigbus-guard.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace impress::sigbus_guard {

namespace {

static_assert(std::atomic<uintptr_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "the SIGBUS handler reads the table with lock-free atomics only");

// One guarded range. A registration owns a slot from claiming it until Unregister; begin/end are
// published under a sequence count (odd while being written), so the handler, which may run on any
// thread while another registers, never matches a half-written range.
struct Slot {
  std::atomic<bool> claimed{false};
  std::atomic<uint32_t> seq{0};
  std::atomic<uintptr_t> begin{0}, end{0};  // [begin, end); 0, 0 when free
  std::atomic<bool> poisoned{false};
};

// Constant-initialized (atomics have constexpr constructors): ready before any static constructor
// of another file could map a model.
Slot g_slots[kMaxRanges];
struct sigaction g_previous;  // written once, before the handler is installed
uintptr_t g_page = 4096;      // sysconf is not async-signal-safe; read once at install
std::once_flag g_install_once;

// The action before ours, for a SIGBUS that is not a fault in a guarded range.
void Chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous;
  const bool sent = info == nullptr || info->si_code <= 0;  // kill, raise, sigqueue: not a fault
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if ((prev.sa_flags & SA_SIGINFO) == 0 && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  if (prev.sa_handler == SIG_IGN && sent) return;  // ignored, as it was before us
  // The default action (a fault cannot be ignored either: the kernel kills for it). Restored for
  // good, as the process ends: a fault returns to the faulting instruction, which faults again and
  // dies where it would have without us; a sent signal is re-raised and delivered on return.
  ::signal(SIGBUS, SIG_DFL);
  if (sent) ::raise(sig);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // si_code > 0: raised by the kernel for this thread's access (BUS_ADRERR past the end of a file).
  if (info != nullptr && info->si_code > 0) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (Slot& s : g_slots) {
      const uint32_t seq = s.seq.load(std::memory_order_acquire);
      if ((seq & 1u) != 0) continue;  // being (un)registered: never the range this thread is reading
      const uintptr_t begin = s.begin.load(std::memory_order_relaxed);
      const uintptr_t end = s.end.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != seq || addr < begin || addr >= end) continue;
      // Zero pages over the rest of the range: the file is shorter than the mapping from here on
      // (or soon will be), and one replacement saves a signal per page. MAP_FIXED replaces the
      // file pages atomically; the owner's munmap of the whole range still releases them.
      const uintptr_t page = addr & ~(g_page - 1);
      void* p =
          ::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break;  // cannot repair it: behave as if unguarded
      s.poisoned.store(true, std::memory_order_relaxed);
      errno = saved_errno;
      return;  // the faulting read runs again and reads zeros
    }
  }
  errno = saved_errno;
  Chain(sig, info, context);
}

void Install() {
  g_page = uintptr_t(::sysconf(_SC_PAGESIZE));
  struct sigaction act;
  std::memset(&act, 0, sizeof(act));
  act.sa_sigaction = OnSigbus;
  act.sa_flags = SA_SIGINFO | SA_ONSTACK;  // an alternate stack, where the thread has one
  sigemptyset(&act.sa_mask);
  if (::sigaction(SIGBUS, &act, &g_previous) != 0) {
    spdlog::warn("cannot install the SIGBUS handler ({}): a model file truncated while in use will end the program",
                 std::strerror(errno));
  }
}

}  // namespace

int Register(const void* begin, size_t size) {
  std::call_once(g_install_once, Install);
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin);
  for (int i = 0; i < kMaxRanges; ++i) {
    Slot& s = g_slots[i];
    bool expected = false;
    if (!s.claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    s.poisoned.store(false, std::memory_order_relaxed);
    s.seq.fetch_add(1, std::memory_order_relaxed);  // odd: being written
    std::atomic_thread_fence(std::memory_order_release);
    s.begin.store(b, std::memory_order_relaxed);
    s.end.store(b + size, std::memory_order_relaxed);
    s.seq.fetch_add(1, std::memory_order_release);  // even: published
    return i;
  }
  spdlog::warn("{} model file mappings are guarded already: a file truncated while in use may end the program",
               kMaxRanges);
  return -1;
}

void Unregister(int slot) {
  if (slot < 0 || slot >= kMaxRanges) return;
  Slot& s = g_slots[slot];
  s.seq.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.begin.store(0, std::memory_order_relaxed);
  s.end.store(0, std::memory_order_relaxed);
  s.seq.fetch_add(1, std::memory_order_release);
  s.claimed.store(false, std::memory_order_release);
}

bool Poisoned(int slot) {
  return slot >= 0 && slot < kMaxRanges && g_slots[slot].poisoned.load(std::memory_order_relaxed);
}

}  // namespace impress::sigbus_guard
