#include "server/shared_memory/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace tensorops {
namespace {

// One guarded mapping. The handler reads the table without a lock (a signal handler may take
// none), so a slot's range is a seqlock: `sequence` is odd while the range changes (under
// SlotsMutex()), and the handler uses a range only when it read the same even sequence before and
// after it. Otherwise, a fault elsewhere while a slot is given up or reused could pair the old
// `end` with the new `begin` and map zero pages over memory that is not the slot's.
struct Slot {
  std::atomic<uint32_t> sequence{0};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
  bool used = false;  // guarded by SlotsMutex()
};

// SetRange changes `slot`'s range, as a seqlock's writer (SlotsMutex() held).
void SetRange(Slot& slot, uintptr_t begin, uintptr_t end) {
  slot.sequence.fetch_add(1, std::memory_order_relaxed);  // odd: changing
  std::atomic_thread_fence(std::memory_order_release);
  slot.begin.store(begin, std::memory_order_relaxed);
  slot.end.store(end, std::memory_order_relaxed);
  slot.sequence.fetch_add(1, std::memory_order_release);  // even: stable
}

// RangeOf reads `slot`'s range as a seqlock's reader: false when it is empty or changing.
bool RangeOf(const Slot& slot, uintptr_t* begin, uintptr_t* end) {
  const uint32_t before = slot.sequence.load(std::memory_order_acquire);
  if (before % 2 != 0) return false;
  *begin = slot.begin.load(std::memory_order_relaxed);
  *end = slot.end.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return *end != 0 && slot.sequence.load(std::memory_order_relaxed) == before;
}

Slot g_slots[SigbusGuard::kMaxGuarded];
struct sigaction g_previous;
absl::once_flag g_install_once;

absl::Mutex& SlotsMutex() {
  static absl::Mutex* const mutex = new absl::Mutex();
  return *mutex;
}

void OnSigbus(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : g_slots) {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    if (!RangeOf(slot, &begin, &end) || address < begin || address >= end) continue;
    // mmap is a system call, safe here in practice (it is not on POSIX's list, but a handler that
    // only calls it and stores an atomic touches no lock).
    void* replaced = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                          MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (replaced != MAP_FAILED) {
      slot.faulted.store(true, std::memory_order_release);
      return;  // the faulting access runs again, on the zero pages
    }
    break;
  }
  // Not a guarded mapping: what would have happened without us.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal_number, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal_number);
    return;
  }
  // The default action: restore it and return, so that the access faults again and ends the
  // process with SIGBUS and a core, as it would have.
  signal(SIGBUS, SIG_DFL);
}

void InstallHandler() {
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

absl::StatusOr<SigbusGuard> SigbusGuard::Guard(void* base, size_t bytes) {
  absl::call_once(g_install_once, InstallHandler);
  absl::MutexLock lock(&SlotsMutex());
  for (int i = 0; i < kMaxGuarded; ++i) {
    Slot& slot = g_slots[i];
    if (slot.used) continue;
    slot.used = true;
    slot.faulted.store(false, std::memory_order_relaxed);
    const auto begin = reinterpret_cast<uintptr_t>(base);
    SetRange(slot, begin, begin + bytes);
    return SigbusGuard(i);
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the server guards %d shared-memory mappings already, its most", kMaxGuarded));
}

SigbusGuard& SigbusGuard::operator=(SigbusGuard&& other) noexcept {
  if (this != &other) {
    this->~SigbusGuard();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

SigbusGuard::~SigbusGuard() {
  if (slot_ < 0) return;
  absl::MutexLock lock(&SlotsMutex());
  Slot& slot = g_slots[slot_];
  SetRange(slot, 0, 0);
  slot.used = false;
}

bool SigbusGuard::Faulted() const {
  return slot_ >= 0 && g_slots[slot_].faulted.load(std::memory_order_acquire);
}

}  // namespace tensorops
