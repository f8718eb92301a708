// MemoryBudget: the bytes that op calls hold from admission until they are done, counted against
// --max_memory_bytes together with the tensor store's bytes.
//
//   MemoryBudget budget(/*limit_bytes=*/int64_t{1} << 30, [&store] { return store.used_bytes(); });
//   absl::StatusOr<MemoryBudget::Reservation> held =
//       budget.Reserve("gather", request_bytes, result_bytes);
//   if (!held.ok()) return held.status();  // RESOURCE_EXHAUSTED, marked Rejection::kMemory
//   ...                                     // the call runs and its reply is sent
//   // destroying (or resetting) `held` gives its bytes back
//
// What a call counts is what it is known to hold, not a measure of the heap: its request message
// (received and parsed; the kernels read its tensors in place) and the result it planned to put
// in the response (PreparedOp::result_bytes). gRPC's serialized copy of the reply, made while it
// is sent, and the kernels' small temporaries are not counted: leave headroom for them. The
// store's bytes (stored tensors, uploads in flight, replaced values still read) count as they
// are at each admission; the store's own limit, --store_memory_bytes, governs uploads.
//
// The decision is exact and ordered: Reserve admits a call only if the calls' bytes, the store's
// and its own stay within the limit, under one lock, so a test knows which call passes. A limit
// of 0 admits everything and still counts (the trimmer reads the counts: memory_trimmer.h).
#ifndef TENSOROPS_SERVER_CORE_MEMORY_BUDGET_H_
#define TENSOROPS_SERVER_CORE_MEMORY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tensorops {

// MemoryBudget is thread-safe. Not copyable; it must outlive its reservations.
class MemoryBudget {
 public:
  // Reservation holds one call's bytes until it is destroyed or Release()d. Movable.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }

    // Release gives the bytes back now (once; later calls do nothing).
    void Release();
    int64_t bytes() const { return bytes_; }

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}

    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // `limit_bytes` >= 0 (0 = no limit). `other_bytes`, when set, is memory held outside calls
  // that counts against the limit too (the tensor store's used_bytes); it is read at each
  // Reserve under a limit, so it must be cheap and thread-safe.
  explicit MemoryBudget(int64_t limit_bytes, std::function<int64_t()> other_bytes = nullptr);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserve holds `request_bytes` + `result_bytes` for one call of `op`, or refuses it with
  // RESOURCE_EXHAUSTED (marked Rejection::kMemory) naming `op`, --max_memory_bytes, the bytes in
  // use (calls' and the store's) and the call's bytes; a call larger than the limit on its own
  // is told so, since retrying cannot help it.
  absl::StatusOr<Reservation> Reserve(std::string_view op, int64_t request_bytes,
                                      int64_t result_bytes);

  int64_t limit_bytes() const { return limit_bytes_; }
  // call_bytes: what the calls holding a reservation hold now; calls: how many they are.
  int64_t call_bytes() const;
  int64_t calls() const;
  // reservations: every reservation ever made; it grows with every admitted call (activity).
  int64_t reservations() const;

 private:
  void Give(int64_t bytes);

  const int64_t limit_bytes_;
  const std::function<int64_t()> other_bytes_;
  mutable absl::Mutex mu_;
  int64_t call_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reservations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_MEMORY_BUDGET_H_
