// DurableStore: a tensor store that survives a restart and a crash (--store_dir). It keeps the
// store's state in one directory as snapshots of every stored tensor and an append-only log of
// every change since, and rebuilds the store from them at start-up.
//
//   TENSOROPS_ASSIGN_OR_RETURN(
//       std::unique_ptr<DurableStore> durable,
//       DurableStore::Open({.dir = "/var/lib/tensorops", .sync = StoreSync::kAlways}, &store,
//                          replay_update));                  // recovers, then journals
//   ... serve calls: every change to `store` is logged before it takes effect ...
//   TENSOROPS_RETURN_IF_ERROR(durable->Close().status());   // a last snapshot
//
// What a crash may lose: with kAlways, nothing acknowledged (a change is acknowledged once its
// record is written and fsynced). With kInterval and kNone, puts, deletes and store_as are
// acknowledged once their record is written (a crash of the process loses none of them), while an
// in-place update is acknowledged once its record is queued for the log's writer thread, which
// writes the queue in order as it fills (so the update's own call does not wait for its bytes to
// be checksummed and copied into the page cache): a crash of the process loses at most the updates
// still queued, normally none or a few milliseconds' worth, at most kMaxQueuedUpdateBytes (or one
// larger update alone).
// A crash of the machine loses at most the last sync interval with kInterval (the writer keeps up
// unless the disk cannot, and then calls wait for it), and whatever the OS had not yet written
// with kNone. Recovery always gives the state after a prefix of the acknowledged changes, in
// their order: never a later change without an earlier one.
//
// Files, in the directory (docs/store-files.md has the format):
//   snapshot-<G>.tosnap   every tensor as of the start of log G (and maybe some of G's changes),
//                         with each namespace's remembered update ids; written to a .tmp name
//                         and renamed once complete and synced
//   log-<G>.tolog         every change since: values committed (whole), deletes, in-place updates
//                         (the op call, replayed on the CPU: an update on the GPU runs
//                         deterministically, so both give the same bytes), cancelled updates
//   LOCK                  held (flock) by the server using the directory
// A snapshot of generation G starts log G first (no change is lost between the two), then writes
// each tensor under its read lock, at one whole version, while calls go on; once it is renamed,
// the older snapshot and logs are deleted. Recovery loads the latest snapshot, then replays logs
// G, G+1, ...: a value is replaced whole, an update is replayed only onto the value (serial) and
// version it was made on, so changes a snapshot already holds are skipped. A torn last record
// (a crash mid-write) is dropped; any other damage stops recovery (kStrict: the server does not
// start; kDiscard: the files move to damaged-<time>/ and the store starts empty).
#ifndef TENSOROPS_SERVER_STORE_DURABLE_STORE_H_
#define TENSOROPS_SERVER_STORE_DURABLE_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/store_files.h"
#include "server/store/tensor_store.h"
#include "tensorops/storefiles/v1/store_files.pb.h"

namespace tensorops {

// StoreSync is when the log is fsynced (--store_sync).
enum class StoreSync {
  kAlways,    // before a change is acknowledged (one fsync serves every change waiting on it)
  kInterval,  // at least every DurableStoreOptions::sync_interval
  kNone,      // when the OS writes it back
};
// StoreRecovery is what recovery does with a damaged file (--store_recover).
enum class StoreRecovery {
  kStrict,   // refuse to start, naming the file and offset
  kDiscard,  // move every store file to damaged-<time>/ and start empty
};

absl::StatusOr<StoreSync> ParseStoreSync(std::string_view text);
std::string_view StoreSyncName(StoreSync sync);
absl::StatusOr<StoreRecovery> ParseStoreRecovery(std::string_view text);
std::string_view StoreRecoveryName(StoreRecovery recovery);

struct DurableStoreOptions {
  // The directory (created when missing).
  std::string dir;
  StoreSync sync = StoreSync::kInterval;
  // kInterval: the longest an acknowledged change waits for its fsync, > 0.
  absl::Duration sync_interval = absl::Milliseconds(100);
  // How often a snapshot is written (only when something changed since the last); 0: only on
  // request and at Close.
  absl::Duration snapshot_interval = absl::Minutes(10);
  StoreRecovery recovery = StoreRecovery::kStrict;
  // Namespaces the files may hold under an earlier name (the "token-N" of servers before tenants
  // were named: TokenAuthenticator::LegacyNamespaces): recovery reads every record of one, in a
  // file such a server wrote, into the namespace it maps to; the files written from then on say
  // that their namespaces are final (FileHeader.tenant_namespaces), and the next snapshot holds
  // only the new names. nullopt (a server without --auth_token_file) renames nothing, and the
  // files it writes say what the files it recovered said, so that a later server with the token
  // file still renames what earlier servers wrote.
  std::optional<absl::flat_hash_map<std::string, std::string>> renamed_namespaces;
};

// ReplayUpdate runs a logged in-place update again on the store: `call` (a tensorops.v1.OpRequest)
// updates tensor `name` of `ns`, which is at `from_version`, in place, on the CPU, without its
// update id.
using ReplayUpdate = std::function<absl::Status(std::string_view ns, std::string_view name,
                                                int64_t from_version, std::string_view call)>;

// RecoveryReport says what Open found and did.
struct RecoveryReport {
  // The snapshot loaded ("" when there was none) and the logs replayed, in order.
  std::string snapshot;
  std::vector<std::string> logs;
  int64_t tensors = 0;       // in the store once recovered
  int64_t tensor_bytes = 0;  // their bytes
  int64_t records = 0;       // log records replayed
  int64_t skipped = 0;       // log records a snapshot already held, or cancelled updates
  int64_t failed = 0;        // updates whose replay failed (each a warning in `warnings`)
  int64_t torn_records = 0;  // torn last records dropped
  // Records read into another namespace (DurableStoreOptions::renamed_namespaces).
  int64_t renamed_records = 0;
  std::vector<std::string> warnings;
  // kDiscard: where the damaged files went ("" when nothing was damaged).
  std::string discarded_to;
  absl::Duration duration;
};

// SnapshotReport describes one snapshot written.
struct SnapshotReport {
  std::string path;
  int64_t generation = 0;
  int64_t tensors = 0;
  int64_t bytes = 0;  // the file's size
  absl::Time written;
  absl::Duration duration;
};

// DurableStoreStats are the figures the metrics export.
struct DurableStoreStats {
  // The last snapshot written (or loaded at start-up); absl::InfinitePast() when none.
  absl::Time snapshot_time = absl::InfinitePast();
  int64_t snapshot_bytes = 0;
  // Bytes of log since the last snapshot (what recovery would replay).
  int64_t log_bytes = 0;
  // Payload bytes of in-place updates acknowledged and not yet written to the log.
  int64_t queued_update_bytes = 0;
  int64_t fsyncs = 0;
  absl::Duration fsync_time;
  absl::Duration recovery_time;
};

class DurableStore final : public StoreJournal {
 public:
  // The most bytes of in-place updates acknowledged and not yet written (kInterval, kNone): an
  // update that would queue more waits for the writer (one larger update queues alone), which
  // bounds both what a crash of the process may lose and the memory the queue takes beside
  // --max_memory_bytes.
  static constexpr int64_t kMaxQueuedUpdateBytes = int64_t{32} << 20;

  // Open locks `options.dir` (FAILED_PRECONDITION when another server holds it), recovers the
  // store from its files into `store` (which must be empty, and outlive this object), starts a
  // new log and makes itself `store`'s journal. Errors name the directory, file and offset: a
  // damaged file under kStrict (DATA_LOSS), a tensor the store's limit cannot hold
  // (RESOURCE_EXHAUSTED), an I/O error.
  static absl::StatusOr<std::unique_ptr<DurableStore>> Open(const DurableStoreOptions& options,
                                                            TensorStore* store,
                                                            ReplayUpdate replay);

  // Stops the background thread and detaches from the store, without a last snapshot (Close).
  ~DurableStore() override;

  // Snapshot writes a snapshot of the whole store now (waiting for one in progress first) and
  // deletes the files it makes redundant.
  absl::StatusOr<SnapshotReport> Snapshot();
  // Close writes a last snapshot when anything changed since the last one, then detaches from
  // the store: call it once no change can arrive (the server's calls have ended). Returns the
  // snapshot written, if any.
  absl::StatusOr<std::optional<SnapshotReport>> Close();

  const RecoveryReport& recovery() const { return recovery_; }
  DurableStoreStats stats() const;
  const DurableStoreOptions& options() const { return options_; }

  // StoreJournal.
  absl::StatusOr<Ticket> LogPut(const Put& put) override;
  absl::StatusOr<Ticket> LogDelete(std::string_view ns, std::string_view name) override;
  absl::StatusOr<Ticket> LogUpdate(std::string_view ns, std::string_view name, uint64_t serial,
                                   int64_t from_version, std::string_view update_id,
                                   absl::Time updated, std::string call, LockWait wait) override;
  void LogCancel(const Ticket& ticket) override;
  absl::Status AwaitDurable(const Ticket& ticket) override;

 private:
  DurableStore(const DurableStoreOptions& options, TensorStore* store, int lock_fd);

  // Recover loads the files into the store (recovery_), and returns the next generation.
  absl::StatusOr<int64_t> Recover(const ReplayUpdate& replay);
  // StartLog creates log `generation` and makes it the one appended to.
  absl::Status StartLog(int64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);
  // Append writes one record to the current log, after every queued update; an error means it
  // was not written.
  absl::StatusOr<Ticket> Append(RecordKind kind, const google::protobuf::MessageLite& meta,
                                int64_t payload_bytes = 0, const PayloadSource& payload = {});
  // AwaitQueueWritten returns once the writer has written every queued update (or given up on
  // them: broken_ then says why).
  void AwaitQueueWritten() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);
  // WriteQueue is the writer thread: it writes the queued updates in order until StopWriter.
  void WriteQueue();
  // StopWriter lets the writer write what is queued, then stops it; later updates are written by
  // their callers.
  void StopWriter();
  // SyncLog fsyncs the current log (kAlways: for every ticket waiting; kInterval: from the
  // background thread).
  absl::Status SyncLog();
  // BreakAfterFailedSync makes every further change fail (broken_) after fsync failed `synced`.
  void BreakAfterFailedSync(const absl::Status& synced) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);
  bool DurableLocked(const Ticket& ticket) const ABSL_SHARED_LOCKS_REQUIRED(sync_mu_);
  absl::StatusOr<SnapshotReport> SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  // SleepUntil waits until `wake`; false when the store is stopping (stop_) instead.
  bool SleepUntil(absl::Time wake);
  // IntervalSyncs (kInterval, kNone) syncs the log every sync_interval, and PeriodicSnapshots
  // snapshots every snapshot_interval when anything changed, each on a thread of its own until
  // stop_; StopBackground stops and joins both.
  void IntervalSyncs();
  void PeriodicSnapshots();
  void StopBackground();
  std::string PathOf(std::string_view file) const;

  const DurableStoreOptions options_;
  TensorStore* const store_;
  const int lock_fd_;
  RecoveryReport recovery_;
  // What the files written say of their namespaces (FileHeader.tenant_namespaces): false only
  // while a server without the names of now (renamed_namespaces nullopt) carries files of an
  // earlier server's names. Set by Recover, before any file is written.
  bool tenant_namespaces_ = true;

  // Held while a snapshot is written: one at a time.
  absl::Mutex snapshot_mu_ ABSL_ACQUIRED_BEFORE(log_mu_);
  int64_t snapshot_generation_ ABSL_GUARDED_BY(snapshot_mu_) = 0;

  mutable absl::Mutex log_mu_ ABSL_ACQUIRED_BEFORE(sync_mu_);
  // Shared with a sync in progress, which must not lose the file to a rotation.
  std::shared_ptr<RecordFile> log_ ABSL_GUARDED_BY(log_mu_);
  int64_t generation_ ABSL_GUARDED_BY(log_mu_) = 0;
  // Bytes of the logs before the current one that the last snapshot has not yet absorbed.
  int64_t older_log_bytes_ ABSL_GUARDED_BY(log_mu_) = 0;
  // Changes logged since the last snapshot began.
  int64_t changes_ ABSL_GUARDED_BY(log_mu_) = 0;
  // Set when a record that must be in the log could not be written (a cancel, a queued update)
  // or a sync failed: from then on every change is refused, since the log no longer says what
  // memory holds.
  absl::Status broken_ ABSL_GUARDED_BY(log_mu_);

  // In-place updates acknowledged before their record is written (kInterval, kNone), in the
  // log's order: the writer thread writes them, and every other record waits for them.
  struct QueuedUpdate {
    storefiles::v1::UpdatedTensor meta;
    std::string call;  // the payload
    Ticket ticket;     // where it goes, decided when it was queued
  };
  std::deque<QueuedUpdate> queued_ ABSL_GUARDED_BY(log_mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(log_mu_) = 0;
  // Where the next record of the current log goes: its size once the queue is written.
  int64_t log_end_ ABSL_GUARDED_BY(log_mu_) = 0;
  // The current log's size as of its last completed append; log_->size() itself moves while the
  // writer appends without log_mu_.
  int64_t written_end_ ABSL_GUARDED_BY(log_mu_) = 0;
  bool writer_running_ ABSL_GUARDED_BY(log_mu_) = false;
  bool writer_stop_ ABSL_GUARDED_BY(log_mu_) = false;
  std::thread writer_;

  mutable absl::Mutex sync_mu_;
  // Everything up to (synced_generation_, synced_end_) is durable.
  int64_t synced_generation_ ABSL_GUARDED_BY(sync_mu_) = 0;
  int64_t synced_end_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);
  int64_t fsyncs_ ABSL_GUARDED_BY(sync_mu_) = 0;
  absl::Duration fsync_time_ ABSL_GUARDED_BY(sync_mu_);

  mutable absl::Mutex stats_mu_;
  absl::Time snapshot_time_ ABSL_GUARDED_BY(stats_mu_) = absl::InfinitePast();
  int64_t snapshot_bytes_ ABSL_GUARDED_BY(stats_mu_) = 0;

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread syncer_;
  std::thread snapshotter_;
  bool closed_ = false;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_STORE_DURABLE_STORE_H_
