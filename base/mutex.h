// Mutex, MutexLock, CondVar: std::mutex and std::condition_variable with Clang thread-safety
// annotations (base/thread-annotations.h), so that `-Wthread-safety` can check the members a
// class marks GUARDED_BY(mu_) (LevelDB's port::Mutex / MutexLock / port::CondVar).
//
// Thread contract: a Mutex and a CondVar may be used from any thread (that is their job). A
// MutexLock belongs to the thread that made it. CondVar waits take the Mutex they wait under,
// which the caller holds; waits may wake spuriously, so callers wait in a loop on their condition
// (a predicate lambda would hide the guarded reads from the check).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread-annotations.h"

namespace impress {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the check the caller holds the lock (where it cannot see it); checks nothing at run time.
  void AssertHeld() ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to the end of the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` while asleep; holds it again on return.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();  // the caller still owns the lock
  }
  // The same, giving up at `deadline`; false when the deadline passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lk, deadline) == std::cv_status::no_timeout;
    lk.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace impress
