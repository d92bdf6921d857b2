// SigbusGuard: keeps a model file that shrinks on disk while it is mapped from killing the process.
//
// The weights are read in place from a MAP_PRIVATE mapping of the file (mapped-file.h). When
// another program truncates the file after it was mapped (a re-download or an overwrite while the
// app runs), a read of a page past the new end raises SIGBUS, whose default action kills the
// process. The guard keeps a process-wide table of the mapped ranges and a SIGBUS handler: a fault
// inside a registered range maps anonymous zero pages from the faulting page to the end of that
// range (so the faulting read, retried, reads zeros), marks the range poisoned and returns. The
// owner asks Poisoned() after its work and turns it into an error, so nothing computed from those
// zeros is used. Any other SIGBUS (a fault outside every range, or one sent with kill/raise) goes to
// the action that was installed before the guard's: its handler is called, or the default action
// runs as if the guard were not there (the fault repeats and kills the process, with a core dump).
//
// The handler is installed once, by the first Register(), keeping the previous action. It reads
// the table with lock-free atomics only and calls only mmap (a plain system call on Linux), so it
// is safe in a signal context. Internal to engine/model. Thread-safe: Register, Unregister and
// Poisoned may be called from any thread.
#pragma once

#include <cstddef>

namespace impress::sigbus_guard {

// The most ranges guarded at once; a range registered beyond it is left unguarded (a SIGBUS in it
// kills the process as before) and a warning says so.
inline constexpr int kMaxRanges = 256;

// Guards [begin, begin + size), a page-aligned read-only file mapping that stays mapped until
// Unregister. Installs the handler on the first call. Returns the slot, or -1 when the table is
// full (the range is then unguarded).
int Register(const void* begin, size_t size);
// Stops guarding `slot` (-1: no-op). Call it before unmapping the range, so a later mapping at the
// same addresses is never mistaken for it.
void Unregister(int slot);
// Whether a SIGBUS inside the slot's range replaced some of its pages with zeros since Register.
// A relaxed atomic load; false for -1.
bool Poisoned(int slot);

}  // namespace impress::sigbus_guard
