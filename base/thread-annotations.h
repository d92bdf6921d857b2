// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
//
// Owns nothing; a header of macros. With clang, `-Wthread-safety` checks that every member marked
// GUARDED_BY(mu) is touched only with `mu` held and every function marked REQUIRES(mu) is called
// with it held (scripts/thread-safety.sh runs that check over every production folder). With any other
// compiler the macros expand to nothing. Use them with the annotated `Mutex` of base/mutex.h:
// std::mutex itself carries no annotations, so a lock taken through it is invisible to the check.
#pragma once

#if defined(__clang__)
#define IMPRESS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define IMPRESS_THREAD_ANNOTATION(x)
#endif

// A class that is a lock (Mutex) or a scoped holder of one (MutexLock).
#define CAPABILITY(x) IMPRESS_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY IMPRESS_THREAD_ANNOTATION(scoped_lockable)

// Data members: read or written only with the lock held (PT_: the pointee, not the pointer).
#define GUARDED_BY(x) IMPRESS_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) IMPRESS_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order between two locks (documentation; checked only by -Wthread-safety-beta).
#define ACQUIRED_BEFORE(...) IMPRESS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) IMPRESS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// Functions: the caller must hold (REQUIRES) or must not hold (EXCLUDES) the lock.
#define REQUIRES(...) IMPRESS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) IMPRESS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) IMPRESS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Functions that take or drop a lock and return with it so.
#define ACQUIRE(...) IMPRESS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) IMPRESS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) IMPRESS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) IMPRESS_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) IMPRESS_THREAD_ANNOTATION(lock_returned(x))

// Opts one function out of the check; say in a comment why it is safe.
#define NO_THREAD_SAFETY_ANALYSIS IMPRESS_THREAD_ANNOTATION(no_thread_safety_analysis)
