#include "server/core/memory_trimmer.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tensorops {

bool IdleTrimPolicy::Observe(absl::Time now, const Sample& sample) {
  const bool active = sample.busy > 0 || !(sample == last_);
  last_ = sample;
  if (active) {
    last_active_ = now;
    pending_ = true;
    return false;
  }
  if (pending_ && now - last_active_ >= idle_after_) {
    pending_ = false;
    return true;
  }
  return false;
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

TrimOutcome ReleaseFreeMemory() {
  TrimOutcome outcome{.resident_before = ResidentBytes()};
  const absl::Time start = absl::Now();
#if defined(__GLIBC__)
  outcome.released = malloc_trim(0) != 0;
#endif
  outcome.took = absl::Now() - start;
  outcome.resident_after = ResidentBytes();
  return outcome;
}

namespace {

// What LimitMallocArenas did; empty until it runs.
std::string& ArenaSetting() {
  static std::string* const setting = new std::string();
  return *setting;
}

}  // namespace

void LimitMallocArenas() {
#if defined(__GLIBC__)
  if (const char* env = std::getenv("MALLOC_ARENA_MAX"); env != nullptr) {
    ArenaSetting() = absl::StrCat("MALLOC_ARENA_MAX=", env);
    return;
  }
  if (const char* tunables = std::getenv("GLIBC_TUNABLES");
      tunables != nullptr && absl::StrContains(tunables, "glibc.malloc.arena_max")) {
    ArenaSetting() = "GLIBC_TUNABLES";
    return;
  }
  mallopt(M_ARENA_MAX, 1);
  ArenaSetting() = "1";
#endif
}

std::string MallocArenas() {
#if defined(__GLIBC__)
  return ArenaSetting().empty() ? std::string("glibc's default") : ArenaSetting();
#else
  return "n/a";
#endif
}

MemoryTrimmer::MemoryTrimmer(MemoryTrimmerOptions options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

MemoryTrimmer::~MemoryTrimmer() { Stop(); }

void MemoryTrimmer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t MemoryTrimmer::trims() const {
  absl::MutexLock lock(&mu_);
  return trims_;
}

void MemoryTrimmer::Loop() {
  IdleTrimPolicy policy(options_.idle_after);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Returns early, true, once Stop is called.
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.poll)) return;
    }
    if (!policy.Observe(absl::Now(), options_.sample())) continue;
    const TrimOutcome outcome = options_.trim();
    {
      absl::MutexLock lock(&mu_);
      ++trims_;
    }
    constexpr double kMiB = 1 << 20;
    spdlog::debug(
        "memory: idle for {} after calls; malloc_trim returned {} ({}), resident {:.1f} MiB -> "
        "{:.1f} MiB, in {}",
        absl::FormatDuration(options_.idle_after), outcome.released ? 1 : 0,
        outcome.released ? "memory given back to the system" : "nothing to give back",
        static_cast<double>(outcome.resident_before) / kMiB,
        static_cast<double>(outcome.resident_after) / kMiB, absl::FormatDuration(outcome.took));
  }
}

}  // namespace tensorops
