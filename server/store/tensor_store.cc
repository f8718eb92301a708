#include "server/store/tensor_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <new>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/status_macros.h"

namespace tensorops {

namespace {

// Zero-byte tensors point here, so that their data pointer is never null and nothing is
// allocated (or freed) for them.
alignas(64) char empty_tensor_bytes[64];

// AllocatedBytes is what a tensor of `bytes` allocates: rounded up to a multiple of 4, since a
// device kernel writing a 16-bit result in place swaps whole 32-bit words (DeviceBuffers::result).
int64_t AllocatedBytes(int64_t bytes) { return (bytes + 3) / 4 * 4; }

// ChargedBytes is what a tensor of `bytes` in `memory` counts against the store's limit: the
// memory its allocation really takes (a host tensor of 2 MiB or more takes whole huge pages), so
// that --store_memory_bytes bounds what the process holds, not just the tensors' sizes.
int64_t ChargedBytes(const TensorMemory& memory, int64_t bytes) {
  return bytes == 0 ? 0 : memory.FootprintBytes(AllocatedBytes(bytes));
}

constexpr char kNameRule[] =
    "names are 1..256 bytes of [A-Za-z0-9._/-], not starting with '/' or '.'";

// Debian's Abseil has an absl::string_view of its own, which the hash maps' heterogeneous lookup
// takes; std::string_view does not convert to it implicitly.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Escape returns `bytes` with printable ASCII as is (but quote and backslash escaped) and every
// other byte as \xHH. Unlike absl::CHexEscape it never escapes a hex digit that follows an escape
// ("a\x00b", not "a\x00\x62"): the result is for people to read, not for a C compiler.
std::string Escape(std::string_view bytes) {
  std::string escaped;
  escaped.reserve(bytes.size());
  for (const char c : bytes) {
    if (c == '"' || c == '\\') {
      escaped.push_back('\\');
      escaped.push_back(c);
    } else if (c >= 0x20 && c < 0x7f) {
      escaped.push_back(c);
    } else {
      absl::StrAppendFormat(&escaped, "\\x%02x", static_cast<unsigned char>(c));
    }
  }
  return escaped;
}

// QuoteName returns `name` quoted and escaped for a message. A name longer than any valid one is
// cut to its first 64 bytes, with its length, so a huge or binary name cannot flood a log.
std::string QuoteName(std::string_view name) {
  if (static_cast<int64_t>(name.size()) <= kMaxTensorNameBytes) {
    return absl::StrFormat("\"%s\"", Escape(name));
  }
  return absl::StrFormat("\"%s...\" (%d bytes)", Escape(name.substr(0, 64)), name.size());
}

bool IsNameByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '/' || c == '-';
}

absl::Status NotFound(std::string_view name) {
  return absl::NotFoundError(absl::StrFormat("tensor %s not found", QuoteName(name)));
}

absl::Status CheckExpectedVersionArg(std::optional<int64_t> expected_version) {
  if (expected_version.has_value() && *expected_version < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expected_version = %d is out of range: versions start at 1", *expected_version));
  }
  return absl::OkStatus();
}

// CheckVersion holds the one wording of a version mismatch, for every operation.
absl::Status CheckVersion(std::string_view name, int64_t current,
                          std::optional<int64_t> expected_version) {
  if (expected_version.has_value() && *expected_version != current) {
    return absl::FailedPreconditionError(
        absl::StrFormat("tensor %s exists at version %d, not expected_version=%d", QuoteName(name),
                        current, *expected_version));
  }
  return absl::OkStatus();
}

// CheckReplace applies an upload's replace rules to the name's current version (nullopt when
// the name does not exist).
absl::Status CheckReplace(std::string_view name, std::optional<int64_t> current,
                          const TensorStore::UploadOptions& options) {
  if (!current.has_value()) {
    if (options.expected_version.has_value()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "tensor %s does not exist, but expected_version=%d was given (omit it to create the "
          "tensor)",
          QuoteName(name), *options.expected_version));
    }
    return absl::OkStatus();
  }
  if (options.expected_version.has_value()) {
    return CheckVersion(name, *current, options.expected_version);
  }
  if (!options.overwrite) {
    return absl::FailedPreconditionError(
        absl::StrFormat("tensor %s exists at version %d; pass overwrite or expected_version=%d",
                        QuoteName(name), *current, *current));
  }
  return absl::OkStatus();
}

// MemoryPool accounts the bytes every entry and upload holds against the store's limit. Shared by
// the store and every entry, so that bytes released after the store is gone still have a pool.
class MemoryPool {
 public:
  explicit MemoryPool(int64_t limit) : limit_(std::max<int64_t>(limit, 0)) {}

  // Reserve takes `charged` bytes of the limit for `name`, a tensor of `bytes` (ChargedBytes), or
  // returns RESOURCE_EXHAUSTED.
  absl::Status Reserve(std::string_view name, int64_t bytes, int64_t charged) {
    if (limit_ == 0) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the tensor store is off (%s=0): cannot store tensor %s; start the server with "
          "%s greater than 0 to keep tensors on it",
          kStoreMemoryFlag, QuoteName(name), kStoreMemoryFlag));
    }
    int64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (charged > limit_ - used) {
        const std::string in_memory =
            charged == bytes
                ? std::string()
                : absl::StrFormat(" (%d in memory, allocated in whole 2 MiB huge pages)", charged);
        return absl::ResourceExhaustedError(absl::StrFormat(
            "tensor store is full: tensor %s needs %d bytes%s, but only %d of %s=%d are free",
            QuoteName(name), bytes, in_memory, limit_ - used, kStoreMemoryFlag, limit_));
      }
    } while (!used_.compare_exchange_weak(used, used + charged, std::memory_order_relaxed));
    return absl::OkStatus();
  }

  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

// SharedLock is a reader/writer lock that, unlike absl::Mutex, may be released on a thread other
// than the one that took it: a handle may be taken on one gRPC thread and dropped on another.
// Its own mutex is held only while the state changes. Arrivals take tickets: a reader waits for
// every writer that arrived before it, and writers enter in arrival order once the readers
// before them are done, so neither side starves the other.
class SharedLock {
 public:
  void LockShared() {
    absl::MutexLock lock(&mu_);
    const uint64_t ticket = next_ticket_++;
    const auto may_enter = [this, ticket]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !writer_ && (waiting_writers_.empty() || waiting_writers_.front() > ticket);
    };
    mu_.Await(absl::Condition(&may_enter));
    ++readers_;
  }

  // TryLockShared is LockShared when it would not wait; false (nothing held) when it would.
  bool TryLockShared() {
    absl::MutexLock lock(&mu_);
    // A new ticket is the newest, so any waiting writer goes first.
    if (writer_ || !waiting_writers_.empty()) return false;
    ++next_ticket_;
    ++readers_;
    return true;
  }

  void UnlockShared() {
    absl::MutexLock lock(&mu_);
    --readers_;
  }

  void Lock() {
    absl::MutexLock lock(&mu_);
    const uint64_t ticket = next_ticket_++;
    waiting_writers_.push_back(ticket);
    const auto may_enter = [this, ticket]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !writer_ && readers_ == 0 && waiting_writers_.front() == ticket;
    };
    mu_.Await(absl::Condition(&may_enter));
    waiting_writers_.pop_front();
    writer_ = true;
  }

  // TryLock is Lock when it would not wait; false (nothing held) when it would.
  bool TryLock() {
    absl::MutexLock lock(&mu_);
    if (writer_ || readers_ > 0 || !waiting_writers_.empty()) return false;
    ++next_ticket_;
    writer_ = true;
    return true;
  }

  void Unlock() {
    absl::MutexLock lock(&mu_);
    writer_ = false;
  }

 private:
  absl::Mutex mu_;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t readers_ ABSL_GUARDED_BY(mu_) = 0;
  bool writer_ ABSL_GUARDED_BY(mu_) = false;
  // Tickets of the writers waiting, oldest first.
  std::deque<uint64_t> waiting_writers_ ABSL_GUARDED_BY(mu_);
};

// The payload that marks StoreBusyError's status (IsStoreBusy); the code alone could be any
// UNAVAILABLE.
constexpr char kStoreBusyPayload[] = "tensorops/store-busy";

}  // namespace

// Callers retry where they may wait, so no client is meant to see this status; the message says
// what happened if one does.
absl::Status StoreBusyError(std::string_view name) {
  absl::Status status =
      absl::UnavailableError(absl::StrFormat("tensor %s is being updated; retry", QuoteName(name)));
  status.SetPayload(kStoreBusyPayload, absl::Cord());
  return status;
}

bool IsStoreBusy(const absl::Status& status) {
  return status.GetPayload(kStoreBusyPayload).has_value();
}

absl::Status ValidateTensorName(std::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor name is empty: %s", kNameRule));
  }
  if (static_cast<int64_t>(name.size()) > kMaxTensorNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor name %s is too long (%d bytes): %s",
                                                      QuoteName(name), name.size(), kNameRule));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameByte(name[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor name %s has a byte not allowed at offset %d ('%s'): %s",
                          QuoteName(name), i, Escape(name.substr(i, 1)), kNameRule));
    }
  }
  if (name.front() == '/' || name.front() == '.') {
    return absl::InvalidArgumentError(absl::StrFormat("tensor name %s starts with '%c': %s",
                                                      QuoteName(name), name.front(), kNameRule));
  }
  return absl::OkStatus();
}

// Entry is one value of a tensor: its bytes, and the lock readers and updaters take on them. A
// name's entry is replaced, never rewritten, by an overwrite, so a handle's entry outlives its
// place in the map.
struct TensorStore::Entry {
  Entry(std::string name_arg, DataType dtype_arg, Shape shape_arg, int64_t bytes_arg,
        std::shared_ptr<MemoryPool> pool_arg, TensorMemory* memory_arg, void* data_arg)
      : name(std::move(name_arg)),
        dtype(dtype_arg),
        shape(std::move(shape_arg)),
        bytes(bytes_arg),
        pool(std::move(pool_arg)),
        memory(memory_arg),
        data(data_arg) {}

  // The last handle (or the map) letting go frees the bytes and their share of the limit.
  ~Entry() {
    if (data != empty_tensor_bytes) memory->Free(data, AllocatedBytes(bytes));
    pool->Release(ChargedBytes(*memory, bytes));
  }

  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  const std::string name;
  const DataType dtype;
  const Shape shape;
  const int64_t bytes;
  const std::shared_ptr<MemoryPool> pool;
  // Where `data` lives (it outlives every entry: see TensorStore's constructor).
  TensorMemory* const memory;
  void* const data;

  // Guards the bytes (not the fields below): shared for a ReadHandle, exclusive for an
  // UpdateHandle.
  SharedLock lock;

  // Guarded by State::mu (the analysis cannot name another object's mutex). `live` is true
  // while the entry is its name's current value; an overwrite or delete clears it, and
  // `version` changes only while live, under `lock` held exclusively as well, so a handle
  // holding `lock` reads it stably.
  int64_t version = 0;
  absl::Time created;
  absl::Time updated;
  bool live = false;
  // Set once, at commit.
  uint64_t serial = 0;

  Metadata ToMetadata() const {
    return Metadata{.name = name,
                    .dtype = dtype,
                    .shape = shape,
                    .bytes = bytes,
                    .version = version,
                    .device = memory->device(),
                    .created = created,
                    .updated = updated,
                    .serial = serial};
  }
};

// State is the store itself; uploads and update handles share it, so they may outlive the
// TensorStore object.
struct TensorStore::State {
  State(int64_t limit, TensorMemory* memory_arg)
      : pool(std::make_shared<MemoryPool>(limit)), memory(memory_arg) {}

  // FindLocked returns the name's current entry in `ns`, or null.
  Entry* FindLocked(std::string_view ns, std::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu) {
    const auto names = namespaces.find(Key(ns));
    if (names == namespaces.end()) return nullptr;
    const auto it = names->second.find(Key(name));
    return it == names->second.end() ? nullptr : it->second.get();
  }

  absl::StatusOr<std::shared_ptr<Entry>> Find(std::string_view ns, std::string_view name) const {
    absl::ReaderMutexLock lock(&mu);
    const auto names = namespaces.find(Key(ns));
    if (names != namespaces.end()) {
      const auto it = names->second.find(Key(name));
      if (it != names->second.end()) return it->second;
    }
    return NotFound(name);
  }

  // Acquire finds the name's entry and takes its lock (shared or exclusive), then checks that
  // the entry is still current: an overwrite may have replaced it while we waited, and its old
  // bytes may hold an update no one will see. Returns the entry, locked, and its version.
  absl::StatusOr<std::pair<std::shared_ptr<Entry>, int64_t>> Acquire(
      std::string_view ns, std::string_view name, bool exclusive,
      LockWait wait = LockWait::kWait) const {
    while (true) {
      TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, Find(ns, name));
      if (wait == LockWait::kTry) {
        if (!(exclusive ? entry->lock.TryLock() : entry->lock.TryLockShared())) {
          return StoreBusyError(name);
        }
      } else if (exclusive) {
        entry->lock.Lock();
      } else {
        entry->lock.LockShared();
      }
      bool live;
      int64_t version;
      {
        absl::ReaderMutexLock lock(&mu);
        live = entry->live;
        version = entry->version;
      }
      if (live) return std::make_pair(std::move(entry), version);
      if (exclusive) {
        entry->lock.Unlock();
      } else {
        entry->lock.UnlockShared();
      }
    }
  }

  // PlaceLocked makes `entry` (live) its name's current value in `ns`, returning the value it
  // replaced (null when the name was free), no longer live.
  std::shared_ptr<Entry> PlaceLocked(std::string_view ns, const std::shared_ptr<Entry>& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto& names = namespaces[Key(ns)];
    const auto it = names.find(Key(entry->name));
    if (it == names.end()) {
      names.emplace(entry->name, entry);
      ++count;
      return nullptr;
    }
    it->second->live = false;
    return std::exchange(it->second, entry);
  }

  // RememberLocked records that the change `update_id` (non-empty) made `name` at `version`,
  // forgetting the namespace's oldest change beyond kRememberedChangesPerNamespace.
  void RememberLocked(std::string_view ns, std::string_view update_id, std::string_view name,
                      int64_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ChangeLog& log = changes[Key(ns)];
    const auto [it, inserted] = log.by_id.try_emplace(
        Key(update_id), Change{.name = std::string(name), .version = version});
    if (!inserted) return;
    log.order.push_back(it->first);
    if (static_cast<int64_t>(log.order.size()) > kRememberedChangesPerNamespace) {
      log.by_id.erase(log.order.front());
      log.order.pop_front();
    }
  }

  std::optional<Change> FindChangeLocked(std::string_view ns, std::string_view update_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu) {
    if (update_id.empty()) return std::nullopt;
    const auto log = changes.find(Key(ns));
    if (log == changes.end()) return std::nullopt;
    const auto it = log->second.by_id.find(Key(update_id));
    if (it == log->second.by_id.end()) return std::nullopt;
    return it->second;
  }

  // The update ids of a namespace's latest changes, oldest first in `order`.
  struct ChangeLog {
    absl::flat_hash_map<std::string, Change> by_id;
    std::deque<std::string> order;
  };

  // Journal returns the journal, or null.
  StoreJournal* Journal() const { return journal.load(std::memory_order_acquire); }

  const std::shared_ptr<MemoryPool> pool;
  TensorMemory* const memory;
  std::atomic<StoreJournal*> journal{nullptr};
  // Held by every change to a name's value or version (a commit, a delete, an in-place commit)
  // from its checks through its journal record to its effect, so that the journal's order is
  // the changes' order and the checks still hold when the change is made. Taken before `mu`.
  // Reads never take it.
  absl::Mutex commit_mu ABSL_ACQUIRED_BEFORE(mu);
  uint64_t next_serial ABSL_GUARDED_BY(commit_mu) = 1;
  mutable absl::Mutex mu;
  // Kept apart from `namespaces`: a namespace remembers its changes after its last name goes.
  absl::flat_hash_map<std::string, ChangeLog> changes ABSL_GUARDED_BY(mu);
  // namespace -> name -> current entry. A namespace is erased with its last name.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::shared_ptr<Entry>>>
      namespaces ABSL_GUARDED_BY(mu);
  int64_t count ABSL_GUARDED_BY(mu) = 0;
};

// ---- TensorStore ----

TensorStore::TensorStore(int64_t limit_bytes, TensorMemory* memory)
    : state_(
          std::make_shared<State>(limit_bytes, memory == nullptr ? &HostTensorMemory() : memory)) {}

TensorStore::~TensorStore() = default;

absl::StatusOr<TensorStore::Upload> TensorStore::BeginUpload(std::string_view ns,
                                                             std::string_view name, DataType dtype,
                                                             ShapeSpan shape,
                                                             const UploadOptions& options) {
  TENSOROPS_RETURN_IF_ERROR(ValidateTensorName(name));
  TENSOROPS_RETURN_IF_ERROR(CheckExpectedVersionArg(options.expected_version));
  if (std::find(std::begin(kAllDataTypes), std::end(kAllDataTypes), dtype) ==
      std::end(kAllDataTypes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: dtype %d is not a valid data type", QuoteName(name), static_cast<int>(dtype)));
  }
  if (static_cast<int64_t>(shape.size()) > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: shape %s has rank %d, more than %d", QuoteName(name),
                        ShapeToString(shape), shape.size(), kMaxRank));
  }
  const std::string what = absl::StrFormat("tensor %s", QuoteName(name));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumElements(shape, what));
  int64_t bytes;
  if (__builtin_mul_overflow(numel, ItemSize(dtype), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: shape %s of %s has %d elements, whose size in bytes overflows int64",
                        what, ShapeToString(shape), DataTypeName(dtype), numel));
  }

  // Fail now what would fail at Commit, before the client sends the bytes; Commit checks again.
  {
    absl::ReaderMutexLock lock(&state_->mu);
    const Entry* current = state_->FindLocked(ns, name);
    TENSOROPS_RETURN_IF_ERROR(CheckReplace(
        name, current == nullptr ? std::nullopt : std::optional<int64_t>(current->version),
        options));
  }

  // A tensor larger than the whole limit is refused as it stands: rounded up to whole words and
  // pages (ChargedBytes), a size near INT64_MAX would overflow and pass the limit as a negative.
  if (bytes > state_->pool->limit()) return state_->pool->Reserve(name, bytes, bytes);
  const int64_t charged = ChargedBytes(*state_->memory, bytes);
  TENSOROPS_RETURN_IF_ERROR(state_->pool->Reserve(name, bytes, charged));
  void* data = empty_tensor_bytes;
  if (bytes > 0) {
    // No zero-fill: Commit accepts the bytes only once every one has been written.
    data = state_->memory->Allocate(AllocatedBytes(bytes));
    if (data == nullptr) {
      state_->pool->Release(charged);
      return absl::ResourceExhaustedError(
          absl::StrFormat("tensor store: cannot allocate %d bytes for tensor %s (out of %s memory)",
                          bytes, QuoteName(name), state_->memory->device()));
    }
  }
  // From here the entry owns the bytes and the reservation.
  auto entry = std::make_shared<Entry>(std::string(name), dtype, Shape(shape.begin(), shape.end()),
                                       bytes, state_->pool, state_->memory, data);
  return Upload(state_, std::string(ns), std::move(entry), options);
}

absl::StatusOr<int64_t> TensorStore::Put(std::string_view ns, std::string_view name,
                                         const TensorView& value, const UploadOptions& options) {
  TENSOROPS_ASSIGN_OR_RETURN(Upload upload,
                             BeginUpload(ns, name, value.dtype(), value.shape(), options));
  if (state_->memory->host_accessible()) {
    TENSOROPS_ASSIGN_OR_RETURN(absl::Span<char> bytes, upload.MutableChunk(0, upload.bytes()));
    CopyElements(value, MutableTensorView(value.dtype(), value.shape(), bytes.data()));
  } else {
    // Made contiguous on the host, then one copy to the device.
    Tensor contiguous(value.dtype(), value.shape());
    CopyElements(value, contiguous.mutable_view());
    TENSOROPS_RETURN_IF_ERROR(
        upload.Write(0, std::string_view(static_cast<const char*>(contiguous.data()),
                                         static_cast<size_t>(upload.bytes()))));
  }
  return upload.Commit();
}

absl::StatusOr<TensorStore::ReadHandle> TensorStore::Read(std::string_view ns,
                                                          std::string_view name,
                                                          std::optional<int64_t> expected_version,
                                                          LockWait wait) const {
  TENSOROPS_RETURN_IF_ERROR(ValidateTensorName(name));
  TENSOROPS_RETURN_IF_ERROR(CheckExpectedVersionArg(expected_version));
  TENSOROPS_ASSIGN_OR_RETURN(auto acquired, state_->Acquire(ns, name, /*exclusive=*/false, wait));
  ReadHandle handle(std::move(acquired.first), acquired.second);
  // On a mismatch the handle goes out of scope and releases the lock.
  TENSOROPS_RETURN_IF_ERROR(CheckVersion(name, handle.version(), expected_version));
  return handle;
}

absl::StatusOr<TensorStore::UpdateHandle> TensorStore::Update(
    std::string_view ns, std::string_view name, std::optional<int64_t> expected_version,
    std::string_view update_id, LockWait wait) {
  TENSOROPS_RETURN_IF_ERROR(ValidateTensorName(name));
  TENSOROPS_RETURN_IF_ERROR(CheckExpectedVersionArg(expected_version));
  TENSOROPS_ASSIGN_OR_RETURN(auto acquired, state_->Acquire(ns, name, /*exclusive=*/true, wait));
  UpdateHandle handle(state_, std::string(ns), std::move(acquired.first), acquired.second);
  if (std::optional<Change> change = FindChange(ns, update_id)) {
    handle.already_applied_ = change->version;
    return handle;
  }
  TENSOROPS_RETURN_IF_ERROR(CheckVersion(name, handle.version(), expected_version));
  return handle;
}

std::optional<TensorStore::Change> TensorStore::FindChange(std::string_view ns,
                                                           std::string_view update_id) const {
  absl::ReaderMutexLock lock(&state_->mu);
  return state_->FindChangeLocked(ns, update_id);
}

absl::Status TensorStore::Delete(std::string_view ns, std::string_view name,
                                 std::optional<int64_t> expected_version) {
  TENSOROPS_RETURN_IF_ERROR(ValidateTensorName(name));
  TENSOROPS_RETURN_IF_ERROR(CheckExpectedVersionArg(expected_version));
  // Destroyed after the lock is released: the last reference frees the bytes, which for a large
  // tensor is worth keeping out of the store's lock.
  std::shared_ptr<Entry> removed;
  std::optional<StoreJournal::Ticket> logged;
  StoreJournal* const journal = state_->Journal();
  {
    absl::MutexLock commit(&state_->commit_mu);
    {
      absl::ReaderMutexLock lock(&state_->mu);
      const Entry* entry = state_->FindLocked(ns, name);
      if (entry == nullptr) return NotFound(name);
      TENSOROPS_RETURN_IF_ERROR(CheckVersion(name, entry->version, expected_version));
    }
    if (journal != nullptr) {
      TENSOROPS_ASSIGN_OR_RETURN(logged, journal->LogDelete(ns, name));
    }
    absl::MutexLock lock(&state_->mu);
    const auto names = state_->namespaces.find(Key(ns));
    const auto it = names->second.find(Key(name));
    removed = std::move(it->second);
    removed->live = false;
    names->second.erase(it);
    if (names->second.empty()) state_->namespaces.erase(names);
    --state_->count;
  }
  if (logged.has_value()) return journal->AwaitDurable(*logged);
  return absl::OkStatus();
}

std::vector<TensorStore::Metadata> TensorStore::List(std::string_view ns) const {
  std::vector<Metadata> list;
  {
    absl::ReaderMutexLock lock(&state_->mu);
    const auto names = state_->namespaces.find(Key(ns));
    if (names == state_->namespaces.end()) return list;
    list.reserve(names->second.size());
    for (const auto& [name, entry] : names->second) list.push_back(entry->ToMetadata());
  }
  std::sort(list.begin(), list.end(),
            [](const Metadata& a, const Metadata& b) { return a.name < b.name; });
  return list;
}

absl::StatusOr<TensorStore::Metadata> TensorStore::Info(std::string_view ns,
                                                        std::string_view name) const {
  TENSOROPS_RETURN_IF_ERROR(ValidateTensorName(name));
  absl::ReaderMutexLock lock(&state_->mu);
  const Entry* entry = state_->FindLocked(ns, name);
  if (entry == nullptr) return NotFound(name);
  return entry->ToMetadata();
}

int64_t TensorStore::used_bytes() const { return state_->pool->used(); }

int64_t TensorStore::FootprintOf(int64_t bytes) const {
  return ChargedBytes(*state_->memory, bytes);
}

int64_t TensorStore::limit_bytes() const { return state_->pool->limit(); }

std::string TensorStore::device() const { return state_->memory->device(); }

int64_t TensorStore::tensor_count() const {
  absl::ReaderMutexLock lock(&state_->mu);
  return state_->count;
}

void TensorStore::SetJournal(StoreJournal* journal) {
  state_->journal.store(journal, std::memory_order_release);
}

bool TensorStore::journaled() const { return state_->Journal() != nullptr; }

absl::StatusOr<std::pair<TensorStore::ReadHandle, TensorStore::Metadata>>
TensorStore::ReadWithMetadata(std::string_view ns, std::string_view name) const {
  TENSOROPS_ASSIGN_OR_RETURN(auto acquired, state_->Acquire(ns, name, /*exclusive=*/false));
  Metadata metadata;
  {
    absl::ReaderMutexLock lock(&state_->mu);
    metadata = acquired.first->ToMetadata();
  }
  // The shared lock keeps the version what Acquire read.
  metadata.version = acquired.second;
  return std::make_pair(ReadHandle(std::move(acquired.first), acquired.second),
                        std::move(metadata));
}

std::vector<std::pair<std::string, std::string>> TensorStore::Names() const {
  std::vector<std::pair<std::string, std::string>> names;
  absl::ReaderMutexLock lock(&state_->mu);
  names.reserve(static_cast<size_t>(state_->count));
  for (const auto& [ns, entries] : state_->namespaces) {
    for (const auto& [name, entry] : entries) names.emplace_back(ns, name);
  }
  return names;
}

std::vector<TensorStore::Remembered> TensorStore::RememberedChanges() const {
  std::vector<Remembered> all;
  absl::ReaderMutexLock lock(&state_->mu);
  for (const auto& [ns, log] : state_->changes) {
    Remembered remembered{.ns = ns};
    remembered.changes.reserve(log.order.size());
    for (const std::string& id : log.order) remembered.changes.emplace_back(id, log.by_id.at(id));
    all.push_back(std::move(remembered));
  }
  return all;
}

void TensorStore::Remember(std::string_view ns, std::string_view update_id, const Change& change) {
  if (update_id.empty()) return;
  absl::MutexLock lock(&state_->mu);
  state_->RememberLocked(ns, update_id, change.name, change.version);
}

void TensorStore::RestoreUpdated(std::string_view ns, std::string_view name, absl::Time updated) {
  absl::MutexLock lock(&state_->mu);
  if (Entry* entry = state_->FindLocked(ns, name)) entry->updated = updated;
}

void TensorStore::WhileCommitsPaused(const std::function<void()>& fn) {
  absl::MutexLock commit(&state_->commit_mu);
  fn();
}

uint64_t TensorStore::next_serial() const {
  absl::MutexLock commit(&state_->commit_mu);
  return state_->next_serial;
}

// ---- Upload ----

TensorStore::Upload::Upload(std::shared_ptr<State> state, std::string ns,
                            std::shared_ptr<Entry> entry, UploadOptions options)
    : state_(std::move(state)),
      ns_(std::move(ns)),
      entry_(std::move(entry)),
      options_(std::move(options)),
      name_(entry_->name),
      dtype_(entry_->dtype),
      shape_(entry_->shape),
      bytes_(entry_->bytes) {}

TensorStore::Upload::Upload(Upload&&) noexcept = default;
TensorStore::Upload& TensorStore::Upload::operator=(Upload&&) noexcept = default;
// An uncommitted entry is referenced only here: dropping it frees the bytes and the reservation.
TensorStore::Upload::~Upload() = default;

const TensorMemory& TensorStore::Upload::memory() const { return *entry_->memory; }

absl::StatusOr<absl::Span<char>> TensorStore::Upload::MutableChunk(int64_t offset, int64_t size) {
  if (committed_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("upload of tensor %s is already committed", QuoteName(name_)));
  }
  if (offset != received_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "upload of tensor %s: chunk at offset %d, but %d bytes were received so far (chunks "
        "must arrive in order, each where the last ended)",
        QuoteName(name_), offset, received_));
  }
  if (size < 0 || size > bytes_ - received_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "upload of tensor %s: chunk of %d bytes at offset %d does not fit the tensor's %d bytes",
        QuoteName(name_), size, offset, bytes_));
  }
  received_ += size;
  return absl::Span<char>(static_cast<char*>(entry_->data) + offset, static_cast<size_t>(size));
}

absl::Status TensorStore::Upload::Write(int64_t offset, std::string_view bytes) {
  // Bytes bound for the device are checked here, while they are on the host (Commit checks host
  // bytes in place). entry_ is null once committed: MutableChunk says so.
  if (entry_ != nullptr && !entry_->memory->host_accessible()) {
    TENSOROPS_RETURN_IF_ERROR(CheckBools(offset, bytes.data(), static_cast<int64_t>(bytes.size())));
  }
  TENSOROPS_ASSIGN_OR_RETURN(absl::Span<char> dest,
                             MutableChunk(offset, static_cast<int64_t>(bytes.size())));
  if (bytes.empty()) return absl::OkStatus();
  const absl::Status copied =
      entry_->memory->CopyFromHost(dest.data(), bytes.data(), static_cast<int64_t>(bytes.size()));
  if (!copied.ok()) received_ -= static_cast<int64_t>(bytes.size());
  return copied;
}

absl::Status TensorStore::Upload::CheckBools(int64_t offset, const void* data, int64_t size) const {
  // Ops read stored bools as they read inline ones, which the codec checks: so does the store.
  if (dtype_ != DataType::kBool) return absl::OkStatus();
  const auto* bytes = static_cast<const uint8_t*>(data);
  const auto* bad = std::find_if(bytes, bytes + size, [](uint8_t byte) { return byte > 1; });
  if (bad == bytes + size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("upload of tensor %s: data[%d] = %d is not a valid bool (0 or 1)",
                      QuoteName(name_), offset + (bad - bytes), *bad));
}

absl::StatusOr<int64_t> TensorStore::Upload::Commit(std::string_view update_id) {
  if (committed_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("upload of tensor %s is already committed", QuoteName(name_)));
  }
  if (received_ != bytes_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload of tensor %s is incomplete: received %d of its %d bytes",
                        QuoteName(name_), received_, bytes_));
  }
  if (entry_->memory->host_accessible()) {
    TENSOROPS_RETURN_IF_ERROR(CheckBools(0, entry_->data, bytes_));
  }
  // Destroyed after the lock is released (see Delete).
  std::shared_ptr<Entry> replaced;
  std::optional<StoreJournal::Ticket> logged;
  StoreJournal* const journal = state_->Journal();
  Metadata value;
  {
    absl::MutexLock commit(&state_->commit_mu);
    {
      absl::ReaderMutexLock lock(&state_->mu);
      if (std::optional<Change> change = state_->FindChangeLocked(ns_, update_id)) {
        return change->version;
      }
      const Entry* current = state_->FindLocked(ns_, entry_->name);
      TENSOROPS_RETURN_IF_ERROR(CheckReplace(
          entry_->name,
          current == nullptr ? std::nullopt : std::optional<int64_t>(current->version), options_));
      const absl::Time now = absl::Now();
      // Not yet visible: the entry is still the upload's alone.
      entry_->version = current == nullptr ? 1 : current->version + 1;
      entry_->created = current == nullptr ? now : current->created;
      entry_->updated = now;
      entry_->serial = state_->next_serial;
      value = entry_->ToMetadata();
    }
    if (journal != nullptr) {
      TENSOROPS_ASSIGN_OR_RETURN(logged, journal->LogPut({.ns = ns_,
                                                          .metadata = value,
                                                          .update_id = update_id,
                                                          .memory = *entry_->memory,
                                                          .data = entry_->data}));
    }
    ++state_->next_serial;
    absl::MutexLock lock(&state_->mu);
    entry_->live = true;
    if (!update_id.empty()) state_->RememberLocked(ns_, update_id, entry_->name, value.version);
    replaced = state_->PlaceLocked(ns_, entry_);
  }
  committed_ = true;
  entry_.reset();
  stored_ = value;
  if (logged.has_value()) TENSOROPS_RETURN_IF_ERROR(journal->AwaitDurable(*logged));
  return value.version;
}

absl::Status TensorStore::Upload::CommitRestored(const Restored& restored) {
  if (committed_ || received_ != bytes_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "restoring tensor %s: the upload is committed or incomplete", QuoteName(name_)));
  }
  std::shared_ptr<Entry> replaced;
  {
    absl::MutexLock commit(&state_->commit_mu);
    absl::MutexLock lock(&state_->mu);
    entry_->version = restored.version;
    entry_->serial = restored.serial;
    entry_->created = restored.created;
    entry_->updated = restored.updated;
    entry_->live = true;
    state_->next_serial = std::max(state_->next_serial, restored.serial + 1);
    replaced = state_->PlaceLocked(ns_, entry_);
  }
  committed_ = true;
  entry_.reset();
  return absl::OkStatus();
}

// ---- ReadHandle ----

TensorStore::ReadHandle::ReadHandle(std::shared_ptr<Entry> entry, int64_t version)
    : entry_(std::move(entry)), version_(version) {}

TensorStore::ReadHandle::ReadHandle(ReadHandle&& other) noexcept
    : entry_(std::move(other.entry_)), version_(other.version_) {}

TensorStore::ReadHandle& TensorStore::ReadHandle::operator=(ReadHandle&& other) noexcept {
  if (this != &other) {
    Release();
    entry_ = std::move(other.entry_);
    version_ = other.version_;
  }
  return *this;
}

TensorStore::ReadHandle::~ReadHandle() { Release(); }

void TensorStore::ReadHandle::Release() {
  if (entry_ == nullptr) return;
  entry_->lock.UnlockShared();
  entry_.reset();
}

TensorView TensorStore::ReadHandle::view() const {
  return TensorView(entry_->dtype, entry_->shape, entry_->data).InSpace(entry_->memory->space());
}
const std::string& TensorStore::ReadHandle::name() const { return entry_->name; }
const TensorMemory& TensorStore::ReadHandle::memory() const { return *entry_->memory; }
absl::Status TensorStore::ReadHandle::CopyToHost(int64_t offset, int64_t bytes, void* host) const {
  return entry_->memory->CopyToHost(host, static_cast<const char*>(entry_->data) + offset, bytes);
}
DataType TensorStore::ReadHandle::dtype() const { return entry_->dtype; }
const Shape& TensorStore::ReadHandle::shape() const { return entry_->shape; }
int64_t TensorStore::ReadHandle::bytes() const { return entry_->bytes; }
// Set before the value became visible, never changed after: no lock needed.
uint64_t TensorStore::ReadHandle::serial() const { return entry_->serial; }

// ---- UpdateHandle ----

TensorStore::UpdateHandle::UpdateHandle(std::shared_ptr<State> state, std::string ns,
                                        std::shared_ptr<Entry> entry, int64_t version)
    : state_(std::move(state)), ns_(std::move(ns)), entry_(std::move(entry)), version_(version) {}

TensorStore::UpdateHandle::UpdateHandle(UpdateHandle&& other) noexcept
    : state_(std::move(other.state_)),
      ns_(std::move(other.ns_)),
      entry_(std::move(other.entry_)),
      version_(other.version_),
      already_applied_(other.already_applied_),
      held_(std::exchange(other.held_, false)),
      logged_(std::exchange(other.logged_, std::nullopt)),
      logged_time_(other.logged_time_) {}

TensorStore::UpdateHandle& TensorStore::UpdateHandle::operator=(UpdateHandle&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
    ns_ = std::move(other.ns_);
    entry_ = std::move(other.entry_);
    version_ = other.version_;
    already_applied_ = other.already_applied_;
    held_ = std::exchange(other.held_, false);
    logged_ = std::exchange(other.logged_, std::nullopt);
    logged_time_ = other.logged_time_;
  }
  return *this;
}

TensorStore::UpdateHandle::~UpdateHandle() { Release(); }

void TensorStore::UpdateHandle::Release() {
  if (!held_) return;
  held_ = false;
  // Journaled but never committed: whatever it wrote, recovery must not run it again. Recorded
  // while the lock is still held, so before any later update of the tensor.
  if (logged_.has_value()) {
    if (StoreJournal* journal = state_->Journal()) journal->LogCancel(*logged_);
    logged_.reset();
  }
  entry_->lock.Unlock();
}

absl::Status TensorStore::UpdateHandle::LogChange(std::string call, std::string_view update_id,
                                                  LockWait wait) {
  StoreJournal* const journal = state_->Journal();
  if (journal == nullptr) return absl::OkStatus();
  if (!held_ || already_applied_.has_value() || logged_.has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "update of tensor %s: nothing to journal (committed, a retry, or journaled already)",
        QuoteName(entry_->name)));
  }
  uint64_t serial;
  {
    absl::ReaderMutexLock lock(&state_->mu);
    // Overwritten or deleted meanwhile: Commit will say so, and nothing needs replaying.
    if (!entry_->live) return absl::OkStatus();
    serial = entry_->serial;
  }
  const absl::Time now = absl::Now();
  TENSOROPS_ASSIGN_OR_RETURN(logged_, journal->LogUpdate(ns_, entry_->name, serial, version_,
                                                         update_id, now, std::move(call), wait));
  logged_time_ = now;
  return absl::OkStatus();
}

MutableTensorView TensorStore::UpdateHandle::view() const {
  return MutableTensorView(entry_->dtype, entry_->shape, entry_->data)
      .InSpace(entry_->memory->space());
}
const std::string& TensorStore::UpdateHandle::name() const { return entry_->name; }
const TensorMemory& TensorStore::UpdateHandle::memory() const { return *entry_->memory; }
DataType TensorStore::UpdateHandle::dtype() const { return entry_->dtype; }
const Shape& TensorStore::UpdateHandle::shape() const { return entry_->shape; }
int64_t TensorStore::UpdateHandle::bytes() const { return entry_->bytes; }

absl::StatusOr<int64_t> TensorStore::UpdateHandle::Commit(std::string_view update_id) {
  if (!held_) {
    return absl::FailedPreconditionError("this update of a stored tensor is already committed");
  }
  if (already_applied_.has_value()) {
    return absl::FailedPreconditionError(
        "this update of a stored tensor is a retry of one already applied; it commits nothing");
  }
  bool live;
  int64_t version = 0;
  {
    // The version changes with `lock` held exclusively, so no reader sees the new bytes under
    // the old version.
    absl::MutexLock commit(&state_->commit_mu);
    absl::MutexLock lock(&state_->mu);
    live = entry_->live;
    if (live) {
      version = ++entry_->version;
      entry_->updated = logged_.has_value() ? logged_time_ : absl::Now();
      if (!update_id.empty()) state_->RememberLocked(ns_, update_id, entry_->name, version);
    }
  }
  const std::optional<StoreJournal::Ticket> logged = std::exchange(logged_, std::nullopt);
  Release();
  // Let go of the bytes too: when the value was overwritten or deleted meanwhile, this handle
  // may be the last to hold them.
  const std::shared_ptr<Entry> entry = std::move(entry_);
  if (!live) {
    // Lost, so its record is cancelled: replayed, it would apply to the value it found (recovery
    // replays in log order, the overwrite after it) and remember its update id, which a retry
    // after a restart would then find applied, where without the restart it applies.
    if (logged.has_value()) {
      if (StoreJournal* journal = state_->Journal()) journal->LogCancel(*logged);
    }
    return absl::AbortedError(absl::StrFormat(
        "tensor %s was overwritten or deleted while this update held it; the update is lost",
        QuoteName(entry->name)));
  }
  version_ = version;
  if (logged.has_value()) {
    if (StoreJournal* journal = state_->Journal()) {
      TENSOROPS_RETURN_IF_ERROR(journal->AwaitDurable(*logged));
    }
  }
  return version;
}

}  // namespace tensorops
