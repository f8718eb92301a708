#include "server/core/memory_budget.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "server/core/rejection.h"

namespace tensorops {

MemoryBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryBudget::Reservation& MemoryBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryBudget::Reservation::Release() {
  if (budget_ == nullptr) return;
  std::exchange(budget_, nullptr)->Give(std::exchange(bytes_, 0));
}

MemoryBudget::MemoryBudget(int64_t limit_bytes, std::function<int64_t()> other_bytes)
    : limit_bytes_(limit_bytes), other_bytes_(std::move(other_bytes)) {}

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(std::string_view op,
                                                                int64_t request_bytes,
                                                                int64_t result_bytes) {
  const int64_t bytes = request_bytes + result_bytes;
  absl::MutexLock lock(&mu_);
  if (limit_bytes_ > 0) {
    const int64_t other = other_bytes_ ? other_bytes_() : 0;
    if (bytes > limit_bytes_) {
      return MarkRejected(absl::ResourceExhaustedError(absl::StrFormat(
                              "%s: the call needs %d bytes (request %d, result %d), more than "
                              "--max_memory_bytes=%d allows at all: send a smaller call",
                              op, bytes, request_bytes, result_bytes, limit_bytes_)),
                          Rejection::kMemory);
    }
    if (bytes > limit_bytes_ - other - call_bytes_) {
      return MarkRejected(
          absl::ResourceExhaustedError(absl::StrFormat(
              "%s: the call needs %d bytes (request %d, result %d); calls in flight hold %d bytes "
              "and the tensor store %d, and --max_memory_bytes=%d allows no more: retry later or "
              "with backoff",
              op, bytes, request_bytes, result_bytes, call_bytes_, other, limit_bytes_)),
          Rejection::kMemory);
    }
  }
  call_bytes_ += bytes;
  ++calls_;
  ++reservations_;
  return Reservation(this, bytes);
}

void MemoryBudget::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  call_bytes_ -= bytes;
  --calls_;
}

int64_t MemoryBudget::call_bytes() const {
  absl::MutexLock lock(&mu_);
  return call_bytes_;
}

int64_t MemoryBudget::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

int64_t MemoryBudget::reservations() const {
  absl::MutexLock lock(&mu_);
  return reservations_;
}

}  // namespace tensorops
