// Store files: the record framing of a durable store's snapshots and logs (durable_store.h), and
// the file names in --store_dir. docs/store-files.md is the user's description of the format.
//
//   TENSOROPS_ASSIGN_OR_RETURN(RecordFile file, RecordFile::Create(path));
//   TENSOROPS_ASSIGN_OR_RETURN(int64_t offset, file.Append(RecordKind::kDeleted, meta));
//   TENSOROPS_RETURN_IF_ERROR(file.Sync());
//
//   TENSOROPS_ASSIGN_OR_RETURN(RecordReader reader, RecordReader::Open(path));
//   while (true) {
//     TENSOROPS_ASSIGN_OR_RETURN(std::optional<Record> record, reader.Next());
//     if (!record.has_value()) break;  // the end, or a torn last record (reader.torn_at())
//   }
//
// A record is a 24-byte head ("TOSR", kind, metadata length, 0, payload length), the metadata (a
// store_files.proto message), the payload, and an 8-byte tail (the CRC-32 of all before it in the
// record, then "TEND"). A record is whole only with its tail: a crash while one is written leaves
// a torn last record, which recovery drops, while a bad record with whole records after it is
// damage, which recovery reports with the file's name and the record's offset.
#ifndef TENSOROPS_SERVER_STORE_STORE_FILES_H_
#define TENSOROPS_SERVER_STORE_STORE_FILES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"

namespace tensorops {

// RecordKind says which store_files.proto message a record's metadata is.
enum class RecordKind : uint32_t {
  kFileHeader = 1,         // FileHeader
  kStoredTensor = 2,       // StoredTensor, payload: the bytes
  kDeletedTensor = 3,      // DeletedTensor
  kUpdatedTensor = 4,      // UpdatedTensor, payload: a tensorops.v1.OpRequest
  kCancelledUpdate = 5,    // CancelledUpdate
  kRememberedChanges = 6,  // RememberedChanges
  kSnapshotEnd = 7,        // SnapshotEnd
};

// Sizes of a record's frame.
inline constexpr int64_t kRecordHeadBytes = 24;
inline constexpr int64_t kRecordTailBytes = 8;
// RecordBytes is the size of a record whose metadata encodes to `meta_bytes` bytes: where the
// record after it begins.
constexpr int64_t RecordBytes(int64_t meta_bytes, int64_t payload_bytes) {
  return kRecordHeadBytes + meta_bytes + payload_bytes + kRecordTailBytes;
}
// The largest metadata a reader accepts: a RememberedChanges of 10,000 ids of 128 bytes fits.
inline constexpr int64_t kMaxRecordMetaBytes = int64_t{16} << 20;

// PayloadSource hands a record's payload to the writer in order: given how many bytes were
// written so far and the most it wants, it returns the next bytes (at least one, at most `max`),
// valid until the next call.
using PayloadSource = std::function<absl::StatusOr<std::string_view>(int64_t offset, int64_t max)>;
// HostPayload is the source of a payload already in host memory.
PayloadSource HostPayload(std::string_view bytes);

// PayloadSink takes a record's payload from the reader in order, chunk by chunk. The record is
// verified only once all of it is read: a sink must not let the bytes take effect before Next
// returns the record.
using PayloadSink = std::function<absl::Status(int64_t offset, std::string_view chunk)>;
struct Record;
// SinkFor returns where the payload of `record` (its metadata read, its payload not yet) goes:
// an empty sink drops it. An error stops the read and is returned as is.
using SinkFor = std::function<absl::StatusOr<PayloadSink>(const Record& record)>;

// RecordFile appends records to one file. Not thread-safe: its owner serialises appends.
class RecordFile {
 public:
  // Create makes a new file at `path` (it must not exist) and returns it open for appending.
  static absl::StatusOr<RecordFile> Create(const std::string& path);
  // OpenForAppend opens an existing file, cut to `length` bytes (its whole records).
  static absl::StatusOr<RecordFile> OpenForAppend(const std::string& path, int64_t length);

  RecordFile(RecordFile&& other) noexcept;
  RecordFile& operator=(RecordFile&& other) noexcept;
  ~RecordFile();

  // Append writes one record and returns its offset. On an error (a full disk, an I/O error) the
  // file is cut back to where the record began, so that it never ends in a partial record the
  // next append would bury; the error names the file.
  absl::StatusOr<int64_t> Append(RecordKind kind, const google::protobuf::MessageLite& meta,
                                 int64_t payload_bytes = 0, const PayloadSource& payload = {});
  // Sync makes everything appended so far durable (fdatasync).
  absl::Status Sync();
  // WriteBack writes bytes [from, to) to the disk and waits for them, without the guarantees of
  // Sync (no file metadata, no disk cache flush): what makes their pages clean for DropCached.
  absl::Status WriteBack(int64_t from, int64_t to);
  // DropCached asks the kernel to drop the file's clean pages in [from, to) from the page cache.
  // The files are written once and read only at recovery, so keeping their pages would only push
  // other data out of memory (and keep taking new pages: on a VM whose free memory goes back to
  // the host, a fresh page costs ten times a reused one, 2.3 vs 0.19 ms per MiB measured here).
  void DropCached(int64_t from, int64_t to) const;

  const std::string& path() const { return path_; }
  // Bytes in the file: the offset of the next record.
  int64_t size() const { return size_; }

 private:
  RecordFile(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  absl::Status WriteAll(std::string_view bytes);

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// Record is one whole record as RecordReader::Next found it.
struct Record {
  RecordKind kind = RecordKind::kFileHeader;
  int64_t offset = 0;
  std::string meta;
  int64_t payload_bytes = 0;
};

// RecordReader reads one file's records in order.
class RecordReader {
 public:
  static absl::StatusOr<RecordReader> Open(const std::string& path);

  RecordReader(RecordReader&& other) noexcept;
  RecordReader& operator=(RecordReader&& other) noexcept;
  ~RecordReader();

  // Next returns the next whole record, its payload passed to the sink `sink_for` gives (read and
  // dropped without one); nullopt at the end of the file, or at a torn last record (torn_at() then
  // says where it began): one that runs past the end of the file with no whole record in the
  // bytes it leaves (a record whose length was damaged runs past the end too, but whole records
  // follow it), one whose bytes from its start to the end of the file are all zeros, or one that
  // fails its check with nothing but zeros after it (a file system may keep a crashed append's
  // length but not all of its bytes). Anything else wrong is DATA_LOSS naming the file, the
  // offset and what is wrong.
  absl::StatusOr<std::optional<Record>> Next(const SinkFor& sink_for = {});

  // DropCached drops the pages read so far from the page cache (see RecordFile::DropCached).
  void DropCached() const;

  // Where the torn last record began, once Next found one.
  std::optional<int64_t> torn_at() const { return torn_at_; }
  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }

 private:
  RecordReader(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), file_size_(size) {}
  // ReadAt reads exactly `bytes.size()` bytes at `offset`.
  absl::Status ReadAt(int64_t offset, absl::Span<char> bytes) const;
  // ZerosFrom is true when every byte from `offset` to the end of the file is zero.
  absl::StatusOr<bool> ZerosFrom(int64_t offset) const;
  // WholeRecordAfter is true when a whole record (magic, lengths and CRC-32 right) starts
  // somewhere in (offset, file end): probes from the first kMaxProbes places the head's magic is
  // found.
  absl::StatusOr<bool> WholeRecordAfter(int64_t offset);
  static constexpr int kMaxProbes = 1024;
  // Torn records a torn last record at `offset` and ends the file there.
  std::optional<Record> Torn(int64_t offset);
  absl::Status Damaged(int64_t offset, std::string_view what) const;

  std::string path_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  int64_t offset_ = 0;
  std::optional<int64_t> torn_at_;
  // Set while WholeRecordAfter probes: a probe that runs past the end does not probe again.
  bool probing_ = false;
};

// File names in a store directory: snapshot-<generation>.tosnap, log-<generation>.tolog
// (generation zero-padded to 12 digits so that names sort by generation).
std::string SnapshotFileName(int64_t generation);
std::string LogFileName(int64_t generation);
// ParseStoreFileName returns the generation of a snapshot (`snapshot` true) or log file name,
// nullopt for any other name.
std::optional<int64_t> ParseStoreFileName(std::string_view name, bool snapshot);

// SyncDirectory makes the directory's entries (created, renamed, removed files) durable.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_STORE_STORE_FILES_H_
