// TensorStore: resident tensors, named tensors kept in the server's memory, referenced by name
// in any op and updated in place. This is the store alone (no RPCs); thread-safe.
//
//   TensorStore store(/*limit_bytes=*/1 << 30);            // --store_memory_bytes
//   TENSOROPS_ASSIGN_OR_RETURN(TensorStore::Upload upload,
//                              store.BeginUpload(ns, "w/layer0", DataType::kFloat32, {1024, 64}));
//   TENSOROPS_RETURN_IF_ERROR(upload.Write(0, chunk0));  // chunks in order, offset = bytes so far
//   TENSOROPS_RETURN_IF_ERROR(upload.Write(chunk0.size(), chunk1));
//   TENSOROPS_ASSIGN_OR_RETURN(int64_t version, upload.Commit());  // visible from here on
//
//   TENSOROPS_ASSIGN_OR_RETURN(TensorStore::ReadHandle read, store.Read(ns, "w/layer0"));
//   RunKernel(read.view());                                // bytes stay valid while `read` lives
//
//   TENSOROPS_ASSIGN_OR_RETURN(TensorStore::UpdateHandle update, store.Update(ns, "w/layer0"));
//   RunKernelInPlace(update.view());                       // exclusive: no reader, no updater
//   TENSOROPS_ASSIGN_OR_RETURN(int64_t new_version, update.Commit());
//
// Names are 1..256 bytes of [A-Za-z0-9._/-], not starting with '/' or '.'. Each lives in a
// namespace, a string the caller passes (with token auth a per-token id, without it ""): one
// namespace can neither see, read, list, change nor delete another's tensors, and no message
// names a namespace. Every stored tensor has a version, 1 when its name is created and one more
// for every change (an overwrite or a committed in-place update); a deleted and re-created name
// starts again at 1.
//
// Concurrency. Each tensor's bytes have a reader/writer lock: a ReadHandle holds it shared, an
// UpdateHandle exclusively, each for as long as it lives, so a reader sees one whole version and
// updates of one tensor run one at a time (a waiting updater goes before newly arriving readers,
// so a stream of reads cannot starve it). Overwrites and deletes wait for no handle: they swap
// the name's entry, and the old bytes (and their share of the memory limit) go when the last
// handle on them does. Handles may be destroyed on any thread, not only the one that made them.
// Never take a second handle on a tensor while holding an UpdateHandle on it, nor an
// UpdateHandle while holding a ReadHandle on it, on one thread: that deadlocks.
//
// Memory. Every upload reserves its bytes against the limit when it begins, and the reservation
// becomes the stored tensor's at Commit; so overwriting a tensor needs room for both values until
// the commit frees the old one. used_bytes() counts everything so held: stored tensors, uploads
// in flight, and replaced or deleted values still held by a handle, each as the memory it really
// takes (TensorMemory::FootprintBytes: on the host a tensor of 2 MiB or more is allocated in
// whole 2 MiB huge pages, and counts so), so that the limit bounds the process's memory. A limit
// of 0 turns the store off: every upload fails with RESOURCE_EXHAUSTED. Bytes are 64-byte
// aligned, never zero-filled, and sized in int64, so one tensor may pass 2 GiB; a failed
// allocation is RESOURCE_EXHAUSTED.
//
// Durability. With a journal (SetJournal; durable_store.h implements it), every change is
// recorded before it takes effect: a commit (Upload::Commit) and a Delete are journaled under one
// store-wide commit lock, so the journal's order is the order in which names change, and an
// in-place update is journaled by its caller (UpdateHandle::LogChange) before it writes. A change
// the journal refuses is not made. A commit then waits, outside every lock, until the journal
// says the change is as durable as promised (StoreJournal::AwaitDurable).
//
// Placement. The bytes live in one TensorMemory (kernels/tensor_memory.h): host memory by
// default, a GPU's with --store_device=cuda. Device bytes are never touched by the CPU here: an
// upload's chunks are copied in (Upload::Write), a download's copied out (CopyToHost), and a
// handle's view() points into device memory, for a device kernel to read or write.
#ifndef TENSOROPS_SERVER_STORE_TENSOR_STORE_H_
#define TENSOROPS_SERVER_STORE_TENSOR_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"
#include "kernels/tensor_memory.h"

namespace tensorops {

// kMaxTensorNameBytes is the longest name the store takes.
inline constexpr int64_t kMaxTensorNameBytes = 256;

// kStoreMemoryFlag is the server flag that sets a store's limit; errors about the limit name it.
inline constexpr char kStoreMemoryFlag[] = "--store_memory_bytes";

// ValidateTensorName returns OK for a valid name and otherwise INVALID_ARGUMENT naming the rule
// broken and the name (escaped, and shortened when long, so that a binary or huge name stays
// readable).
absl::Status ValidateTensorName(std::string_view name);

// TensorStoreUploadOptions (TensorStore::UploadOptions) say whether an upload may replace an
// existing tensor of the same name.
struct TensorStoreUploadOptions {
  // Replace whatever value the name has (or none).
  bool overwrite = false;
  // The name must exist at exactly this version (>= 1), checked at BeginUpload and again at
  // Commit, whatever `overwrite` says. Lets a client replace only the value it read.
  std::optional<int64_t> expected_version;
};

// TensorStoreMetadata (TensorStore::Metadata) describes one stored tensor.
struct TensorStoreMetadata {
  std::string name;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  int64_t bytes = 0;
  int64_t version = 0;
  std::string device;
  // When the name was first committed (kept across overwrites, as the version count is) and
  // when its value last changed (a commit or an in-place update).
  absl::Time created;
  absl::Time updated;
  // Unique among every value the store has committed (an overwrite is a new value, an in-place
  // update is not): what a journaled update names to be replayed onto the right value.
  uint64_t serial = 0;
};

// LockWait says whether TensorStore::Read and Update may wait for a tensor's lock: kTry returns
// at once with a status IsStoreBusy recognises instead. A caller on a thread that must not block
// (gRPC's) tries there first and waits elsewhere only when the tensor is busy.
enum class LockWait { kWait, kTry };

// StoreBusyError is the status of a Read or Update with LockWait::kTry that would have waited on
// tensor `name`; IsStoreBusy recognises it (and only it).
absl::Status StoreBusyError(std::string_view name);
bool IsStoreBusy(const absl::Status& status);

// StoreJournal records a store's changes (TensorStore::SetJournal). Its calls may come from any
// thread at once.
class StoreJournal {
 public:
  // Where a change's record is, for AwaitDurable and LogCancel.
  struct Ticket {
    int64_t generation = 0;
    int64_t offset = 0;
    int64_t end = 0;
  };
  // A committed value: its metadata and its bytes (`data`, in `memory`).
  struct Put {
    std::string_view ns;
    const TensorStoreMetadata& metadata;
    std::string_view update_id;
    const TensorMemory& memory;
    const void* data;
  };

  virtual ~StoreJournal() = default;
  // LogPut records a value about to replace whatever its name had; LogDelete a name about to go;
  // LogUpdate an in-place update of the value `serial`, at `from_version`, about to run
  // (`call` says what it does, for the journal to replay). An error means the change must not
  // be made. With LockWait::kTry, an update whose record would wait (for the disk, or for room
  // among records not yet written) is the error IsStoreBusy recognises instead, nothing logged.
  virtual absl::StatusOr<Ticket> LogPut(const Put& put) = 0;
  virtual absl::StatusOr<Ticket> LogDelete(std::string_view ns, std::string_view name) = 0;
  virtual absl::StatusOr<Ticket> LogUpdate(std::string_view ns, std::string_view name,
                                           uint64_t serial, int64_t from_version,
                                           std::string_view update_id, absl::Time updated,
                                           std::string call, LockWait wait) = 0;
  // LogCancel records that the update `ticket` recorded did not complete.
  virtual void LogCancel(const Ticket& ticket) = 0;
  // AwaitDurable returns once the change `ticket` recorded is as durable as promised; an error
  // when it cannot be (the change is then in memory but must not be acknowledged).
  virtual absl::Status AwaitDurable(const Ticket& ticket) = 0;
};

// TensorStoreRestored is a value recovered from a journal (Upload::CommitRestored).
struct TensorStoreRestored {
  int64_t version = 1;
  uint64_t serial = 0;
  absl::Time created;
  absl::Time updated;
};

// kRememberedChangesPerNamespace is how many update ids (Upload::Commit, UpdateHandle::Commit) a
// namespace remembers: a retry of one of its latest changes finds it instead of applying again.
inline constexpr int64_t kRememberedChangesPerNamespace = 10000;

// TensorStoreChange (TensorStore::Change) is what a committed change that carried an update id
// made: the tensor's name and the version it produced.
struct TensorStoreChange {
  std::string name;
  int64_t version = 0;
};

// TensorStoreRemembered is one namespace's remembered changes, oldest first.
struct TensorStoreRemembered {
  std::string ns;
  std::vector<std::pair<std::string, TensorStoreChange>> changes;
};

// TensorStore holds the resident tensors of every namespace. Thread-safe (see the file comment).
class TensorStore {
 public:
  class Upload;
  class ReadHandle;
  class UpdateHandle;

  // Declared outside the class only because GCC cannot take `= {}` as a default argument of a
  // nested struct with member initializers inside the enclosing class.
  using UploadOptions = TensorStoreUploadOptions;
  using Metadata = TensorStoreMetadata;
  using Change = TensorStoreChange;
  using Restored = TensorStoreRestored;
  using Remembered = TensorStoreRemembered;

  // A store whose tensors may hold up to `limit_bytes` in all (0: the store is off), in `memory`
  // (null: HostTensorMemory()), which must outlive the store and every handle on it.
  explicit TensorStore(int64_t limit_bytes, TensorMemory* memory = nullptr);
  // Handles and uploads may outlive the store: they keep what they need alive.
  ~TensorStore();

  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // BeginUpload validates the name, dtype and shape (INVALID_ARGUMENT; the byte size must fit
  // int64 and the rank kMaxRank), checks the replace rules against the name's current value
  // (FAILED_PRECONDITION, see Upload::Commit) so that an upload bound to fail fails before its
  // bytes travel, reserves the bytes against the limit (RESOURCE_EXHAUSTED naming
  // --store_memory_bytes, the request's bytes and what is free, or saying the store is off) and
  // allocates them (RESOURCE_EXHAUSTED when the allocation fails).
  absl::StatusOr<Upload> BeginUpload(std::string_view ns, std::string_view name, DataType dtype,
                                     ShapeSpan shape, const UploadOptions& options = {});

  // Put stores a copy of `value` (any strides; stored contiguous) under `name`: BeginUpload, a
  // copy and Commit, with their errors. Returns the new version.
  absl::StatusOr<int64_t> Put(std::string_view ns, std::string_view name, const TensorView& value,
                              const UploadOptions& options = {});

  // Read returns a handle on the name's current value, waiting while an update holds it (or
  // waits for it: updaters go first), unless `wait` is LockWait::kTry: then a busy tensor is an
  // error IsStoreBusy recognises. NOT_FOUND naming the name when it does not exist (in this
  // namespace); FAILED_PRECONDITION naming the current version when `expected_version` is given
  // and differs.
  absl::StatusOr<ReadHandle> Read(std::string_view ns, std::string_view name,
                                  std::optional<int64_t> expected_version = std::nullopt,
                                  LockWait wait = LockWait::kWait) const;

  // Update returns an exclusive handle on the name's current value, waiting for its readers and
  // any other updater to finish. Errors as Read's; the version is checked once the handle holds
  // the lock, so it is the version the update starts from. With an `update_id` that a committed
  // change of this namespace already carried (FindChange), the handle comes back with
  // already_applied() set instead and no version check: the caller is a retry of that change,
  // and must not apply it again. Checked under the lock, so a retry that waited for its first
  // attempt to commit finds it.
  // With LockWait::kTry a tensor another handle holds, or another updater waits for, is the
  // error IsStoreBusy recognises instead of a wait.
  absl::StatusOr<UpdateHandle> Update(std::string_view ns, std::string_view name,
                                      std::optional<int64_t> expected_version = std::nullopt,
                                      std::string_view update_id = {},
                                      LockWait wait = LockWait::kWait);

  // FindChange returns the change that carried `update_id` in `ns`, among the namespace's latest
  // kRememberedChangesPerNamespace; nullopt when it is not remembered.
  std::optional<Change> FindChange(std::string_view ns, std::string_view update_id) const;

  // Delete removes the name at once, without waiting for handles on it (they keep the old bytes
  // until they go). NOT_FOUND and FAILED_PRECONDITION as Read's.
  absl::Status Delete(std::string_view ns, std::string_view name,
                      std::optional<int64_t> expected_version = std::nullopt);

  // List returns the namespace's tensors sorted by name (empty for an unknown namespace).
  std::vector<Metadata> List(std::string_view ns) const;

  // Info returns one tensor's metadata; NOT_FOUND naming the name when it does not exist.
  absl::StatusOr<Metadata> Info(std::string_view ns, std::string_view name) const;

  // Bytes held against the limit: stored tensors, uploads in flight, and replaced or deleted
  // values that a handle still holds, each as the memory it takes (see Memory above).
  int64_t used_bytes() const;
  int64_t limit_bytes() const;
  // FootprintOf is what a tensor of `bytes` counts against the limit (see Memory above).
  int64_t FootprintOf(int64_t bytes) const;
  // Tensors visible by name, across every namespace.
  int64_t tensor_count() const;
  bool enabled() const { return limit_bytes() > 0; }
  // The device the tensors live on: "cpu", "cuda:0".
  std::string device() const;

  // ---- Durability (durable_store.h) ----

  // SetJournal makes `journal` (not owned; null: none) record every change from now on (see
  // Durability above). Set it before calls arrive, and unset it before it goes.
  void SetJournal(StoreJournal* journal);
  bool journaled() const;
  // ReadWithMetadata is Read (of whatever version is current) with the value's metadata.
  absl::StatusOr<std::pair<ReadHandle, Metadata>> ReadWithMetadata(std::string_view ns,
                                                                   std::string_view name) const;
  // Names lists every (namespace, name) in the store.
  std::vector<std::pair<std::string, std::string>> Names() const;
  // RememberedChanges is every namespace's remembered update ids, oldest first; Remember adds
  // one (recovery), as a committed change that carried it would.
  std::vector<Remembered> RememberedChanges() const;
  void Remember(std::string_view ns, std::string_view update_id, const Change& change);
  // RestoreUpdated sets a tensor's change time to the one its journal recorded (a replayed
  // update commits at replay time otherwise).
  void RestoreUpdated(std::string_view ns, std::string_view name, absl::Time updated);
  // WhileCommitsPaused runs `fn` while no value is committed, deleted or updated (in-place
  // commits wait too; updates already running go on until they commit): a journal starts a new
  // log there, so that no change is logged in one log and made after a snapshot began.
  void WhileCommitsPaused(const std::function<void()>& fn);
  // The serial the next committed value gets (Metadata::serial); a recovered store continues
  // from where the journal left it (CommitRestored raises it past every restored serial).
  uint64_t next_serial() const;

 private:
  struct Entry;
  struct State;

  std::shared_ptr<State> state_;
};

// TensorStore::Upload is one upload in progress: fill its bytes in order with Write (or
// MutableChunk), then Commit. Destroying it without a successful Commit (a failed or cancelled
// stream) leaves nothing behind and releases its reservation. Move-only; not thread-safe (one
// caller fills it), though any number of uploads may run at once.
class TensorStore::Upload {
 public:
  Upload(Upload&&) noexcept;
  Upload& operator=(Upload&&) noexcept;
  ~Upload();

  // Write copies `bytes` (host memory) to `offset`. Chunks must arrive in order: `offset` must
  // equal bytes_received(), and the chunk must end within bytes() (INVALID_ARGUMENT otherwise,
  // the upload unchanged). FAILED_PRECONDITION after a successful Commit. A bool tensor bound for
  // device memory has its bytes checked here (INVALID_ARGUMENT), not at Commit.
  absl::Status Write(int64_t offset, std::string_view bytes);

  // MutableChunk is Write without the copy: it returns the `size` bytes at `offset` for the
  // caller to fill before Commit, and counts them as received. Same rules as Write. The bytes
  // are in the store's memory: with device memory only a device kernel may fill them.
  absl::StatusOr<absl::Span<char>> MutableChunk(int64_t offset, int64_t size);

  // Commit makes the tensor visible under its name, atomically; returns its version (1 for a new
  // name, the old version + 1 for a replaced one). INVALID_ARGUMENT when not every byte was
  // written, or for a bool tensor with a byte other than 0 or 1. FAILED_PRECONDITION when the
  // name exists and neither `overwrite` nor a matching `expected_version` was given ("... exists at
  // version 3; pass overwrite or expected_version=3"), when `expected_version` differs from the
  // current version, or when it was given for a name that does not exist. On failure the upload
  // stays uncommitted (destroy it to release its bytes); a second Commit is FAILED_PRECONDITION. A
  // non-empty `update_id` is remembered with the change (FindChange); when the namespace already
  // remembers it (a retry racing its first attempt), nothing is committed and the version that
  // change made is returned.
  absl::StatusOr<int64_t> Commit(std::string_view update_id = {});

  // CommitRestored is Commit for recovery: the value replaces whatever the name has, whatever
  // the options, with the version, serial and times it had, and nothing is journaled or
  // remembered.
  absl::Status CommitRestored(const Restored& restored);

  const std::string& name() const { return name_; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t bytes() const { return bytes_; }
  int64_t bytes_received() const { return received_; }
  // Where the bytes are (MutableChunk's memory). Valid until Commit.
  const TensorMemory& memory() const;
  bool committed() const { return committed_; }
  // What Commit stored, as it was at the commit (its version, serial and times): describes this
  // call's value even when another call has replaced or deleted it since. nullopt before Commit,
  // and after one that found its update id remembered (it stored nothing).
  const std::optional<Metadata>& stored() const { return stored_; }

 private:
  friend class TensorStore;
  Upload(std::shared_ptr<State> state, std::string ns, std::shared_ptr<Entry> entry,
         UploadOptions options);
  // CheckBools: INVALID_ARGUMENT when a bool tensor's `size` bytes at `data` (host memory, the
  // tensor's bytes from `offset`) hold a value other than 0 or 1.
  absl::Status CheckBools(int64_t offset, const void* data, int64_t size) const;

  std::shared_ptr<State> state_;
  std::string ns_;
  // The value being uploaded, not yet in the map; null once committed (the map holds it then,
  // and a lingering Upload must not keep a deleted value's bytes) or moved from.
  std::shared_ptr<Entry> entry_;
  UploadOptions options_;
  std::string name_;
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  int64_t bytes_ = 0;
  int64_t received_ = 0;
  bool committed_ = false;
  std::optional<Metadata> stored_;
};

// TensorStore::ReadHandle holds one version of a tensor: its bytes stay allocated and unchanged
// (shared lock) for as long as the handle lives, even if the name is overwritten or deleted
// meanwhile. Move-only.
class TensorStore::ReadHandle {
 public:
  ReadHandle(ReadHandle&&) noexcept;
  ReadHandle& operator=(ReadHandle&&) noexcept;
  ~ReadHandle();

  // view is the whole tensor, contiguous; valid while the handle lives. In device memory when
  // !memory().host_accessible().
  TensorView view() const;
  const TensorMemory& memory() const;
  // CopyToHost copies `bytes` of the tensor from byte `offset` to `host` (in range: the caller
  // checks). Errors are the memory's (a device error).
  absl::Status CopyToHost(int64_t offset, int64_t bytes, void* host) const;
  const std::string& name() const;
  DataType dtype() const;
  const Shape& shape() const;
  int64_t bytes() const;
  int64_t version() const { return version_; }
  // serial is the value's identity (Metadata::serial): a name deleted and stored again starts
  // again at version 1, with another serial, so a name and a version alone may be another value.
  uint64_t serial() const;

 private:
  friend class TensorStore;
  ReadHandle(std::shared_ptr<Entry> entry, int64_t version);
  void Release();

  std::shared_ptr<Entry> entry_;  // null once moved from
  int64_t version_ = 0;
};

// TensorStore::UpdateHandle holds a tensor exclusively for an in-place change. Commit bumps the
// version and releases the handle. Destroying it without Commit releases the lock and leaves the
// version as it was, but whatever was written through view() stays written: the store keeps no
// copy. So a caller whose change can fail after it starts writing (a kernel that finds a bad
// index halfway) must validate first, or compute into a copy and write it back, before it
// commits; otherwise readers see changed bytes under the old version. Move-only.
class TensorStore::UpdateHandle {
 public:
  UpdateHandle(UpdateHandle&&) noexcept;
  UpdateHandle& operator=(UpdateHandle&&) noexcept;
  ~UpdateHandle();

  // view is the whole tensor, contiguous and writable. It and the accessors below are valid
  // while held(): Commit lets go of the bytes. In device memory when !memory().host_accessible().
  MutableTensorView view() const;
  const TensorMemory& memory() const;
  const std::string& name() const;
  DataType dtype() const;
  const Shape& shape() const;
  int64_t bytes() const;
  // The version the update started from; after a successful Commit, the new one.
  int64_t version() const { return version_; }
  // held is true until Commit (or a move) releases the lock.
  bool held() const { return held_; }

  // The version a remembered change with the handle's update id made (see TensorStore::Update);
  // the handle holds the lock all the same, but nothing must be written through it.
  std::optional<int64_t> already_applied() const { return already_applied_; }

  // LogChange journals the update before anything is written through view(): `call` describes
  // it so that the journal can replay it (StoreJournal::LogUpdate), with now as the value's
  // change time, which Commit then gives it. Nothing to do without a
  // journal. On an error nothing must be written. Once logged, a handle released without a
  // successful Commit journals the update as cancelled. `wait` as StoreJournal::LogUpdate's.
  absl::Status LogChange(std::string call, std::string_view update_id,
                         LockWait wait = LockWait::kWait);

  // Commit returns the new version (version() + 1) and releases the lock, remembering a
  // non-empty `update_id` with the change (TensorStore::FindChange). ABORTED when the name
  // was overwritten or deleted while the handle held it (those do not wait): the change went to
  // bytes no one will read again. FAILED_PRECONDITION for a handle already committed or one
  // with already_applied() set.
  absl::StatusOr<int64_t> Commit(std::string_view update_id = {});

 private:
  friend class TensorStore;
  UpdateHandle(std::shared_ptr<State> state, std::string ns, std::shared_ptr<Entry> entry,
               int64_t version);
  void Release();

  std::shared_ptr<State> state_;
  std::string ns_;
  std::shared_ptr<Entry> entry_;  // null once committed or moved from
  int64_t version_ = 0;
  std::optional<int64_t> already_applied_;
  bool held_ = true;  // the lock on entry_'s bytes is ours to release
  // The journal's record of this update (LogChange), until Commit, and the change time it
  // recorded, which Commit gives the value.
  std::optional<StoreJournal::Ticket> logged_;
  absl::Time logged_time_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_STORE_TENSOR_STORE_H_
