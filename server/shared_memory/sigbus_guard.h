// SigbusGuard: a client's shared-memory object that shrinks under a mapping of it must not end
// the server. A mapping's pages past the object's new end raise SIGBUS when touched, on whatever
// thread touches them (a kernel's worker, the CUDA driver copying to the device), where no
// error can be returned. So the server keeps a table of the mappings it guards, and its SIGBUS
// handler, for a fault inside one, maps anonymous zero pages over the whole mapping and marks it
// faulted: the access that faulted is repeated on the new pages and goes on, and the call that
// used the mapping asks Faulted() when it is done and fails instead of returning what it read.
// (Wayland compositors guard the clients' wl_shm pools the same way.) A SIGBUS anywhere else is
// passed on to the handler that was installed before, or ends the process as it would have.
//
//   TENSOROPS_ASSIGN_OR_RETURN(SigbusGuard guard, SigbusGuard::Guard(base, bytes));
//   ... read and write [base, base + bytes) from any thread ...
//   if (guard.Faulted()) return FailedPrecondition("the object shrank");
#ifndef TENSOROPS_SERVER_SHARED_MEMORY_SIGBUS_GUARD_H_
#define TENSOROPS_SERVER_SHARED_MEMORY_SIGBUS_GUARD_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace tensorops {

class SigbusGuard {
 public:
  // The most mappings guarded at once, in the whole process.
  static constexpr int kMaxGuarded = 4096;

  // Guard starts guarding the mapping [base, base + bytes), which must be page-aligned and
  // stay mapped until the guard is destroyed (installing the handler the first time).
  // RESOURCE_EXHAUSTED when kMaxGuarded mappings are guarded already.
  static absl::StatusOr<SigbusGuard> Guard(void* base, size_t bytes);

  SigbusGuard(SigbusGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  SigbusGuard& operator=(SigbusGuard&& other) noexcept;
  SigbusGuard(const SigbusGuard&) = delete;
  SigbusGuard& operator=(const SigbusGuard&) = delete;
  // Stops guarding (before the caller unmaps the range).
  ~SigbusGuard();

  // Faulted is whether an access to the mapping raised SIGBUS since Guard: its contents were
  // then replaced by zero pages, and it no longer shows the client's object.
  bool Faulted() const;

 private:
  explicit SigbusGuard(int slot) : slot_(slot) {}
  int slot_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_SHARED_MEMORY_SIGBUS_GUARD_H_
