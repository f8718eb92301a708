#include "server/store/durable_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "spdlog/spdlog.h"
#include "tensorops/storefiles/v1/store_files.pb.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

namespace fs = std::filesystem;
namespace files = storefiles::v1;

namespace {

constexpr int32_t kFormatVersion = 1;
constexpr char kLockFile[] = "LOCK";
constexpr char kTmpSuffix[] = ".tmp";
// Payloads in device memory are copied to the host in pieces of this size to be written.
constexpr int64_t kStagingBytes = int64_t{4} << 20;

int64_t UnixNanos(absl::Time time) { return absl::ToUnixNanos(time); }

// PayloadOf is the source of `bytes` bytes at `data` in `memory`: read in place from host
// memory, copied through a staging buffer from device memory.
PayloadSource PayloadOf(const TensorMemory& memory, const void* data, int64_t bytes) {
  const char* begin = static_cast<const char*>(data);
  if (memory.host_accessible()) {
    return HostPayload(std::string_view(begin, static_cast<size_t>(bytes)));
  }
  auto staging = std::make_shared<std::string>();
  return
      [&memory, begin, staging](int64_t offset, int64_t max) -> absl::StatusOr<std::string_view> {
        const int64_t n = std::min(max, kStagingBytes);
        staging->resize(static_cast<size_t>(n));
        TENSOROPS_RETURN_IF_ERROR(memory.CopyToHost(staging->data(), begin + offset, n));
        return std::string_view(*staging);
      };
}

absl::Status ParseMeta(const Record& record, const std::string& path,
                       google::protobuf::MessageLite* meta) {
  if (!meta->ParseFromString(record.meta)) {
    return absl::DataLossError(absl::StrFormat(
        "%s is damaged at offset %d: the record's metadata does not parse", path, record.offset));
  }
  return absl::OkStatus();
}

// Files is what a store directory holds, by generation.
struct Files {
  std::map<int64_t, std::string> snapshots;
  std::map<int64_t, std::string> logs;
  int64_t newest() const {
    int64_t newest = 0;
    if (!snapshots.empty()) newest = std::max(newest, snapshots.rbegin()->first);
    if (!logs.empty()) newest = std::max(newest, logs.rbegin()->first);
    return newest;
  }
};

absl::StatusOr<Files> ListFiles(const std::string& dir) {
  Files found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(kTmpSuffix)) {
      // An unfinished snapshot: never renamed, so never relied on.
      fs::remove(entry.path(), error);
      continue;
    }
    if (std::optional<int64_t> generation = ParseStoreFileName(name, /*snapshot=*/true)) {
      found.snapshots[*generation] = entry.path().string();
    } else if (std::optional<int64_t> log = ParseStoreFileName(name, /*snapshot=*/false)) {
      found.logs[*log] = entry.path().string();
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrFormat("cannot list --store_dir=%s: %s", dir, error.message()));
  }
  return found;
}

// Loader turns a StoredTensor record into an upload its payload fills, for CommitRestored.
class Loader {
 public:
  explicit Loader(TensorStore* store) : store_(store) {}

  absl::StatusOr<PayloadSink> Begin(const files::StoredTensor& meta, int64_t payload_bytes) {
    const absl::StatusOr<DataType> dtype = wire::DataTypeFromProto(meta.dtype(), "store", "dtype");
    if (!dtype.ok()) return absl::DataLossError(std::string(dtype.status().message()));
    absl::StatusOr<TensorStore::Upload> upload =
        store_->BeginUpload(meta.namespace_(), meta.name(), *dtype,
                            Shape(meta.shape().begin(), meta.shape().end()), {.overwrite = true});
    if (!upload.ok()) {
      return absl::Status(upload.status().code(),
                          absl::StrFormat("cannot restore tensor \"%s\": %s", meta.name(),
                                          upload.status().message()));
    }
    if (upload->bytes() != payload_bytes) {
      return absl::DataLossError(
          absl::StrFormat("tensor \"%s\" has %d bytes of data, but its dtype and shape make %d",
                          meta.name(), payload_bytes, upload->bytes()));
    }
    upload_.emplace(*std::move(upload));
    return [this](int64_t offset, std::string_view chunk) -> absl::Status {
      if (upload_->memory().host_accessible()) {
        TENSOROPS_ASSIGN_OR_RETURN(
            absl::Span<char> bytes,
            upload_->MutableChunk(offset, static_cast<int64_t>(chunk.size())));
        std::memcpy(bytes.data(), chunk.data(), chunk.size());
        return absl::OkStatus();
      }
      return upload_->Write(offset, chunk);
    };
  }

  // Commit makes the value just read current, as the record says.
  absl::Status Commit(const files::StoredTensor& meta) {
    absl::Status committed =
        upload_->CommitRestored({.version = meta.version(),
                                 .serial = meta.serial(),
                                 .created = absl::FromUnixNanos(meta.created_unix_nanos()),
                                 .updated = absl::FromUnixNanos(meta.updated_unix_nanos())});
    upload_.reset();
    return committed;
  }

 private:
  TensorStore* const store_;
  std::optional<TensorStore::Upload> upload_;
};

}  // namespace

absl::StatusOr<StoreSync> ParseStoreSync(std::string_view text) {
  if (text == "always") return StoreSync::kAlways;
  if (text == "interval") return StoreSync::kInterval;
  if (text == "none") return StoreSync::kNone;
  return absl::InvalidArgumentError(
      absl::StrFormat("--store_sync=%s is not a sync mode: always, interval or none", text));
}

std::string_view StoreSyncName(StoreSync sync) {
  switch (sync) {
    case StoreSync::kAlways:
      return "always";
    case StoreSync::kInterval:
      return "interval";
    case StoreSync::kNone:
      return "none";
  }
  return "?";
}

absl::StatusOr<StoreRecovery> ParseStoreRecovery(std::string_view text) {
  if (text == "strict") return StoreRecovery::kStrict;
  if (text == "discard") return StoreRecovery::kDiscard;
  return absl::InvalidArgumentError(
      absl::StrFormat("--store_recover=%s is not a recovery mode: strict or discard", text));
}

std::string_view StoreRecoveryName(StoreRecovery recovery) {
  return recovery == StoreRecovery::kStrict ? "strict" : "discard";
}

// ---- Opening and recovery ----

DurableStore::DurableStore(const DurableStoreOptions& options, TensorStore* store, int lock_fd)
    : options_(options), store_(store), lock_fd_(lock_fd) {}

absl::StatusOr<std::unique_ptr<DurableStore>> DurableStore::Open(const DurableStoreOptions& options,
                                                                 TensorStore* store,
                                                                 ReplayUpdate replay) {
  const absl::Time start = absl::Now();
  std::error_code error;
  fs::create_directories(options.dir, error);
  if (error || !fs::is_directory(options.dir)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--store_dir=%s cannot be used as a directory: %s", options.dir,
                        error ? error.message() : "it exists and is not one"));
  }
  const std::string lock_path = (fs::path(options.dir) / kLockFile).string();
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--store_dir=%s: cannot create %s: %s", options.dir, lock_path, std::strerror(errno)));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    close(lock_fd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "--store_dir=%s is in use by another tensorops-server (it holds %s); two servers cannot "
        "share a store directory",
        options.dir, lock_path));
  }
  std::unique_ptr<DurableStore> durable(new DurableStore(options, store, lock_fd));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t generation, durable->Recover(replay));
  {
    absl::MutexLock lock(&durable->log_mu_);
    TENSOROPS_RETURN_IF_ERROR(durable->StartLog(generation));
  }
  {
    absl::MutexLock lock(&durable->sync_mu_);
    durable->synced_generation_ = generation;
  }
  TENSOROPS_RETURN_IF_ERROR(SyncDirectory(options.dir));
  durable->recovery_.duration = absl::Now() - start;
  store->SetJournal(durable.get());
  if (options.sync != StoreSync::kAlways) {
    {
      absl::MutexLock lock(&durable->log_mu_);
      durable->writer_running_ = true;
    }
    durable->writer_ = std::thread([raw = durable.get()] { raw->WriteQueue(); });
  }
  // Two threads: a snapshot takes seconds, and the interval syncs may not wait for it.
  if (options.sync != StoreSync::kAlways) {
    durable->syncer_ = std::thread([raw = durable.get()] { raw->IntervalSyncs(); });
  }
  if (options.snapshot_interval > absl::ZeroDuration()) {
    durable->snapshotter_ = std::thread([raw = durable.get()] { raw->PeriodicSnapshots(); });
  }
  return durable;
}

std::string DurableStore::PathOf(std::string_view file) const {
  return (fs::path(options_.dir) / std::string(file)).string();
}

absl::StatusOr<int64_t> DurableStore::Recover(const ReplayUpdate& replay) {
  TENSOROPS_ASSIGN_OR_RETURN(Files found, ListFiles(options_.dir));
  const int64_t snapshot_generation = found.snapshots.empty() ? 0 : found.snapshots.rbegin()->first;
  std::vector<std::pair<int64_t, std::string>> logs;
  for (const auto& [generation, path] : found.logs) {
    if (generation >= snapshot_generation) logs.emplace_back(generation, path);
  }

  // First pass: check every record of every file recovery needs before anything is loaded, so
  // that a damaged file leaves the store empty, and find the cancelled updates (a cancel may
  // come in a later log than its update).
  std::set<std::pair<int64_t, int64_t>> cancelled;
  absl::Status damage;
  if (snapshot_generation > 0) {
    const std::string& path = found.snapshots.at(snapshot_generation);
    absl::StatusOr<RecordReader> reader = RecordReader::Open(path);
    bool ended = false;
    while (reader.ok() && damage.ok()) {
      absl::StatusOr<std::optional<Record>> record = reader->Next();
      if (!record.ok()) {
        damage = record.status();
      } else if (!record->has_value()) {
        break;
      } else {
        ended = (*record)->kind == RecordKind::kSnapshotEnd;
      }
    }
    if (!reader.ok()) return reader.status();
    if (damage.ok() && !ended) {
      damage = absl::DataLossError(
          absl::StrFormat("%s is damaged at offset %d: the snapshot ends without its last record",
                          path, reader->torn_at().value_or(reader->file_size())));
    }
  }
  for (const auto& [generation, path] : logs) {
    if (!damage.ok()) break;
    TENSOROPS_ASSIGN_OR_RETURN(RecordReader reader, RecordReader::Open(path));
    while (true) {
      absl::StatusOr<std::optional<Record>> record = reader.Next();
      if (!record.ok()) {
        damage = record.status();
        break;
      }
      if (!record->has_value()) break;
      if ((*record)->kind == RecordKind::kCancelledUpdate) {
        files::CancelledUpdate cancel;
        if (absl::Status parsed = ParseMeta(**record, path, &cancel); !parsed.ok()) {
          damage = parsed;
          break;
        }
        cancelled.emplace(cancel.generation(), cancel.offset());
      }
    }
  }
  if (!damage.ok()) {
    if (options_.recovery == StoreRecovery::kStrict) {
      return absl::DataLossError(absl::StrFormat(
          "--store_dir=%s cannot be recovered: %s. Nothing was loaded. To start with an empty "
          "store instead, moving every store file to a damaged-<time> folder there, pass "
          "--store_recover=discard",
          options_.dir, damage.message()));
    }
    const std::string aside = PathOf(absl::StrCat(
        "damaged-", absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone())));
    std::error_code error;
    fs::create_directories(aside, error);
    for (const auto* group : {&found.snapshots, &found.logs}) {
      for (const auto& [generation, path] : *group) {
        if (!error) fs::rename(path, fs::path(aside) / fs::path(path).filename(), error);
      }
    }
    if (error) {
      return absl::UnavailableError(
          absl::StrFormat("--store_dir=%s is damaged (%s), and its files cannot be moved to %s: %s",
                          options_.dir, damage.message(), aside, error.message()));
    }
    recovery_.discarded_to = aside;
    recovery_.warnings.push_back(absl::StrFormat(
        "%s; --store_recover=discard: the store starts empty, its files moved to %s",
        damage.message(), aside));
    return found.newest() + 1;
  }

  // Second pass: load.
  Loader loader(store_);
  // Whether the file being read was written by a server before tenants were named (its header
  // says), whose namespaces recovery renames.
  bool renaming = false;
  const auto read_header = [&](const Record& record, const std::string& path) -> absl::Status {
    files::FileHeader header;
    TENSOROPS_RETURN_IF_ERROR(ParseMeta(record, path, &header));
    renaming = !header.tenant_namespaces();
    // Without the names of now, the files written next keep saying that this one's were not
    // renamed yet.
    if (renaming && !options_.renamed_namespaces.has_value()) tenant_namespaces_ = false;
    return absl::OkStatus();
  };
  // Gives a record's metadata the namespace it has now.
  const auto rename = [&](auto* meta) {
    if (!renaming || !options_.renamed_namespaces.has_value()) return;
    const auto renamed = options_.renamed_namespaces->find(meta->namespace_());
    if (renamed == options_.renamed_namespaces->end()) return;
    meta->set_namespace_(renamed->second);
    ++recovery_.renamed_records;
  };
  std::vector<TensorStore::Remembered> remembered;
  // Update ids of the logs' changes, in order, remembered after the snapshot's.
  std::vector<std::tuple<std::string, std::string, TensorStore::Change>> logged_ids;
  if (snapshot_generation > 0) {
    const std::string& path = found.snapshots.at(snapshot_generation);
    recovery_.snapshot = path;
    TENSOROPS_ASSIGN_OR_RETURN(RecordReader reader, RecordReader::Open(path));
    files::StoredTensor tensor;
    while (true) {
      const SinkFor sink_for = [&](const Record& record) -> absl::StatusOr<PayloadSink> {
        if (record.kind != RecordKind::kStoredTensor) return PayloadSink();
        TENSOROPS_RETURN_IF_ERROR(ParseMeta(record, path, &tensor));
        rename(&tensor);
        return loader.Begin(tensor, record.payload_bytes);
      };
      TENSOROPS_ASSIGN_OR_RETURN(std::optional<Record> record, reader.Next(sink_for));
      if (!record.has_value()) break;
      if (record->kind == RecordKind::kFileHeader) {
        TENSOROPS_RETURN_IF_ERROR(read_header(*record, path));
      } else if (record->kind == RecordKind::kStoredTensor) {
        TENSOROPS_RETURN_IF_ERROR(loader.Commit(tensor));
      } else if (record->kind == RecordKind::kRememberedChanges) {
        files::RememberedChanges changes;
        TENSOROPS_RETURN_IF_ERROR(ParseMeta(*record, path, &changes));
        rename(&changes);
        TensorStore::Remembered& ns = remembered.emplace_back();
        ns.ns = changes.namespace_();
        for (const auto& change : changes.changes()) {
          ns.changes.emplace_back(
              change.update_id(),
              TensorStore::Change{.name = change.name(), .version = change.version()});
        }
      }
    }
    reader.DropCached();
    absl::MutexLock lock(&stats_mu_);
    snapshot_bytes_ = reader.file_size();
    std::error_code error;
    const auto modified = fs::last_write_time(path, error);
    if (!error) {
      snapshot_time_ = absl::FromChrono(std::chrono::file_clock::to_sys(modified));
    }
  }
  int64_t log_bytes = 0;
  for (const auto& log : logs) {
    // Named, not bound: clang 14 cannot capture a structured binding in the sink's lambda.
    const int64_t generation = log.first;
    const std::string& path = log.second;
    recovery_.logs.push_back(path);
    TENSOROPS_ASSIGN_OR_RETURN(RecordReader reader, RecordReader::Open(path));
    files::StoredTensor tensor;
    files::UpdatedTensor update;
    std::string call;
    while (true) {
      const SinkFor sink_for = [&](const Record& record) -> absl::StatusOr<PayloadSink> {
        if (record.kind == RecordKind::kStoredTensor) {
          TENSOROPS_RETURN_IF_ERROR(ParseMeta(record, path, &tensor));
          rename(&tensor);
          return loader.Begin(tensor, record.payload_bytes);
        }
        if (record.kind == RecordKind::kUpdatedTensor) {
          call.clear();
          call.reserve(static_cast<size_t>(record.payload_bytes));
          return [&call](int64_t, std::string_view chunk) {
            call.append(chunk);
            return absl::OkStatus();
          };
        }
        return PayloadSink();
      };
      TENSOROPS_ASSIGN_OR_RETURN(std::optional<Record> record, reader.Next(sink_for));
      if (!record.has_value()) break;
      switch (record->kind) {
        case RecordKind::kFileHeader:
          TENSOROPS_RETURN_IF_ERROR(read_header(*record, path));
          break;
        case RecordKind::kStoredTensor:
          TENSOROPS_RETURN_IF_ERROR(loader.Commit(tensor));
          ++recovery_.records;
          if (!tensor.update_id().empty()) {
            logged_ids.emplace_back(
                tensor.namespace_(), tensor.update_id(),
                TensorStore::Change{.name = tensor.name(), .version = tensor.version()});
          }
          break;
        case RecordKind::kDeletedTensor: {
          files::DeletedTensor deleted;
          TENSOROPS_RETURN_IF_ERROR(ParseMeta(*record, path, &deleted));
          rename(&deleted);
          const absl::Status removed = store_->Delete(deleted.namespace_(), deleted.name());
          if (!removed.ok() && !absl::IsNotFound(removed)) return removed;
          ++recovery_.records;
          break;
        }
        case RecordKind::kUpdatedTensor: {
          TENSOROPS_RETURN_IF_ERROR(ParseMeta(*record, path, &update));
          rename(&update);
          const absl::StatusOr<TensorStore::Metadata> current =
              store_->Info(update.namespace_(), update.name());
          const bool applies = !cancelled.contains({generation, record->offset}) && current.ok() &&
                               current->serial == update.serial() &&
                               current->version == update.from_version();
          if (!applies) {
            ++recovery_.skipped;
            break;
          }
          const absl::Status replayed =
              replay(update.namespace_(), update.name(), update.from_version(), call);
          if (!replayed.ok()) {
            ++recovery_.failed;
            recovery_.warnings.push_back(absl::StrFormat(
                "%s, offset %d: the in-place update of tensor \"%s\" at version %d failed to "
                "replay and was skipped: %s",
                path, record->offset, update.name(), update.from_version(), replayed.message()));
            break;
          }
          ++recovery_.records;
          store_->RestoreUpdated(update.namespace_(), update.name(),
                                 absl::FromUnixNanos(update.updated_unix_nanos()));
          if (!update.update_id().empty()) {
            logged_ids.emplace_back(
                update.namespace_(), update.update_id(),
                TensorStore::Change{.name = update.name(), .version = update.from_version() + 1});
          }
          break;
        }
        default:
          break;
      }
    }
    reader.DropCached();
    if (reader.torn_at().has_value()) {
      ++recovery_.torn_records;
      recovery_.warnings.push_back(absl::StrFormat(
          "%s: dropped a torn last record at offset %d (a crash while it was written; it was "
          "never acknowledged)",
          path, *reader.torn_at()));
      // Cut it off, so that the file ends in a whole record like every other.
      TENSOROPS_RETURN_IF_ERROR(RecordFile::OpenForAppend(path, *reader.torn_at()).status());
    }
    log_bytes += reader.torn_at().value_or(reader.file_size());
  }
  for (const TensorStore::Remembered& ns : remembered) {
    for (const auto& [id, change] : ns.changes) store_->Remember(ns.ns, id, change);
  }
  for (const auto& [ns, id, change] : logged_ids) store_->Remember(ns, id, change);
  for (const auto& [ns, name] : store_->Names()) {
    if (absl::StatusOr<TensorStore::Metadata> info = store_->Info(ns, name); info.ok()) {
      ++recovery_.tensors;
      recovery_.tensor_bytes += info->bytes;
    }
  }
  {
    absl::MutexLock lock(&log_mu_);
    older_log_bytes_ = log_bytes;
    // Replayed records are worth compacting at the next snapshot (or Close); a log with none
    // (after a clean stop, only its header) is not.
    changes_ = recovery_.records + recovery_.skipped + recovery_.failed > 0 ? 1 : 0;
  }
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_generation_ = snapshot_generation;
  }
  return found.newest() + 1;
}

absl::Status DurableStore::StartLog(int64_t generation) {
  TENSOROPS_ASSIGN_OR_RETURN(RecordFile file, RecordFile::Create(PathOf(LogFileName(generation))));
  files::FileHeader header;
  header.set_file_kind("log");
  header.set_format_version(kFormatVersion);
  header.set_generation(generation);
  header.set_created_unix_nanos(UnixNanos(absl::Now()));
  header.set_tenant_namespaces(tenant_namespaces_);
  if (const absl::Status written = file.Append(RecordKind::kFileHeader, header).status();
      !written.ok()) {
    // Not left behind: the next snapshot creates this generation's log again (a full disk, say,
    // that has room by then), and would find the name taken.
    std::error_code ignored;
    std::filesystem::remove(PathOf(LogFileName(generation)), ignored);
    return written;
  }
  log_ = std::make_shared<RecordFile>(std::move(file));
  generation_ = generation;
  log_end_ = written_end_ = log_->size();
  return absl::OkStatus();
}

// ---- Journal ----

absl::StatusOr<StoreJournal::Ticket> DurableStore::Append(RecordKind kind,
                                                          const google::protobuf::MessageLite& meta,
                                                          int64_t payload_bytes,
                                                          const PayloadSource& payload) {
  absl::MutexLock lock(&log_mu_);
  AwaitQueueWritten();
  if (!broken_.ok()) return broken_;
  absl::StatusOr<int64_t> offset = log_->Append(kind, meta, payload_bytes, payload);
  log_end_ = written_end_ = log_->size();
  if (!offset.ok()) {
    return absl::Status(offset.status().code(),
                        absl::StrFormat("the change was not made, since the store's log cannot "
                                        "record it: %s",
                                        offset.status().message()));
  }
  ++changes_;
  return Ticket{.generation = generation_, .offset = *offset, .end = written_end_};
}

void DurableStore::AwaitQueueWritten() {
  const auto written = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) { return queued_.empty(); };
  log_mu_.Await(absl::Condition(&written));
}

void DurableStore::WriteQueue() {
  while (true) {
    std::shared_ptr<RecordFile> file;
    const QueuedUpdate* update;
    {
      absl::MutexLock lock(&log_mu_);
      const auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) {
        return !queued_.empty() || writer_stop_;
      };
      log_mu_.Await(absl::Condition(&work));
      if (queued_.empty()) {
        // In the same critical section as the last look at the queue: an update queued later
        // sees the writer gone and writes itself.
        writer_running_ = false;
        return;
      }
      file = log_;
      // Stays valid while later updates are queued: a deque's push_back moves no element.
      update = &queued_.front();
    }
    // Written unlocked, so that the next update queues (and its call goes on) meanwhile: no
    // other thread writes the file or replaces it while the queue is not empty (each first
    // waits for it to empty, and this update leaves it only once written).
    absl::StatusOr<int64_t> offset =
        file->Append(RecordKind::kUpdatedTensor, update->meta,
                     static_cast<int64_t>(update->call.size()), HostPayload(update->call));
    if (offset.ok() && *offset != update->ticket.offset) {
      offset = absl::InternalError(absl::StrFormat(
          "%s: an update's record went to offset %d, not to %d where it was promised", file->path(),
          *offset, update->ticket.offset));
    }
    absl::MutexLock lock(&log_mu_);
    written_end_ = file->size();
    if (!offset.ok()) {
      // These updates are in memory and were acknowledged: a crash from now on loses them, and
      // a later change logged after them would be replayed without them.
      broken_ = absl::UnavailableError(absl::StrFormat(
          "the store's log cannot record %d in-place update(s) already made (%s); it refuses "
          "every change until the server restarts, which recovers the state before them",
          queued_.size(), offset.status().message()));
      spdlog::error("tensor store: {}", std::string(broken_.message()));
      queued_.clear();
      queued_bytes_ = 0;
      log_end_ = written_end_;
      continue;
    }
    queued_bytes_ -= static_cast<int64_t>(update->call.size());
    queued_.pop_front();
  }
}

void DurableStore::StopWriter() {
  {
    absl::MutexLock lock(&log_mu_);
    writer_stop_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

absl::StatusOr<StoreJournal::Ticket> DurableStore::LogPut(const Put& put) {
  files::StoredTensor meta;
  meta.set_namespace_(std::string(put.ns));
  meta.set_name(put.metadata.name);
  meta.set_dtype(wire::DataTypeToProto(put.metadata.dtype));
  meta.mutable_shape()->Assign(put.metadata.shape.begin(), put.metadata.shape.end());
  meta.set_version(put.metadata.version);
  meta.set_serial(put.metadata.serial);
  meta.set_created_unix_nanos(UnixNanos(put.metadata.created));
  meta.set_updated_unix_nanos(UnixNanos(put.metadata.updated));
  meta.set_update_id(std::string(put.update_id));
  return Append(RecordKind::kStoredTensor, meta, put.metadata.bytes,
                PayloadOf(put.memory, put.data, put.metadata.bytes));
}

absl::StatusOr<StoreJournal::Ticket> DurableStore::LogDelete(std::string_view ns,
                                                             std::string_view name) {
  files::DeletedTensor meta;
  meta.set_namespace_(std::string(ns));
  meta.set_name(std::string(name));
  return Append(RecordKind::kDeletedTensor, meta);
}

absl::StatusOr<StoreJournal::Ticket> DurableStore::LogUpdate(
    std::string_view ns, std::string_view name, uint64_t serial, int64_t from_version,
    std::string_view update_id, absl::Time updated, std::string call, LockWait wait) {
  files::UpdatedTensor meta;
  meta.set_namespace_(std::string(ns));
  meta.set_name(std::string(name));
  meta.set_serial(serial);
  meta.set_from_version(from_version);
  meta.set_update_id(std::string(update_id));
  meta.set_updated_unix_nanos(UnixNanos(updated));
  const int64_t payload_bytes = static_cast<int64_t>(call.size());
  // kAlways writes the record here; a queue without room waits for the writer (the disk).
  if (wait == LockWait::kTry && options_.sync == StoreSync::kAlways) return StoreBusyError(name);
  if (options_.sync != StoreSync::kAlways) {
    // Queued for the writer: the update runs while its record is checksummed and written.
    absl::MutexLock lock(&log_mu_);
    const auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) {
      return queued_.empty() || queued_bytes_ + payload_bytes <= kMaxQueuedUpdateBytes ||
             !broken_.ok() || !writer_running_;
    };
    if (wait == LockWait::kTry && (!room() || !writer_running_)) return StoreBusyError(name);
    log_mu_.Await(absl::Condition(&room));
    if (!broken_.ok()) return broken_;
    if (writer_running_) {
      const Ticket ticket{
          .generation = generation_,
          .offset = log_end_,
          .end = log_end_ + RecordBytes(static_cast<int64_t>(meta.ByteSizeLong()), payload_bytes)};
      log_end_ = ticket.end;
      ++changes_;
      queued_bytes_ += payload_bytes;
      queued_.push_back({.meta = std::move(meta), .call = std::move(call), .ticket = ticket});
      return ticket;
    }
  }
  return Append(RecordKind::kUpdatedTensor, meta, payload_bytes, HostPayload(call));
}

void DurableStore::LogCancel(const Ticket& ticket) {
  files::CancelledUpdate meta;
  meta.set_generation(ticket.generation);
  meta.set_offset(ticket.offset);
  absl::MutexLock lock(&log_mu_);
  AwaitQueueWritten();
  if (!broken_.ok()) return;
  const absl::StatusOr<int64_t> offset = log_->Append(RecordKind::kCancelledUpdate, meta);
  log_end_ = written_end_ = log_->size();
  if (!offset.ok()) {
    // Recovery would replay an update that never completed: the log no longer tells the truth.
    broken_ = absl::UnavailableError(absl::StrFormat(
        "the store's log cannot record that an update failed (%s); it refuses every change "
        "until the server restarts (the restart recovers the last state the log holds)",
        offset.status().message()));
    spdlog::error("tensor store: {}", std::string(broken_.message()));
  }
}

bool DurableStore::DurableLocked(const Ticket& ticket) const {
  return ticket.generation < synced_generation_ ||
         (ticket.generation == synced_generation_ && ticket.end <= synced_end_);
}

absl::Status DurableStore::SyncLog() {
  std::shared_ptr<RecordFile> file;
  int64_t generation;
  int64_t end;
  {
    absl::ReaderMutexLock lock(&log_mu_);
    file = log_;
    generation = generation_;
    end = written_end_;
  }
  int64_t from;
  {
    absl::MutexLock lock(&sync_mu_);
    from = generation == synced_generation_ ? synced_end_ : 0;
  }
  const absl::Time start = absl::Now();
  // kNone promises nothing: its pages are only written back, so that they can leave the cache.
  const bool fsync = options_.sync != StoreSync::kNone;
  const absl::Status synced = fsync ? file->Sync() : file->WriteBack(from, end);
  const absl::Duration took = absl::Now() - start;
  if (synced.ok()) file->DropCached(from, end);
  {
    absl::MutexLock lock(&sync_mu_);
    if (fsync) {
      ++fsyncs_;
      fsync_time_ += took;
    }
    if (!synced.ok()) {
      if (fsync) sync_error_ = synced;
    } else if (generation > synced_generation_ ||
               (generation == synced_generation_ && end > synced_end_)) {
      synced_generation_ = generation;
      synced_end_ = end;
    }
  }
  if (!synced.ok() && !fsync) {
    spdlog::warn("tensor store: writing back the log failed (nothing was promised): {}",
                 synced.ToString());
    return absl::OkStatus();
  }
  if (!synced.ok()) {
    absl::MutexLock lock(&log_mu_);
    BreakAfterFailedSync(synced);
  }
  return synced;
}

void DurableStore::BreakAfterFailedSync(const absl::Status& synced) {
  // After a failed fsync the kernel may have dropped the unwritten pages: nothing says what the
  // file holds, so no further change may count on it.
  broken_ = absl::UnavailableError(absl::StrFormat(
      "the store's log could not be synced (%s); it refuses every change until the server "
      "restarts",
      synced.message()));
  spdlog::error("tensor store: {}", std::string(broken_.message()));
}

absl::Status DurableStore::AwaitDurable(const Ticket& ticket) {
  if (options_.sync != StoreSync::kAlways) return absl::OkStatus();
  sync_mu_.Lock();
  while (true) {
    if (!sync_error_.ok()) {
      const absl::Status error = sync_error_;
      sync_mu_.Unlock();
      return absl::Status(
          error.code(),
          absl::StrFormat("the change is in memory but not durable: %s", error.message()));
    }
    if (DurableLocked(ticket)) break;
    if (syncing_) {
      // One fsync covers every record written before it began: wait for the one in progress,
      // then look again (it may have begun before this record was written).
      const auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(sync_mu_) { return !syncing_; };
      sync_mu_.Await(absl::Condition(&done));
      continue;
    }
    syncing_ = true;
    sync_mu_.Unlock();
    SyncLog().IgnoreError();  // recorded in sync_error_, answered above
    sync_mu_.Lock();
    syncing_ = false;
  }
  sync_mu_.Unlock();
  return absl::OkStatus();
}

// ---- Snapshots ----

absl::StatusOr<SnapshotReport> DurableStore::Snapshot() {
  absl::MutexLock lock(&snapshot_mu_);
  return SnapshotLocked();
}

absl::StatusOr<SnapshotReport> DurableStore::SnapshotLocked() {
  const absl::Time start = absl::Now();
  // Start the next log while no change is between its record and its effect: every change is
  // then either in a log this snapshot replaces and already in memory, or in the new log.
  int64_t generation = 0;
  absl::Status rotated;
  store_->WhileCommitsPaused([&] {
    absl::MutexLock log_lock(&log_mu_);
    AwaitQueueWritten();
    if (!broken_.ok()) {
      rotated = broken_;
      return;
    }
    rotated = log_->Sync();
    if (!rotated.ok()) {
      // As in SyncLog: after a failed fsync the kernel may have dropped the unwritten pages, and
      // a later fsync of the same file could succeed without them.
      if (options_.sync != StoreSync::kNone) {
        BreakAfterFailedSync(rotated);
        absl::MutexLock sync_lock(&sync_mu_);
        sync_error_ = rotated;
      }
      return;
    }
    log_->DropCached(0, log_->size());
    const int64_t old_log_bytes = log_->size();
    generation = generation_ + 1;
    rotated = StartLog(generation);
    if (!rotated.ok()) return;
    older_log_bytes_ += old_log_bytes;
    changes_ = 0;
    absl::MutexLock sync_lock(&sync_mu_);
    synced_generation_ = generation;
    synced_end_ = 0;
  });
  TENSOROPS_RETURN_IF_ERROR(rotated);
  TENSOROPS_RETURN_IF_ERROR(SyncDirectory(options_.dir));

  const std::string path = PathOf(SnapshotFileName(generation));
  const std::string tmp = path + kTmpSuffix;
  SnapshotReport report{.path = path, .generation = generation};
  const auto write = [&]() -> absl::Status {
    TENSOROPS_ASSIGN_OR_RETURN(RecordFile file, RecordFile::Create(tmp));
    files::FileHeader header;
    header.set_file_kind("snapshot");
    header.set_format_version(kFormatVersion);
    header.set_generation(generation);
    header.set_created_unix_nanos(UnixNanos(absl::Now()));
    header.set_next_serial(store_->next_serial());
    header.set_tenant_namespaces(tenant_namespaces_);
    TENSOROPS_RETURN_IF_ERROR(file.Append(RecordKind::kFileHeader, header).status());
    files::SnapshotEnd end;
    for (const auto& [ns, name] : store_->Names()) {
      // Under the tensor's read lock: one whole version, while updates of it wait.
      absl::StatusOr<std::pair<TensorStore::ReadHandle, TensorStore::Metadata>> read =
          store_->ReadWithMetadata(ns, name);
      if (absl::IsNotFound(read.status())) continue;  // deleted since: the new log says so
      TENSOROPS_RETURN_IF_ERROR(read.status());
      const auto& [handle, metadata] = *read;
      files::StoredTensor meta;
      meta.set_namespace_(ns);
      meta.set_name(name);
      meta.set_dtype(wire::DataTypeToProto(metadata.dtype));
      meta.mutable_shape()->Assign(metadata.shape.begin(), metadata.shape.end());
      meta.set_version(metadata.version);
      meta.set_serial(metadata.serial);
      meta.set_created_unix_nanos(UnixNanos(metadata.created));
      meta.set_updated_unix_nanos(UnixNanos(metadata.updated));
      TENSOROPS_RETURN_IF_ERROR(
          file.Append(RecordKind::kStoredTensor, meta, metadata.bytes,
                      PayloadOf(handle.memory(), handle.view().data(), metadata.bytes))
              .status());
      end.set_tensors(end.tensors() + 1);
      end.set_tensor_bytes(end.tensor_bytes() + metadata.bytes);
    }
    for (const TensorStore::Remembered& ns : store_->RememberedChanges()) {
      files::RememberedChanges changes;
      changes.set_namespace_(ns.ns);
      for (const auto& [id, change] : ns.changes) {
        files::RememberedChanges::Change* entry = changes.add_changes();
        entry->set_update_id(id);
        entry->set_name(change.name);
        entry->set_version(change.version);
      }
      TENSOROPS_RETURN_IF_ERROR(file.Append(RecordKind::kRememberedChanges, changes).status());
    }
    TENSOROPS_RETURN_IF_ERROR(file.Append(RecordKind::kSnapshotEnd, end).status());
    TENSOROPS_RETURN_IF_ERROR(file.Sync());
    file.DropCached(0, file.size());
    report.tensors = end.tensors();
    report.bytes = file.size();
    return absl::OkStatus();
  };
  if (absl::Status written = write(); !written.ok()) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    // The logs since the last snapshot all stay, so recovery still has every change.
    return absl::Status(written.code(),
                        absl::StrFormat("snapshot %s not written: %s", path, written.message()));
  }
  std::error_code error;
  fs::rename(tmp, path, error);
  if (error) {
    return absl::UnavailableError(absl::StrFormat("snapshot %s not written: cannot rename %s: %s",
                                                  path, tmp, error.message()));
  }
  TENSOROPS_RETURN_IF_ERROR(SyncDirectory(options_.dir));
  snapshot_generation_ = generation;
  // What this snapshot replaces: older snapshots and every log before its own.
  TENSOROPS_ASSIGN_OR_RETURN(const Files found, ListFiles(options_.dir));
  for (const auto* group : {&found.snapshots, &found.logs}) {
    for (const auto& [older, old_path] : *group) {
      if (older < generation) fs::remove(old_path, error);
    }
  }
  TENSOROPS_RETURN_IF_ERROR(SyncDirectory(options_.dir));
  {
    absl::MutexLock lock(&log_mu_);
    older_log_bytes_ = 0;
  }
  report.written = absl::Now();
  report.duration = report.written - start;
  absl::MutexLock lock(&stats_mu_);
  snapshot_time_ = report.written;
  snapshot_bytes_ = report.bytes;
  return report;
}

// ---- Lifetime ----

bool DurableStore::SleepUntil(absl::Time wake) {
  absl::MutexLock lock(&stop_mu_);
  const auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(stop_mu_) { return stop_; };
  return !stop_mu_.AwaitWithDeadline(absl::Condition(&stopping), wake);
}

void DurableStore::IntervalSyncs() {
  while (SleepUntil(absl::Now() + options_.sync_interval)) {
    bool behind;
    {
      absl::ReaderMutexLock log_lock(&log_mu_);
      absl::MutexLock sync_lock(&sync_mu_);
      behind = generation_ != synced_generation_ || written_end_ > synced_end_;
    }
    if (behind) SyncLog().IgnoreError();  // logged (and after a failed fsync, changes refused)
  }
}

void DurableStore::PeriodicSnapshots() {
  while (SleepUntil(absl::Now() + options_.snapshot_interval)) {
    bool changed;
    {
      absl::ReaderMutexLock lock(&log_mu_);
      changed = changes_ > 0;
    }
    if (!changed) continue;
    absl::StatusOr<SnapshotReport> report = Snapshot();
    if (report.ok()) {
      spdlog::info("tensor store: snapshot {} written: {} tensors, {} bytes, in {}", report->path,
                   report->tensors, report->bytes, absl::FormatDuration(report->duration));
    } else {
      spdlog::warn("tensor store: periodic snapshot failed (the log keeps every change): {}",
                   report.status().ToString());
    }
  }
}

void DurableStore::StopBackground() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  if (syncer_.joinable()) syncer_.join();
  if (snapshotter_.joinable()) snapshotter_.join();
}

absl::StatusOr<std::optional<SnapshotReport>> DurableStore::Close() {
  StopBackground();
  StopWriter();
  std::optional<SnapshotReport> written;
  bool changed;
  {
    absl::ReaderMutexLock lock(&log_mu_);
    changed = changes_ > 0;
  }
  absl::Status status;
  if (changed) {
    absl::StatusOr<SnapshotReport> report = Snapshot();
    if (report.ok()) {
      written = *std::move(report);
    } else {
      status = report.status();
    }
  }
  if (status.ok() && options_.sync != StoreSync::kAlways) status = SyncLog();
  store_->SetJournal(nullptr);
  closed_ = true;
  if (!status.ok()) return status;
  return written;
}

DurableStore::~DurableStore() {
  StopBackground();
  StopWriter();
  if (!closed_) store_->SetJournal(nullptr);
  close(lock_fd_);
}

DurableStoreStats DurableStore::stats() const {
  DurableStoreStats stats;
  {
    absl::ReaderMutexLock lock(&log_mu_);
    stats.log_bytes = older_log_bytes_ + (log_ != nullptr ? written_end_ : 0);
    stats.queued_update_bytes = queued_bytes_;
  }
  {
    absl::MutexLock lock(&sync_mu_);
    stats.fsyncs = fsyncs_;
    stats.fsync_time = fsync_time_;
  }
  {
    absl::MutexLock lock(&stats_mu_);
    stats.snapshot_time = snapshot_time_;
    stats.snapshot_bytes = snapshot_bytes_;
  }
  stats.recovery_time = recovery_.duration;
  return stats;
}

}  // namespace tensorops
