#include "server/config/server_options.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "kernels/status_macros.h"
#include "server/rpc/unix_socket.h"

namespace tensorops {
namespace {

constexpr DeviceChoice kDeviceChoices[] = {DeviceChoice::kAuto, DeviceChoice::kCpu,
                                           DeviceChoice::kCuda};

// DeviceChoiceList is "auto, cpu, cuda", for messages.
std::string DeviceChoiceList() {
  return absl::StrJoin(kDeviceChoices, ", ", [](std::string* out, DeviceChoice choice) {
    const std::string_view name = DeviceChoiceName(choice);
    out->append(name.data(), name.size());
  });
}

// OutOfRange is every range error's wording: the flag, the value given and the rule.
absl::Status OutOfRange(absl::string_view flag, const absl::AlphaNum& value,
                        absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, "=", value.Piece(), " is out of range: must be ", rule));
}

// AtLeast is OK when `value` >= `min`, else OutOfRange with the rule ">= min" and `note`, which
// says what the smallest values mean (" (0 = never)").
absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min,
                     absl::string_view note = "") {
  if (value >= min) return absl::OkStatus();
  return OutOfRange(flag, value, absl::StrCat(">= ", min, note));
}

// Between is OK when `min` <= `value` <= `max`, else OutOfRange with the rule "min..max" and
// `note`.
absl::Status Between(absl::string_view flag, int64_t value, int64_t min, int64_t max,
                     absl::string_view note = "") {
  if (value >= min && value <= max) return absl::OkStatus();
  return OutOfRange(flag, value, absl::StrCat(min, "..", max, note));
}

// NotNegative checks a duration whose flag counts `unit`s (absl::Seconds(1) for --..._s); the
// value is shown in that unit, fractions included, so that -0.5 s does not read as 0.
absl::Status NotNegative(absl::string_view flag, absl::Duration value, absl::Duration unit,
                         absl::string_view note = "") {
  if (value >= absl::ZeroDuration()) return absl::OkStatus();
  return OutOfRange(flag, absl::FDivDuration(value, unit), absl::StrCat(">= 0", note));
}

// ValidateQueue checks the settings that SchedulerOptions and ServerOptions share; only the least
// number of workers differs (a Server resolves 0 to one per CPU thread).
absl::Status ValidateQueue(const QueueOptions& queue, int min_concurrent_calls,
                           absl::string_view concurrent_calls_note) {
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_concurrent_calls", queue.max_concurrent_calls,
                                    min_concurrent_calls, concurrent_calls_note));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_queued_calls", queue.max_queued_calls, 0));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_batch", queue.max_batch, 1));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_batch_bytes", queue.max_batch_bytes, 1));
  TENSOROPS_RETURN_IF_ERROR(NotNegative("--max_queue_delay_us", queue.max_queue_delay,
                                        absl::Microseconds(1), " (0 = never wait)"));
  return AtLeast("--inline_max_bytes", queue.inline_max_bytes, 0, " (0 = never inline)");
}

// ValidateSecurity checks that the TLS files come in usable combinations. The messages name the
// option fields too, since their names differ from the flags'.
absl::Status ValidateSecurity(const ServerOptions::Security& security) {
  const bool has_cert = !security.tls_cert_file.empty();
  const bool has_key = !security.tls_key_file.empty();
  if (has_cert && !has_key) {
    return absl::InvalidArgumentError(
        "--tls_cert needs --tls_key: TLS needs the certificate's key");
  }
  if (has_key && !has_cert) {
    return absl::InvalidArgumentError(
        "--tls_key needs --tls_cert: TLS needs the key's certificate");
  }
  if (!security.tls_client_ca_file.empty() && !has_cert) {
    return absl::InvalidArgumentError(
        "--tls_client_ca needs --tls_cert and --tls_key: mutual TLS is TLS first");
  }
  return absl::OkStatus();
}

// ValidateUnixSocket checks --unix_socket's form: a path (not a gRPC target) that fits a
// sockaddr_un. Whether it can be bound is Start's to find out.
absl::Status ValidateUnixSocket(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  for (absl::string_view scheme : {"unix:", "unix-abstract:"}) {
    if (absl::StartsWith(path, scheme)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--unix_socket=%s is a gRPC target, not a path: give the socket's path alone (%s)", path,
          path.substr(scheme.size())));
    }
  }
  if (path.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--unix_socket=%s is too long: %d bytes, and a Unix socket's path holds at most %d "
        "(sockaddr_un's %d bytes with the terminating NUL); choose a shorter path",
        path, path.size(), kMaxUnixSocketPathBytes, kMaxUnixSocketPathBytes + 1));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view DeviceChoiceName(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
  }
  return "unknown";
}

bool AbslParseFlag(absl::string_view text, DeviceChoice* choice, std::string* error) {
  for (DeviceChoice candidate : kDeviceChoices) {
    if (std::string_view(text.data(), text.size()) == DeviceChoiceName(candidate)) {
      *choice = candidate;
      return true;
    }
  }
  // Abseil prefixes the flag and the value: "Illegal value 'gpu' specified for flag 'device'; ".
  *error = absl::StrCat("must be one of ", DeviceChoiceList());
  return false;
}

std::string AbslUnparseFlag(DeviceChoice choice) { return std::string(DeviceChoiceName(choice)); }

bool AbslParseFlag(absl::string_view text, StoreSync* sync, std::string* error) {
  absl::StatusOr<StoreSync> parsed = ParseStoreSync(std::string_view(text.data(), text.size()));
  if (!parsed.ok()) {
    *error = "must be one of always, interval, none";
    return false;
  }
  *sync = *parsed;
  return true;
}

std::string AbslUnparseFlag(StoreSync sync) { return std::string(StoreSyncName(sync)); }

bool AbslParseFlag(absl::string_view text, StoreRecovery* recovery, std::string* error) {
  absl::StatusOr<StoreRecovery> parsed =
      ParseStoreRecovery(std::string_view(text.data(), text.size()));
  if (!parsed.ok()) {
    *error = "must be one of strict, discard";
    return false;
  }
  *recovery = *parsed;
  return true;
}

std::string AbslUnparseFlag(StoreRecovery recovery) {
  return std::string(StoreRecoveryName(recovery));
}

bool AbslParseFlag(absl::string_view text, ByteCount* count, std::string* error) {
  struct Suffix {
    std::string_view name;
    int64_t factor;
  };
  // The binary suffixes first: "Ki" must not be read as "K" followed by "i".
  static constexpr Suffix kSuffixes[] = {{"Ki", int64_t{1} << 10},
                                         {"Mi", int64_t{1} << 20},
                                         {"Gi", int64_t{1} << 30},
                                         {"Ti", int64_t{1} << 40},
                                         {"K", 1000},
                                         {"M", 1000 * 1000},
                                         {"G", int64_t{1000} * 1000 * 1000},
                                         {"T", int64_t{1000} * 1000 * 1000 * 1000}};
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  int64_t factor = 1;
  for (const Suffix& suffix : kSuffixes) {
    if (absl::ConsumeSuffix(&digits, absl::string_view(suffix.name.data(), suffix.name.size()))) {
      factor = suffix.factor;
      break;
    }
  }
  int64_t number = 0;
  // Abseil prefixes the flag and the value: "Illegal value '2X' specified for flag ...; ".
  if (digits.empty() || !absl::SimpleAtoi(digits, &number)) {
    *error =
        "expected a byte count: an integer, optionally followed by K, M, G or T (powers of 1000) "
        "or Ki, Mi, Gi or Ti (powers of 1024), e.g. 2G or 512Mi";
    return false;
  }
  if (number > std::numeric_limits<int64_t>::max() / factor ||
      number < std::numeric_limits<int64_t>::min() / factor) {
    *error = "the byte count is larger than 2^63 - 1";
    return false;
  }
  count->bytes = number * factor;
  return true;
}

std::string AbslUnparseFlag(ByteCount count) { return absl::StrCat(count.bytes); }

int64_t GrpcMaxReceiveMessageBytes(const ServerOptions::Limits& limits) {
  constexpr int64_t kMinMargin = int64_t{4} << 20;
  const int64_t margin = std::max(limits.max_message_bytes, kMinMargin);
  return limits.max_message_bytes > INT_MAX - margin ? INT_MAX : limits.max_message_bytes + margin;
}

int64_t GrpcMemoryQuotaBytes(const ServerOptions::Limits& limits) {
  if (limits.max_memory_bytes <= 0) return 0;
  const int64_t arriving = std::min(limits.max_memory_bytes, GrpcMaxReceiveMessageBytes(limits));
  return limits.max_memory_bytes > INT64_MAX - arriving ? INT64_MAX
                                                        : limits.max_memory_bytes + arriving;
}

absl::Status ValidateServerOptions(const ServerOptions& options) {
  if (options.host.empty()) {
    return absl::InvalidArgumentError(
        "--host is empty: must be an IPv4 or IPv6 address or a host name");
  }
  TENSOROPS_RETURN_IF_ERROR(Between("--port", options.port, 0, 65535, " (0 picks a free port)"));
  TENSOROPS_RETURN_IF_ERROR(ValidateUnixSocket(options.unix_socket));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--threads", options.threads, 0, " (0 = every core)"));

  const ServerOptions::Limits& limits = options.limits;
  // gRPC takes message sizes as int.
  TENSOROPS_RETURN_IF_ERROR(
      Between("--max_message_bytes", limits.max_message_bytes, 1, INT_MAX, " (gRPC's limit)"));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_elements", limits.max_elements, 1));
  TENSOROPS_RETURN_IF_ERROR(Between("--max_rank", limits.max_rank, 0, kMaxRank));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_stream_in_flight", limits.max_stream_in_flight, 1));
  TENSOROPS_RETURN_IF_ERROR(
      AtLeast("--max_memory_bytes", limits.max_memory_bytes, 0, " (0 = no limit)"));
  TENSOROPS_RETURN_IF_ERROR(
      ValidateQueue(options.queue, /*min_concurrent_calls=*/0, " (0 = one per CPU thread)"));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_shared_memory_regions",
                                    options.shared_memory.max_regions, 0,
                                    " (0 = no shared memory)"));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--max_shared_memory_bytes", options.shared_memory.max_bytes, 0,
                                    " (0 = as --max_memory_bytes)"));
  if (limits.max_memory_bytes > 0 && options.shared_memory.max_bytes > limits.max_memory_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max_shared_memory_bytes=%d is above --max_memory_bytes=%d: the regions' bytes are "
        "under the server's memory limit (lower it, or leave it 0 to take --max_memory_bytes)",
        options.shared_memory.max_bytes, limits.max_memory_bytes));
  }

  const auto device = static_cast<int>(options.device);
  if (device < 0 || device >= static_cast<int>(std::size(kDeviceChoices))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, " is out of range: must be one of ", DeviceChoiceList()));
  }
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--streams", options.gpu.streams, 1));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--gpu_min_bytes", options.gpu.min_bytes, 0));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--gpu_memory_limit", options.gpu.memory_limit_bytes, 0,
                                    " (0 = no limit but the device's)"));

  TENSOROPS_RETURN_IF_ERROR(
      AtLeast("--store_memory_bytes", options.store.memory_bytes, 0, " (0 = no store)"));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--store_download_snapshot_bytes",
                                    options.store.download_snapshot_bytes, 0, " (0 = never copy)"));
  if (!options.store.dir.empty() && options.store.memory_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--store_dir=%s keeps the tensor store on disk, but the store is off "
                        "(--store_memory_bytes=0); drop --store_dir or give the store memory",
                        options.store.dir));
  }
  if (options.store.sync_interval <= absl::ZeroDuration()) {
    return OutOfRange("--store_sync_interval_ms",
                      absl::FDivDuration(options.store.sync_interval, absl::Milliseconds(1)),
                      "> 0");
  }
  TENSOROPS_RETURN_IF_ERROR(NotNegative("--store_snapshot_interval_s",
                                        options.store.snapshot_interval, absl::Seconds(1),
                                        " (0 = only on request and at shutdown)"));
  TENSOROPS_RETURN_IF_ERROR(Between("--metrics_port", options.metrics.port, -1, 65535,
                                    " (-1 = no endpoint, 0 = any free port)"));
  TENSOROPS_RETURN_IF_ERROR(NotNegative("--memory_trim_idle_ms", options.memory_trim.idle_after,
                                        absl::Milliseconds(1), " (0 = never trim)"));
  TENSOROPS_RETURN_IF_ERROR(NotNegative("--shutdown_grace_s", options.shutdown.grace,
                                        absl::Seconds(1), " (0 cancels calls in flight at once)"));
  return ValidateSecurity(options.security);
}

absl::Status ValidateSchedulerOptions(const SchedulerOptions& options) {
  TENSOROPS_RETURN_IF_ERROR(ValidateQueue(options.queue, /*min_concurrent_calls=*/1, ""));
  TENSOROPS_RETURN_IF_ERROR(AtLeast("--threads", options.threads, 0, " (0 = every core)"));
  return AtLeast("--gpu_min_bytes", options.gpu_min_bytes, 0);
}

}  // namespace tensorops
