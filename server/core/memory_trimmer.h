// MemoryTrimmer: gives the heap's free memory back to the system once the server has been idle
// for a while after calls (--memory_trim_idle_ms).
//
//   MemoryTrimmer trimmer({.idle_after = absl::Seconds(1),
//                          .sample = [&] { return IdleTrimPolicy::Sample{...}; }});
//   ...                    // a thread samples the load and trims after each burst
//   trimmer.Stop();        // or destroy it
//
// Why: glibc's malloc keeps what it freed for reuse. Large buffers (a call's request, its result,
// gRPC's serialized reply) are mmapped at first, but freeing one raises malloc's mmap threshold to
// its size (up to 32 MiB), so later ones come from the arenas of the many threads that touch them
// (gRPC's, the workers', oneTBB's) and stay there once freed: measured on 2 cores, a server that
// starts at 20 MiB held 416-485 MiB after 5 s of 16 MiB calls at concurrency 8, idle or not
// (bench/README.md, "Memory after a burst"). malloc_trim(0) returns the free pages inside every
// arena to the system (madvise) and the main arena's free top, but not the free top of a
// per-thread arena (see LimitMallocArenas below); it costs a walk of the free chunks and, the next
// time the memory is used, page faults, which is why it runs only once the server is idle, once
// per burst.
//
// When: a thread samples the load every `poll`. IdleTrimPolicy (below) trims once nothing has
// been busy and nothing has changed for `idle_after` since the last activity, and not again until
// there is new activity: an idle server never trims, a loaded one never does while calls run.
#ifndef TENSOROPS_SERVER_CORE_MEMORY_TRIMMER_H_
#define TENSOROPS_SERVER_CORE_MEMORY_TRIMMER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensorops {

// IdleTrimPolicy decides when to trim from samples of the load, apart from threads and clocks so
// that tests can drive it. Not thread-safe.
class IdleTrimPolicy {
 public:
  // Sample is the server's load at one moment.
  struct Sample {
    // Calls in the server now (admitted and not yet done): never idle while > 0.
    int64_t busy = 0;
    // Counts that change with activity: calls admitted so far, and the tensor store's bytes (an
    // upload, a stored result, a delete). Any change between two samples is activity.
    int64_t calls_admitted = 0;
    int64_t store_bytes = 0;

    bool operator==(const Sample&) const = default;
  };

  // `idle_after` > 0: how long after the last activity the trim runs.
  explicit IdleTrimPolicy(absl::Duration idle_after) : idle_after_(idle_after) {}

  // Observe records `sample`, taken at `now` (non-decreasing from call to call), and returns true
  // when the trim should run now: there was activity since the last trim, and none, and nothing
  // busy, for at least `idle_after`. Activity is a sample with calls busy, or one that differs
  // from the one before (the first from all zeros, a fresh server's counts).
  bool Observe(absl::Time now, const Sample& sample);

 private:
  const absl::Duration idle_after_;
  Sample last_;
  // When activity was last seen; `pending` while it has not been trimmed after.
  absl::Time last_active_;
  bool pending_ = false;
};

// TrimOutcome is what one trim did, for its log line.
struct TrimOutcome {
  // malloc_trim's answer: some memory was given back.
  bool released = false;
  // The process's resident bytes before and after (0 where /proc cannot be read).
  int64_t resident_before = 0;
  int64_t resident_after = 0;
  absl::Duration took;
};

// ReleaseFreeMemory trims the heap now (malloc_trim(0) under glibc; elsewhere it does nothing and
// says so) and reports what it did.
TrimOutcome ReleaseFreeMemory();

// ResidentBytes is the process's resident set size from /proc/self/statm; 0 if unreadable.
int64_t ResidentBytes();

// LimitMallocArenas makes glibc's malloc use one arena (mallopt(M_ARENA_MAX, 1)) unless the
// environment already chooses (MALLOC_ARENA_MAX, or GLIBC_TUNABLES naming
// glibc.malloc.arena_max). Call it first thing in main, before any thread starts; the server
// binary and the service benchmark do. Why: malloc_trim gives back the free pages inside every
// arena, but the free top of a per-thread arena only when a free there finds it past malloc's
// trim threshold, which large calls raise to 32 MiB or more; with glibc's default of up to 8
// arenas per core, those tops kept ~60 MB on 2 cores after a trim (bench/README.md, "Memory
// after a burst"). One arena is trimmed whole. Small allocations still come from each thread's
// cache without the arena's lock. Does nothing without glibc.
void LimitMallocArenas();

// MallocArenas describes the arena setting for the start-up line: "1", "MALLOC_ARENA_MAX=4",
// "glibc's default" (LimitMallocArenas was not called), "n/a" without glibc.
std::string MallocArenas();

struct MemoryTrimmerOptions {
  // How long the load must be idle and unchanged after activity before a trim: > 0.
  absl::Duration idle_after = absl::Seconds(1);
  // How often the load is sampled: > 0.
  absl::Duration poll = absl::Milliseconds(250);
  // Reads the load; required. Called on the trimmer's thread only.
  std::function<IdleTrimPolicy::Sample()> sample;
  // Trims; by default ReleaseFreeMemory. Called on the trimmer's thread only.
  std::function<TrimOutcome()> trim = ReleaseFreeMemory;
};

// MemoryTrimmer owns the sampling thread, started by the constructor. Each trim is logged at
// debug level. Not copyable; the destructor stops it.
class MemoryTrimmer {
 public:
  explicit MemoryTrimmer(MemoryTrimmerOptions options);
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;
  ~MemoryTrimmer();

  // Stop ends the thread (at once, without a last trim). Idempotent.
  void Stop();

  // trims: how many trims have run.
  int64_t trims() const;

 private:
  void Loop();

  const MemoryTrimmerOptions options_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t trims_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_MEMORY_TRIMMER_H_
