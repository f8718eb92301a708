// Tests of the durable store (server/store/durable_store.h) and its files (store_files.h): the
// record framing and what counts as torn or damaged; recovery of puts, overwrites, deletes,
// in-place updates (replayed, cancelled, or already in a snapshot) and update ids; snapshots taken
// while updates run; strict and discard recovery; a full disk; a store in device memory; a
// tensor past 2 GiB. The whole server (ops replayed for real, kill -9 under load) is tested by
// client/python/tests/test_durable_store.py.
#include "server/store/durable_store.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "server/store/store_files.h"
#include "server/store/tensor_store.h"
#include "tensorops/storefiles/v1/store_files.pb.h"
#include "tests/earlier_store_files.h"
#include "tests/fake_device.h"

namespace tensorops {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

#define DURABLE_TEST_CONCAT_INNER(a, b) a##b
#define DURABLE_TEST_CONCAT(a, b) DURABLE_TEST_CONCAT_INNER(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(DURABLE_TEST_CONCAT(status_or_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(status_or, lhs, expr) \
  auto status_or = (expr);                              \
  ASSERT_TRUE(status_or.ok()) << status_or.status();    \
  lhs = *std::move(status_or)

// TempDir is a fresh directory, removed with its contents when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::path(::testing::TempDir()) / "durable_store_XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::vector<std::string> FileNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// AddReplay is the tests' stand-in for the server's op replay: a call "add N" adds N to every
// int32 element of the tensor, in place.
absl::Status AddReplay(TensorStore* store, std::string_view ns, std::string_view name,
                       int64_t from_version, std::string_view call) {
  int32_t n;
  if (!call.starts_with("add ") ||
      !absl::SimpleAtoi(absl::string_view(call.data() + 4, call.size() - 4), &n)) {
    return absl::InvalidArgumentError(absl::StrCat("not a test call: ", std::string(call)));
  }
  absl::StatusOr<TensorStore::UpdateHandle> update = store->Update(ns, name, from_version);
  if (!update.ok()) return update.status();
  auto* values = static_cast<int32_t*>(update->view().data());
  for (int64_t i = 0; i < update->view().numel(); ++i) values[i] += n;
  return update->Commit().status();
}

absl::StatusOr<std::unique_ptr<DurableStore>> OpenOn(const std::string& dir, TensorStore* store,
                                                     DurableStoreOptions options = {}) {
  options.dir = dir;
  options.snapshot_interval = absl::ZeroDuration();
  return DurableStore::Open(
      options, store,
      [store](std::string_view ns, std::string_view name, int64_t from_version,
              std::string_view call) { return AddReplay(store, ns, name, from_version, call); });
}

absl::StatusOr<int64_t> PutInts(TensorStore& store, std::string_view ns, std::string_view name,
                                const std::vector<int32_t>& values,
                                TensorStore::UploadOptions options = {.overwrite = true},
                                std::string_view update_id = {}) {
  const Shape shape{static_cast<int64_t>(values.size())};
  absl::StatusOr<TensorStore::Upload> upload =
      store.BeginUpload(ns, name, DataType::kInt32, shape, options);
  if (!upload.ok()) return upload.status();
  absl::Status written = upload->Write(
      0, std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  if (!written.ok()) return written;
  return upload->Commit(update_id);
}

std::vector<int32_t> Ints(const TensorStore& store, std::string_view ns, std::string_view name) {
  absl::StatusOr<TensorStore::ReadHandle> read = store.Read(ns, name);
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok()) return {};
  std::vector<int32_t> values(static_cast<size_t>(read->view().numel()));
  EXPECT_TRUE(read->CopyToHost(0, read->bytes(), values.data()).ok());
  return values;
}

int64_t VersionOf(const TensorStore& store, std::string_view ns, std::string_view name) {
  absl::StatusOr<TensorStore::Metadata> info = store.Info(ns, name);
  return info.ok() ? info->version : -1;
}

// AddInPlace journals "add n" and applies it, as an op updating the tensor in place does.
absl::StatusOr<int64_t> AddInPlace(TensorStore& store, std::string_view ns, std::string_view name,
                                   int32_t n, std::string_view update_id = {}) {
  absl::StatusOr<TensorStore::UpdateHandle> update =
      store.Update(ns, name, std::nullopt, update_id);
  if (!update.ok()) return update.status();
  if (update->already_applied().has_value()) return *update->already_applied();
  if (absl::Status logged = update->LogChange(absl::StrCat("add ", n), update_id); !logged.ok()) {
    return logged;
  }
  auto* values = static_cast<int32_t*>(update->view().data());
  for (int64_t i = 0; i < update->view().numel(); ++i) values[i] += n;
  return update->Commit(update_id);
}

// ---- The files ----

// WithFileSizeLimit runs `body` while no file of the process may grow past `bytes`
// (RLIMIT_FSIZE): a write past it fails with EFBIG, as a write to a full disk fails with ENOSPC.
void WithFileSizeLimit(rlim_t bytes, const std::function<void()>& body) {
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = saved;
  limited.rlim_cur = bytes;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  body();
  EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);
}

TEST(StoreFilesTest, RecordsRoundTripAndATornOrDamagedRecordIsTold) {
  TempDir dir;
  const std::string path = dir.File("records");
  std::vector<int64_t> offsets;
  const auto write_records = [&] {
    fs::remove(path);
    offsets.clear();
    ASSERT_OK_AND_ASSIGN(RecordFile file, RecordFile::Create(path));
    for (int i = 0; i < 3; ++i) {
      storefiles::v1::DeletedTensor meta;
      meta.set_name(absl::StrCat("t", i));
      const std::string payload(1000 + i, static_cast<char>('a' + i));
      ASSERT_OK_AND_ASSIGN(int64_t offset, file.Append(RecordKind::kDeletedTensor, meta,
                                                       payload.size(), HostPayload(payload)));
      offsets.push_back(offset);
    }
    ASSERT_TRUE(file.Sync().ok());
  };
  write_records();
  const auto read_all = [&](std::vector<std::string>* names) -> absl::StatusOr<RecordReader> {
    absl::StatusOr<RecordReader> reader = RecordReader::Open(path);
    if (!reader.ok()) return reader.status();
    while (true) {
      std::string payload;
      absl::StatusOr<std::optional<Record>> record =
          reader->Next([&](const Record&) -> absl::StatusOr<PayloadSink> {
            return [&](int64_t, std::string_view chunk) {
              payload.append(chunk);
              return absl::OkStatus();
            };
          });
      if (!record.ok()) return record.status();
      if (!record->has_value()) break;
      storefiles::v1::DeletedTensor meta;
      EXPECT_TRUE(meta.ParseFromString((*record)->meta));
      EXPECT_EQ(payload.size(), static_cast<size_t>((*record)->payload_bytes));
      names->push_back(meta.name());
    }
    return reader;
  };
  std::vector<std::string> names;
  ASSERT_OK_AND_ASSIGN(RecordReader whole, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1", "t2"));
  EXPECT_FALSE(whole.torn_at().has_value());
  const int64_t size = static_cast<int64_t>(fs::file_size(path));

  // A crash mid-write: zeros the file system kept after the last whole record, the last record
  // cut short, or cut short and followed by zeros.
  fs::resize_file(path, size + 4096);
  names.clear();
  ASSERT_OK_AND_ASSIGN(RecordReader zeros, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1", "t2"));
  EXPECT_EQ(zeros.torn_at(), size);
  fs::resize_file(path, size - 3);
  names.clear();
  ASSERT_OK_AND_ASSIGN(RecordReader cut, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1"));
  EXPECT_EQ(cut.torn_at(), offsets[2]);
  fs::resize_file(path, size + 4096);
  names.clear();
  ASSERT_OK_AND_ASSIGN(RecordReader cut_then_zeros, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1"));
  EXPECT_EQ(cut_then_zeros.torn_at(), offsets[2]);
  write_records();

  const auto flip = [&](int64_t at) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(at);
    char byte;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    file.seekp(at);
    file.write(&byte, 1);
  };
  // A bad byte in the last record, nothing after it: torn (it was never whole on disk).
  flip(offsets[2] + 100);
  names.clear();
  ASSERT_OK_AND_ASSIGN(RecordReader bad_last, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1"));
  EXPECT_EQ(bad_last.torn_at(), offsets[2]);
  flip(offsets[2] + 100);
  // A bad byte with whole records after it: damage, named by file and offset.
  flip(offsets[1] + 100);
  names.clear();
  const absl::StatusOr<RecordReader> damaged = read_all(&names);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(damaged.status().message()),
              HasSubstr(absl::StrCat(path, " is damaged at offset ", offsets[1])));
  EXPECT_THAT(names, ElementsAre("t0"));
  flip(offsets[1] + 100);
  // A bad byte in a record's length (the high byte of the payload's, at head byte 16 + 3), which
  // then runs past the end of the file: whole records follow, so it is damage, not a torn tail
  // (a torn tail would be cut off, and the records after it with it).
  flip(offsets[0] + 19);
  names.clear();
  const absl::StatusOr<RecordReader> long_record = read_all(&names);
  EXPECT_EQ(long_record.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(long_record.status().message()),
              HasSubstr(absl::StrCat(path, " is damaged at offset ", offsets[0],
                                     ": the record's length runs past the end of the file, but "
                                     "whole records follow it")));
  // The same in the last record, with nothing after it, is a torn tail.
  flip(offsets[0] + 19);
  flip(offsets[2] + 19);
  names.clear();
  ASSERT_OK_AND_ASSIGN(RecordReader long_last, read_all(&names));
  EXPECT_THAT(names, ElementsAre("t0", "t1"));
  EXPECT_EQ(long_last.torn_at(), offsets[2]);
}

TEST(StoreFilesTest, NamesSortByGeneration) {
  EXPECT_EQ(SnapshotFileName(7), "snapshot-000000000007.tosnap");
  EXPECT_EQ(LogFileName(12), "log-000000000012.tolog");
  EXPECT_EQ(ParseStoreFileName("log-000000000012.tolog", false), 12);
  EXPECT_EQ(ParseStoreFileName("log-000000000012.tolog", true), std::nullopt);
  EXPECT_EQ(ParseStoreFileName("snapshot-00000000000x.tosnap", true), std::nullopt);
  EXPECT_EQ(ParseStoreFileName("snapshot-000000000001.tosnap.tmp", true), std::nullopt);
}

// ---- Recovery ----

TEST(DurableStoreTest, ARestartKeepsPutsOverwritesDeletesAndUpdateIds) {
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "a", {1, 2, 3}).ok());
    ASSERT_TRUE(PutInts(store, "", "a", {4, 5, 6}, {.overwrite = true}, "put-a").ok());
    ASSERT_TRUE(PutInts(store, "", "gone", {7}).ok());
    ASSERT_TRUE(store.Delete("", "gone").ok());
    ASSERT_TRUE(PutInts(store, "tenant", "a", {9}).ok());
    ASSERT_TRUE(PutInts(store, "", "gone", {8}).ok());  // re-created: version 1 again
    // No Close: a crash of the process, with every change already written.
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_EQ(durable->recovery().records, 6);
  EXPECT_EQ(durable->recovery().tensors, 3);
  EXPECT_THAT(Ints(store, "", "a"), ElementsAre(4, 5, 6));
  EXPECT_EQ(VersionOf(store, "", "a"), 2);
  EXPECT_THAT(Ints(store, "", "gone"), ElementsAre(8));
  EXPECT_EQ(VersionOf(store, "", "gone"), 1);
  EXPECT_THAT(Ints(store, "tenant", "a"), ElementsAre(9));
  const std::optional<TensorStore::Change> remembered = store.FindChange("", "put-a");
  ASSERT_TRUE(remembered.has_value());
  EXPECT_EQ(remembered->version, 2);
  // A retry of the remembered put applies nothing.
  EXPECT_EQ(PutInts(store, "", "a", {0, 0, 0}, {.overwrite = true}, "put-a").value_or(-1), 2);
  EXPECT_THAT(Ints(store, "", "a"), ElementsAre(4, 5, 6));
  // New values get serials past every recovered one.
  ASSERT_TRUE(PutInts(store, "", "new", {1}).ok());
  EXPECT_GT(store.Info("", "new")->serial, store.Info("", "gone")->serial);
}

TEST(DurableStoreTest, UpdatesReplayInOrderAndCancelledOnesDoNot) {
  TempDir dir;
  TensorStore::Metadata before;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "t", {0, 10}).ok());
    ASSERT_EQ(AddInPlace(store, "", "t", 1, "u1").value_or(-1), 2);
    ASSERT_EQ(AddInPlace(store, "", "t", 2).value_or(-1), 3);
    {
      // An update that fails after it began writing: the journal records it as cancelled.
      ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update, store.Update("", "t"));
      ASSERT_TRUE(update.LogChange("add 100", "").ok());
    }
    ASSERT_EQ(AddInPlace(store, "", "t", 4, "u3").value_or(-1), 4);
    before = *store.Info("", "t");
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(7, 17));
  EXPECT_EQ(VersionOf(store, "", "t"), 4);
  EXPECT_EQ(durable->recovery().skipped, 1);  // the cancelled one
  EXPECT_EQ(durable->recovery().failed, 0);
  // The times the calls gave it, not the replay's.
  EXPECT_EQ(store.Info("", "t")->created, before.created);
  EXPECT_EQ(store.Info("", "t")->updated, before.updated);
  // Retried update ids still apply once.
  EXPECT_EQ(AddInPlace(store, "", "t", 1, "u1").value_or(-1), 2);
  EXPECT_EQ(AddInPlace(store, "", "t", 4, "u3").value_or(-1), 4);
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(7, 17));
}

// A gRPC thread journals an in-place update itself only when its record goes to the writer's
// queue (LockWait::kTry); where the record would wait for the disk it is told so, and nothing is
// logged: the call is prepared again on a thread that may wait.
TEST(DurableStoreTest, AnUpdateThatMustNotWaitIsBusyOnlyWhereItsRecordWaitsForTheDisk) {
  for (const StoreSync sync : {StoreSync::kAlways, StoreSync::kInterval, StoreSync::kNone}) {
    SCOPED_TRACE(StoreSyncName(sync));
    TempDir dir;
    {
      TensorStore store(1 << 20);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                           OpenOn(dir.path(), &store, {.sync = sync}));
      ASSERT_TRUE(PutInts(store, "", "t", {0, 10}).ok());
      ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update,
                           store.Update("", "t", std::nullopt, "", LockWait::kTry));
      const absl::Status tried = update.LogChange("add 1", "", LockWait::kTry);
      if (sync == StoreSync::kAlways) {
        EXPECT_TRUE(IsStoreBusy(tried)) << tried;
        ASSERT_TRUE(update.LogChange("add 2", "", LockWait::kWait).ok());
      } else {
        ASSERT_TRUE(tried.ok()) << tried;
      }
      auto* values = static_cast<int32_t*>(update.view().data());
      const int32_t n = sync == StoreSync::kAlways ? 2 : 1;
      for (int64_t i = 0; i < update.view().numel(); ++i) values[i] += n;
      ASSERT_TRUE(update.Commit().ok());
    }
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    // The busy try left no record: the one update made is replayed, once.
    const int32_t n = sync == StoreSync::kAlways ? 2 : 1;
    EXPECT_THAT(Ints(store, "", "t"), ElementsAre(n, 10 + n));
    EXPECT_EQ(VersionOf(store, "", "t"), 2);
    EXPECT_EQ(durable->recovery().failed, 0);
    EXPECT_EQ(durable->recovery().skipped, 0);
  }
}

TEST(DurableStoreTest, ASnapshotReplacesTheOldFilesAndRecoveryAddsTheNewLog) {
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "t", {1, 1}).ok());
    ASSERT_TRUE(AddInPlace(store, "", "t", 1, "before").ok());
    ASSERT_OK_AND_ASSIGN(SnapshotReport report, durable->Snapshot());
    EXPECT_EQ(report.tensors, 1);
    EXPECT_EQ(report.generation, 2);
    EXPECT_THAT(FileNames(dir.path()),
                ElementsAre("LOCK", "log-000000000002.tolog", "snapshot-000000000002.tosnap"));
    ASSERT_TRUE(AddInPlace(store, "", "t", 10, "after").ok());
    ASSERT_TRUE(PutInts(store, "", "u", {5}).ok());
  }
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    EXPECT_THAT(durable->recovery().snapshot, HasSubstr("snapshot-000000000002.tosnap"));
    EXPECT_EQ(durable->recovery().records, 2);
    EXPECT_THAT(Ints(store, "", "t"), ElementsAre(12, 12));
    EXPECT_EQ(VersionOf(store, "", "t"), 3);
    EXPECT_THAT(Ints(store, "", "u"), ElementsAre(5));
    EXPECT_TRUE(store.FindChange("", "before").has_value());
    EXPECT_TRUE(store.FindChange("", "after").has_value());
    // Close writes a last snapshot: the next start is a plain load.
    ASSERT_OK_AND_ASSIGN(std::optional<SnapshotReport> closed, durable->Close());
    EXPECT_TRUE(closed.has_value());
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_EQ(durable->recovery().records, 0);
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(12, 12));
  EXPECT_TRUE(store.FindChange("", "after").has_value());
  // Nothing changed since that snapshot: stopping again writes none.
  ASSERT_OK_AND_ASSIGN(std::optional<SnapshotReport> again, durable->Close());
  EXPECT_FALSE(again.has_value());
}

// A store an earlier server wrote names its tenants "token-N": recovery reads every kind of
// record of such a namespace (snapshot tensors and update ids, log puts, deletes and updates)
// into the name the tenant has now, and leaves the namespaces it does not map alone.
TEST(DurableStoreTest, RecoveryReadsRenamedNamespacesUnderTheirNewNames) {
  using Renames = absl::flat_hash_map<std::string, std::string>;
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "token-1", "t", {1, 1}).ok());
    ASSERT_TRUE(AddInPlace(store, "token-1", "t", 1, "in-snapshot").ok());
    ASSERT_TRUE(PutInts(store, "token-2", "t", {7}).ok());
    ASSERT_TRUE(PutInts(store, "token-3", "kept", {3}).ok());
    ASSERT_TRUE(durable->Snapshot().ok());
    ASSERT_TRUE(AddInPlace(store, "token-1", "t", 10, "in-log").ok());
    ASSERT_TRUE(PutInts(store, "token-1", "u", {5}, {.overwrite = true}, "put-u").ok());
    ASSERT_TRUE(PutInts(store, "token-2", "gone", {9}).ok());
    ASSERT_TRUE(store.Delete("token-2", "gone").ok());
  }
  ASSERT_TRUE(testing::RewriteAsEarlierServers(dir.path()).ok());
  {
    // A server without the names of now (no --auth_token_file) renames nothing, and its
    // snapshot still says its namespaces await renaming.
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    EXPECT_EQ(durable->recovery().renamed_records, 0);
    EXPECT_THAT(Ints(store, "token-1", "t"), ElementsAre(12, 12));
    ASSERT_TRUE(PutInts(store, "", "plain", {4}).ok());
    ASSERT_TRUE(durable->Snapshot().ok());
  }
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<DurableStore> durable,
        OpenOn(dir.path(), &store,
               {.renamed_namespaces =
                    Renames{{"token-1", "alice"}, {"token-2", "token:0123456789abcdef"}}}));
    EXPECT_THAT(Ints(store, "alice", "t"), ElementsAre(12, 12));
    EXPECT_EQ(VersionOf(store, "alice", "t"), 3);
    EXPECT_THAT(Ints(store, "alice", "u"), ElementsAre(5));
    EXPECT_THAT(Ints(store, "token:0123456789abcdef", "t"), ElementsAre(7));
    EXPECT_FALSE(store.Info("token:0123456789abcdef", "gone").ok());
    EXPECT_THAT(Ints(store, "token-3", "kept"), ElementsAre(3));
    EXPECT_THAT(Ints(store, "", "plain"), ElementsAre(4));
    for (const auto& [ns, name] : store.Names()) {
      EXPECT_THAT(ns, AnyOf("", "alice", "token:0123456789abcdef", "token-3")) << name;
    }
    for (const char* id : {"in-snapshot", "in-log", "put-u"}) {
      EXPECT_TRUE(store.FindChange("alice", id).has_value()) << id;
      EXPECT_FALSE(store.FindChange("token-1", id).has_value()) << id;
    }
    // The second server's snapshot: 3 tensors and 1 namespace's update ids.
    EXPECT_EQ(durable->recovery().renamed_records, 4);
    EXPECT_EQ(durable->recovery().failed, 0);
    ASSERT_TRUE(durable->Snapshot().ok());
  }
  // Files of this server are never renamed: "token-3" is a name of now, whatever the map says.
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DurableStore> durable,
      OpenOn(dir.path(), &store, {.renamed_namespaces = Renames{{"token-3", "carol"}}}));
  EXPECT_EQ(durable->recovery().renamed_records, 0);
  EXPECT_THAT(Ints(store, "token-3", "kept"), ElementsAre(3));
  EXPECT_THAT(Ints(store, "alice", "t"), ElementsAre(12, 12));
}

// Writes log `generation` in `dir` with the records `write` appends.
void WriteLog(const std::string& dir, int64_t generation,
              const std::function<void(RecordFile&)>& write) {
  const std::string path = (fs::path(dir) / LogFileName(generation)).string();
  fs::remove(path);
  absl::StatusOr<RecordFile> file = RecordFile::Create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  storefiles::v1::FileHeader header;
  header.set_file_kind("log");
  header.set_generation(generation);
  ASSERT_TRUE(file->Append(RecordKind::kFileHeader, header).ok());
  write(*file);
}

TEST(DurableStoreTest, ReplaySkipsWhatTheSnapshotAlreadyHolds) {
  // A snapshot starts log G, then reads each tensor: changes made meanwhile are in both. Here
  // the snapshot holds t at version 3; log G repeats the update 2 -> 3 and adds 3 -> 4.
  TempDir dir;
  uint64_t serial;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "t", {0}).ok());
    ASSERT_TRUE(AddInPlace(store, "", "t", 1).ok());
    ASSERT_TRUE(AddInPlace(store, "", "t", 2).ok());
    serial = store.Info("", "t")->serial;
    ASSERT_TRUE(durable->Snapshot().ok());  // snapshot 2: t = 3 at version 3
  }
  const auto update = [&](RecordFile& file, int64_t from_version, std::string_view call) {
    storefiles::v1::UpdatedTensor meta;
    meta.set_name("t");
    meta.set_serial(serial);
    meta.set_from_version(from_version);
    ASSERT_TRUE(file.Append(RecordKind::kUpdatedTensor, meta, call.size(), HostPayload(call)).ok());
  };
  WriteLog(dir.path(), 2, [&](RecordFile& file) {
    update(file, 2, "add 2");
    update(file, 3, "add 4");
  });
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(7));
  EXPECT_EQ(VersionOf(store, "", "t"), 4);
  EXPECT_EQ(durable->recovery().skipped, 1);
  EXPECT_EQ(durable->recovery().records, 1);
}

TEST(DurableStoreTest, AnUpdateOfAReplacedValueIsNotReplayedOntoItsSuccessor) {
  // The update held the old value while an overwrite replaced it: same name, same version
  // number, another serial. Replayed onto the new value it would change bytes no call changed.
  // Nor is it replayed onto the old value, which recovery rebuilds before the overwrite: its
  // update id would then be remembered as applied, and a retry after the restart would be told
  // so, where without the restart it applies to the new value.
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "t", {0}).ok());
    ASSERT_OK_AND_ASSIGN(TensorStore::UpdateHandle update,
                         store.Update("", "t", std::nullopt, "lost"));
    ASSERT_TRUE(update.LogChange("add 50", "lost").ok());
    ASSERT_TRUE(store.Delete("", "t").ok());
    ASSERT_TRUE(PutInts(store, "", "t", {1}).ok());  // version 1 again
    static_cast<int32_t*>(update.view().data())[0] += 50;
    EXPECT_EQ(update.Commit("lost").status().code(), absl::StatusCode::kAborted);
    EXPECT_FALSE(store.FindChange("", "lost").has_value());
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(1));
  EXPECT_EQ(VersionOf(store, "", "t"), 1);
  EXPECT_FALSE(store.FindChange("", "lost").has_value());
}

TEST(DurableStoreTest, ATornLastRecordIsDroppedAndCutOff) {
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "a", {1}).ok());
    ASSERT_TRUE(PutInts(store, "", "b", std::vector<int32_t>(1000, 2)).ok());
  }
  const std::string log = dir.File(LogFileName(1));
  const auto size = fs::file_size(log);
  fs::resize_file(log, size - 100);
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_EQ(durable->recovery().torn_records, 1);
  EXPECT_THAT(Ints(store, "", "a"), ElementsAre(1));
  EXPECT_FALSE(store.Info("", "b").ok());
  ASSERT_EQ(durable->recovery().warnings.size(), 1u);
  EXPECT_THAT(durable->recovery().warnings[0], HasSubstr("torn last record"));
  EXPECT_LT(fs::file_size(log), size - 100);  // cut back to its whole records
}

TEST(DurableStoreTest, DamageStopsStrictRecoveryAndDiscardStartsEmpty) {
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "a", std::vector<int32_t>(1000, 1)).ok());
    ASSERT_TRUE(PutInts(store, "", "b", {2}).ok());
  }
  const std::string log = dir.File(LogFileName(1));
  {
    std::fstream file(log, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(600);  // inside a's bytes, with b's record after them
    file.write("\x7f", 1);
  }
  {
    TensorStore store(1 << 20);
    const auto strict = OpenOn(dir.path(), &store);
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(strict.status().message()),
                HasSubstr(absl::StrCat(log, " is damaged at offset ")));
    EXPECT_THAT(std::string(strict.status().message()), HasSubstr("--store_recover=discard"));
    EXPECT_EQ(store.tensor_count(), 0);
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       OpenOn(dir.path(), &store, {.recovery = StoreRecovery::kDiscard}));
  EXPECT_EQ(store.tensor_count(), 0);
  ASSERT_FALSE(durable->recovery().discarded_to.empty());
  EXPECT_TRUE(fs::exists(fs::path(durable->recovery().discarded_to) / LogFileName(1)));
  // And it works from there.
  ASSERT_TRUE(PutInts(store, "", "c", {3}).ok());
}

TEST(DurableStoreTest, ADamagedOrCutSnapshotIsDamage) {
  // A snapshot is renamed into place only once whole: any fault in one is damage, even at its end.
  for (const bool cut : {false, true}) {
    SCOPED_TRACE(cut ? "cut short" : "a bad byte");
    TempDir dir;
    {
      TensorStore store(1 << 20);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
      ASSERT_TRUE(PutInts(store, "", "a", std::vector<int32_t>(1000, 1)).ok());
      ASSERT_TRUE(durable->Snapshot().ok());
    }
    const std::string snapshot = dir.File(SnapshotFileName(2));
    if (cut) {
      fs::resize_file(snapshot, fs::file_size(snapshot) - 20);
    } else {
      std::fstream file(snapshot, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(1000);
      file.write("\x01", 1);
    }
    TensorStore store(1 << 20);
    const auto strict = OpenOn(dir.path(), &store);
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(strict.status().message()), HasSubstr(snapshot + " is damaged at"));
    EXPECT_EQ(store.tensor_count(), 0);
  }
}

TEST(DurableStoreTest, AFullDiskFailsTheChangeAndLeavesTheStoreAsItWas) {
  TempDir dir;
  TensorStore store(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       OpenOn(dir.path(), &store, {.sync = StoreSync::kAlways}));
  ASSERT_TRUE(PutInts(store, "", "small", {1}).ok());
  absl::StatusOr<int64_t> big, small, updated;
  absl::Status deleted;
  WithFileSizeLimit(64 << 10, [&] {
    big = PutInts(store, "", "big", std::vector<int32_t>(1 << 20, 5));
    small = PutInts(store, "", "small", {2});
    deleted = store.Delete("", "small");
    updated = AddInPlace(store, "", "small", 1);
  });

  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("the change was not made, since the store's log cannot record it"));
  EXPECT_FALSE(store.Info("", "big").ok());
  // Smaller changes that fit still go through.
  EXPECT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(deleted.ok()) << deleted;
  EXPECT_FALSE(updated.ok());  // deleted just before
  ASSERT_TRUE(PutInts(store, "", "after", {3}).ok());
  durable.reset();

  TensorStore recovered(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> reopened, OpenOn(dir.path(), &recovered));
  EXPECT_EQ(recovered.tensor_count(), 1);
  EXPECT_THAT(Ints(recovered, "", "after"), ElementsAre(3));
}

// A snapshot that cannot start its new log (the disk full) fails, and leaves no half-made log
// behind: once the disk has room, the next snapshot makes that log and succeeds.
TEST(DurableStoreTest, ASnapshotThatCannotStartItsLogLeavesTheNextOneFree) {
  TempDir dir;
  TensorStore store(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       OpenOn(dir.path(), &store, {.sync = StoreSync::kAlways}));
  ASSERT_TRUE(PutInts(store, "", "t", {1, 2}).ok());
  absl::StatusOr<SnapshotReport> failed;
  // No file may grow past 8 bytes: the new log's header cannot be written.
  WithFileSizeLimit(8, [&] { failed = durable->Snapshot(); });
  EXPECT_FALSE(failed.ok());

  const absl::StatusOr<SnapshotReport> next = durable->Snapshot();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(PutInts(store, "", "t", {3, 4}).ok());
  durable.reset();
  TensorStore recovered(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> reopened, OpenOn(dir.path(), &recovered));
  EXPECT_THAT(Ints(recovered, "", "t"), ElementsAre(3, 4));
}

// With kInterval an in-place update is acknowledged once queued for the log's writer. When the
// writer cannot write it, the log no longer says what memory holds: every later change is refused
// (naming why), and a restart recovers the state before the update, a prefix of the changes.
TEST(DurableStoreTest, AQueuedUpdateTheLogCannotWriteStopsEveryLaterChange) {
  TempDir dir;
  TensorStore store(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       OpenOn(dir.path(), &store, {.sync = StoreSync::kInterval}));
  ASSERT_TRUE(PutInts(store, "", "t", {10, 20}).ok());
  ASSERT_TRUE(AddInPlace(store, "", "t", 1).ok());
  // Every record so far is written once a put (which follows the queue) returns.
  ASSERT_TRUE(PutInts(store, "", "u", {7}).ok());
  absl::StatusOr<int64_t> acknowledged, refused;
  absl::Status delete_refused;
  WithFileSizeLimit(static_cast<rlim_t>(durable->stats().log_bytes), [&] {
    acknowledged = AddInPlace(store, "", "t", 100);
    refused = PutInts(store, "", "u", {8});
    delete_refused = store.Delete("", "u");
  });

  ASSERT_TRUE(acknowledged.ok()) << acknowledged.status();
  EXPECT_EQ(*acknowledged, 3);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the store's log cannot record 1 in-place update(s) already made"));
  EXPECT_EQ(delete_refused.code(), absl::StatusCode::kUnavailable);
  // Memory holds the update; later changes stay refused after the disk has room again.
  EXPECT_THAT(Ints(store, "", "t"), ElementsAre(111, 121));
  EXPECT_EQ(AddInPlace(store, "", "t", 1).status().code(), absl::StatusCode::kUnavailable);
  durable.reset();

  TensorStore recovered(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> reopened, OpenOn(dir.path(), &recovered));
  EXPECT_THAT(Ints(recovered, "", "t"), ElementsAre(11, 21));
  EXPECT_EQ(VersionOf(recovered, "", "t"), 2);
  EXPECT_THAT(Ints(recovered, "", "u"), ElementsAre(7));
}

// Updates queued by many threads at once are written in the order their tensors changed, with
// puts and deletes between them: the restart recovers every tensor at its last version.
TEST(DurableStoreTest, QueuedUpdatesFromManyThreadsRecoverInOrder) {
  TempDir dir;
  TensorStore store(64 << 20);
  constexpr int kThreads = 8;
  constexpr int kUpdates = 200;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                         OpenOn(dir.path(), &store, {.sync = StoreSync::kNone}));
    ASSERT_TRUE(PutInts(store, "", "s", {0}).ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&store, t] {
        const std::string name = absl::StrCat("t", t);
        ASSERT_TRUE(PutInts(store, "", name, {0, 0}).ok());
        for (int i = 1; i <= kUpdates; ++i) {
          // Shared tensor "s": every thread's updates interleave on it.
          ASSERT_TRUE(AddInPlace(store, "", name, i).ok());
          ASSERT_TRUE(AddInPlace(store, "", "s", 1).ok());
          if (i % 50 == 0) {
            ASSERT_TRUE(PutInts(store, "", absl::StrCat(name, "/blob"), {i}).ok());
          }
        }
        ASSERT_TRUE(store.Delete("", absl::StrCat(name, "/blob")).ok());
      });
    }
    for (std::thread& thread : threads) thread.join();
    // Destroyed without Close, as a process stops when killed: what it had queued is written
    // first (the writer drains), and no snapshot is taken.
  }
  TensorStore recovered(64 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> reopened, OpenOn(dir.path(), &recovered));
  const int32_t sum = kUpdates * (kUpdates + 1) / 2;
  for (int t = 0; t < kThreads; ++t) {
    const std::string name = absl::StrCat("t", t);
    EXPECT_THAT(Ints(recovered, "", name), ElementsAre(sum, sum)) << name;
    EXPECT_EQ(VersionOf(recovered, "", name), kUpdates + 1) << name;
    EXPECT_FALSE(recovered.Info("", absl::StrCat(name, "/blob")).ok());
  }
  EXPECT_THAT(Ints(recovered, "", "s"), ElementsAre(kThreads * kUpdates));
  EXPECT_EQ(reopened->recovery().failed, 0);
}

TEST(DurableStoreTest, SyncAlwaysFsyncsBeforeAChangeIsAnswered) {
  TempDir dir;
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       OpenOn(dir.path(), &store, {.sync = StoreSync::kAlways}));
  const int64_t before = durable->stats().fsyncs;
  ASSERT_TRUE(PutInts(store, "", "a", {1}).ok());
  EXPECT_EQ(durable->stats().fsyncs, before + 1);
  ASSERT_TRUE(AddInPlace(store, "", "a", 1).ok());
  EXPECT_EQ(durable->stats().fsyncs, before + 2);
  ASSERT_TRUE(store.Delete("", "a").ok());
  EXPECT_EQ(durable->stats().fsyncs, before + 3);
}

TEST(DurableStoreTest, SyncIntervalFsyncsInTheBackground) {
  TempDir dir;
  TensorStore store(1 << 20);
  DurableStoreOptions options{.dir = dir.path(),
                              .sync = StoreSync::kInterval,
                              .sync_interval = absl::Milliseconds(5),
                              .snapshot_interval = absl::ZeroDuration()};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable,
                       DurableStore::Open(options, &store, nullptr));
  const int64_t before = durable->stats().fsyncs;
  ASSERT_TRUE(PutInts(store, "", "a", {1}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (durable->stats().fsyncs == before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GT(durable->stats().fsyncs, before);
}

TEST(DurableStoreTest, ASnapshotTakenWhileUpdatesRunRecoversToTheLastState) {
  TempDir dir;
  constexpr int kTensors = 4;
  constexpr int kUpdates = 150;
  std::vector<std::vector<int32_t>> expected(kTensors);
  std::vector<int64_t> versions(kTensors);
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    for (int t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(PutInts(store, "", absl::StrCat("t", t), std::vector<int32_t>(256, t)).ok());
    }
    std::atomic<bool> done{false};
    std::atomic<int> snapshots{0};
    std::thread snapshotter([&] {
      while (!done.load()) {
        EXPECT_TRUE(durable->Snapshot().ok());
        snapshots.fetch_add(1);
      }
    });
    // Each updater goes on until several snapshots were taken while it ran.
    std::vector<std::thread> updaters;
    for (int t = 0; t < kTensors; ++t) {
      updaters.emplace_back([&, t] {
        for (int i = 0; i < kUpdates || snapshots.load() < 5; ++i) {
          EXPECT_TRUE(
              AddInPlace(store, "", absl::StrCat("t", t), i % 7 + 1, absl::StrCat(t, "/", i)).ok());
          versions[t] = i + 2;
        }
      });
    }
    for (std::thread& updater : updaters) updater.join();
    done.store(true);
    snapshotter.join();
    for (int t = 0; t < kTensors; ++t) {
      expected[t] = Ints(store, "", absl::StrCat("t", t));
      EXPECT_EQ(VersionOf(store, "", absl::StrCat("t", t)), versions[t]);
    }
  }
  TensorStore store(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_EQ(durable->recovery().failed, 0);
  for (int t = 0; t < kTensors; ++t) {
    EXPECT_THAT(Ints(store, "", absl::StrCat("t", t)), ElementsAreArray(expected[t]));
    EXPECT_EQ(VersionOf(store, "", absl::StrCat("t", t)), versions[t]);
    EXPECT_TRUE(store.FindChange("", absl::StrCat(t, "/", versions[t] - 2)).has_value());
  }
}

TEST(DurableStoreTest, AStoreInDeviceMemorySnapshotsAndRecoversThere) {
  TempDir dir;
  testing::FakeDeviceMemory device;
  std::vector<int32_t> values(3 << 20);  // past the 4 MiB staging piece
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 7);
  {
    TensorStore store(64 << 20, &device);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "logged", values).ok());
    ASSERT_TRUE(durable->Snapshot().ok());
    ASSERT_TRUE(PutInts(store, "", "after", {1, 2}).ok());
  }
  TensorStore store(64 << 20, &device);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  EXPECT_EQ(store.device(), "fakegpu:0");
  EXPECT_THAT(Ints(store, "", "logged"), ElementsAreArray(values));
  EXPECT_THAT(Ints(store, "", "after"), ElementsAre(1, 2));
}

TEST(DurableStoreTest, TwoStoresCannotShareADirectory) {
  TempDir dir;
  TensorStore first(1 << 20);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &first));
  TensorStore second(1 << 20);
  const auto refused = OpenOn(dir.path(), &second);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("in use by another"));
}

TEST(DurableStoreTest, RecoveryThatDoesNotFitTheStoreNamesTheLimit) {
  TempDir dir;
  {
    TensorStore store(1 << 20);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_TRUE(PutInts(store, "", "a", std::vector<int32_t>(1000, 1)).ok());
  }
  TensorStore store(1000);
  const auto refused = OpenOn(dir.path(), &store);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--store_memory_bytes"));
}

TEST(DurableStoreTest, ATensorPastTwoGibibytesRecovers) {
  TempDir dir;
  const int64_t bytes = (int64_t{2} << 30) + 64;
  const Shape shape{bytes};
  {
    TensorStore store(int64_t{3} << 30);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
    ASSERT_OK_AND_ASSIGN(TensorStore::Upload upload,
                         store.BeginUpload("", "big", DataType::kUInt8, shape));
    ASSERT_OK_AND_ASSIGN(absl::Span<char> data, upload.MutableChunk(0, bytes));
    std::memset(data.data(), 0x11, static_cast<size_t>(bytes));
    data[0] = 1;
    data[bytes - 1] = 2;
    ASSERT_TRUE(upload.Commit().ok());
  }
  TensorStore store(int64_t{3} << 30);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DurableStore> durable, OpenOn(dir.path(), &store));
  ASSERT_OK_AND_ASSIGN(TensorStore::ReadHandle read, store.Read("", "big"));
  ASSERT_EQ(read.bytes(), bytes);
  const auto* data = static_cast<const uint8_t*>(read.view().data());
  EXPECT_EQ(data[0], 1);
  EXPECT_EQ(data[int64_t{1} << 31], 0x11);
  EXPECT_EQ(data[bytes - 1], 2);
}

}  // namespace
}  // namespace tensorops
