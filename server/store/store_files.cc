#include "server/store/store_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/status_macros.h"

namespace tensorops {

namespace {

constexpr char kHeadMagic[4] = {'T', 'O', 'S', 'R'};
constexpr char kTailMagic[4] = {'T', 'E', 'N', 'D'};
// Payloads are read in chunks of this size (and written as their source hands them over).
constexpr int64_t kChunkBytes = int64_t{4} << 20;

void PutU32(char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
void PutU64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return value;
}
uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return value;
}

// Crc extends a CRC-32 (zlib's, the one of gzip and PNG) over `bytes`, in pieces zlib's uInt
// length can take.
uint32_t Crc(uint32_t crc, std::string_view bytes) {
  constexpr size_t kPiece = size_t{1} << 30;
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kPiece);
    crc = static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n)));
    bytes.remove_prefix(n);
  }
  return crc;
}

absl::Status ErrnoError(int error, std::string_view what, const std::string& path) {
  const std::string message = absl::StrFormat("%s %s: %s", what, path, std::strerror(error));
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

PayloadSource HostPayload(std::string_view bytes) {
  return [bytes](int64_t offset, int64_t max) -> absl::StatusOr<std::string_view> {
    return bytes.substr(
        static_cast<size_t>(offset),
        static_cast<size_t>(std::min<int64_t>(max, static_cast<int64_t>(bytes.size()) - offset)));
  };
}

// ---- RecordFile ----

absl::StatusOr<RecordFile> RecordFile::Create(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", path);
  return RecordFile(path, fd, 0);
}

absl::StatusOr<RecordFile> RecordFile::OpenForAppend(const std::string& path, int64_t length) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  if (ftruncate(fd, length) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, "cannot cut the torn end of", path);
  }
  return RecordFile(path, fd, length);
}

RecordFile::RecordFile(RecordFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

RecordFile& RecordFile::operator=(RecordFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) close(fd_);
}

absl::Status RecordFile::WriteAll(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = pwrite(fd_, bytes.data(), bytes.size(), size_);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write", path_);
    }
    size_ += written;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RecordFile::Append(RecordKind kind,
                                           const google::protobuf::MessageLite& meta,
                                           int64_t payload_bytes, const PayloadSource& payload) {
  const int64_t start = size_;
  std::string head(kRecordHeadBytes, '\0');
  std::memcpy(head.data(), kHeadMagic, 4);
  PutU32(head.data() + 4, static_cast<uint32_t>(kind));
  const std::string meta_bytes = meta.SerializeAsString();
  PutU32(head.data() + 8, static_cast<uint32_t>(meta_bytes.size()));
  PutU64(head.data() + 16, static_cast<uint64_t>(payload_bytes));
  head += meta_bytes;
  uint32_t crc = Crc(0, head);
  absl::Status written = WriteAll(head);
  for (int64_t done = 0; written.ok() && done < payload_bytes;) {
    absl::StatusOr<std::string_view> chunk = payload(done, payload_bytes - done);
    if (!chunk.ok()) {
      written = chunk.status();
    } else if (chunk->empty()) {
      written = absl::InternalError(absl::StrFormat(
          "writing %s: the payload ended after %d of its %d bytes", path_, done, payload_bytes));
    } else {
      crc = Crc(crc, *chunk);
      written = WriteAll(*chunk);
      done += static_cast<int64_t>(chunk->size());
    }
  }
  if (written.ok()) {
    char tail[kRecordTailBytes];
    PutU32(tail, crc);
    std::memcpy(tail + 4, kTailMagic, 4);
    written = WriteAll(std::string_view(tail, sizeof(tail)));
  }
  if (!written.ok()) {
    // Best effort: a file that cannot be cut back still ends in a torn record, which recovery
    // drops as long as nothing is appended after it, and the caller appends nothing more to it.
    if (ftruncate(fd_, start) == 0) size_ = start;
    return written;
  }
  return start;
}

absl::Status RecordFile::Sync() {
  if (fdatasync(fd_) != 0) return ErrnoError(errno, "cannot sync", path_);
  return absl::OkStatus();
}

absl::Status RecordFile::WriteBack(int64_t from, int64_t to) {
  if (to <= from) return absl::OkStatus();
  if (sync_file_range(
          fd_, from, to - from,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
    return ErrnoError(errno, "cannot write back", path_);
  }
  return absl::OkStatus();
}

void RecordFile::DropCached(int64_t from, int64_t to) const {
  // Advice only: a failure costs memory, never data.
  if (to > from) (void)posix_fadvise(fd_, from, to - from, POSIX_FADV_DONTNEED);
}

// ---- RecordReader ----

absl::StatusOr<RecordReader> RecordReader::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, "cannot stat", path);
  }
  return RecordReader(path, fd, static_cast<int64_t>(info.st_size));
}

RecordReader::RecordReader(RecordReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      offset_(other.offset_),
      torn_at_(other.torn_at_) {}

RecordReader& RecordReader::operator=(RecordReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    offset_ = other.offset_;
    torn_at_ = other.torn_at_;
  }
  return *this;
}

RecordReader::~RecordReader() {
  if (fd_ >= 0) close(fd_);
}

absl::Status RecordReader::ReadAt(int64_t offset, absl::Span<char> bytes) const {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got =
        pread(fd_, bytes.data() + done, bytes.size() - done, offset + static_cast<int64_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot read", path_);
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrFormat("%s: the file ended at offset %d while being read",
                                                 path_, offset + static_cast<int64_t>(done)));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RecordReader::ZerosFrom(int64_t offset) const {
  std::vector<char> chunk(static_cast<size_t>(std::min(kChunkBytes, file_size_ - offset)));
  for (int64_t at = offset; at < file_size_;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), file_size_ - at);
    TENSOROPS_RETURN_IF_ERROR(ReadAt(at, absl::MakeSpan(chunk.data(), static_cast<size_t>(n))));
    if (std::any_of(chunk.begin(), chunk.begin() + n, [](char c) { return c != 0; })) return false;
    at += n;
  }
  return true;
}

absl::StatusOr<bool> RecordReader::WholeRecordAfter(int64_t offset) {
  // The probes read as Next does, from other places: where this reader was is put back after.
  const int64_t saved_offset = offset_;
  const std::optional<int64_t> saved_torn_at = torn_at_;
  probing_ = true;
  bool found = false;
  int probes = 0;
  std::vector<char> chunk(static_cast<size_t>(std::min(kChunkBytes, file_size_ - offset)));
  absl::Status read = absl::OkStatus();
  for (int64_t at = offset + 1;
       at + kRecordHeadBytes + kRecordTailBytes <= file_size_ && !found && probes < kMaxProbes;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), file_size_ - at);
    read = ReadAt(at, absl::MakeSpan(chunk.data(), static_cast<size_t>(n)));
    if (!read.ok()) break;
    const std::string_view bytes(chunk.data(), static_cast<size_t>(n));
    for (size_t hit = bytes.find(std::string_view(kHeadMagic, 4)); hit != std::string_view::npos;
         hit = bytes.find(std::string_view(kHeadMagic, 4), hit + 1)) {
      offset_ = at + static_cast<int64_t>(hit);
      torn_at_.reset();
      const absl::StatusOr<std::optional<Record>> record = Next();
      if (record.ok() && record->has_value()) {
        found = true;
        break;
      }
      if (++probes == kMaxProbes) break;
    }
    // The next chunk overlaps this one by a magic's length less one, not to miss one across.
    at += n > 3 ? n - 3 : n;
  }
  offset_ = saved_offset;
  torn_at_ = saved_torn_at;
  probing_ = false;
  TENSOROPS_RETURN_IF_ERROR(read);
  return found;
}

void RecordReader::DropCached() const {
  if (offset_ > 0) (void)posix_fadvise(fd_, 0, offset_, POSIX_FADV_DONTNEED);
}

std::optional<Record> RecordReader::Torn(int64_t offset) {
  torn_at_ = offset;
  offset_ = file_size_;
  return std::nullopt;
}

absl::Status RecordReader::Damaged(int64_t offset, std::string_view what) const {
  return absl::DataLossError(
      absl::StrFormat("%s is damaged at offset %d: %s", path_, offset, what));
}

absl::StatusOr<std::optional<Record>> RecordReader::Next(const SinkFor& sink_for) {
  const int64_t start = offset_;
  const int64_t left = file_size_ - start;
  if (left == 0) return std::nullopt;
  if (left < kRecordHeadBytes + kRecordTailBytes) return Torn(start);
  char head[kRecordHeadBytes];
  TENSOROPS_RETURN_IF_ERROR(ReadAt(start, absl::MakeSpan(head, sizeof(head))));
  const uint32_t kind = GetU32(head + 4);
  const int64_t meta_bytes = GetU32(head + 8);
  const uint64_t payload_bytes = GetU64(head + 16);
  const bool head_valid = std::memcmp(head, kHeadMagic, 4) == 0 && GetU32(head + 12) == 0 &&
                          kind >= static_cast<uint32_t>(RecordKind::kFileHeader) &&
                          kind <= static_cast<uint32_t>(RecordKind::kSnapshotEnd) &&
                          meta_bytes <= kMaxRecordMetaBytes &&
                          payload_bytes <= static_cast<uint64_t>(INT64_MAX / 2);
  if (!head_valid) {
    TENSOROPS_ASSIGN_OR_RETURN(const bool zeros, ZerosFrom(start));
    if (zeros) return Torn(start);
    return Damaged(start, "not the start of a record (bad magic, kind or lengths)");
  }
  const int64_t end = start + kRecordHeadBytes + meta_bytes + static_cast<int64_t>(payload_bytes) +
                      kRecordTailBytes;
  if (end > file_size_) {
    // A crashed append leaves a prefix of one record; whole records after this one mean that its
    // length, not the file's end, is wrong, and cutting the file there would drop them.
    if (!probing_) {
      TENSOROPS_ASSIGN_OR_RETURN(const bool followed, WholeRecordAfter(start));
      if (followed) {
        return Damaged(start,
                       "the record's length runs past the end of the file, but whole "
                       "records follow it");
      }
    }
    return Torn(start);
  }

  Record record{.kind = static_cast<RecordKind>(kind),
                .offset = start,
                .payload_bytes = static_cast<int64_t>(payload_bytes)};
  record.meta.resize(static_cast<size_t>(meta_bytes));
  TENSOROPS_RETURN_IF_ERROR(ReadAt(start + kRecordHeadBytes, absl::MakeSpan(record.meta)));
  uint32_t crc = Crc(Crc(0, std::string_view(head, sizeof(head))), record.meta);
  PayloadSink sink;
  if (sink_for) {
    TENSOROPS_ASSIGN_OR_RETURN(sink, sink_for(record));
  }
  std::string chunk(static_cast<size_t>(std::min<int64_t>(kChunkBytes, record.payload_bytes)),
                    '\0');
  const int64_t payload_start = start + kRecordHeadBytes + meta_bytes;
  for (int64_t done = 0; done < record.payload_bytes;) {
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(chunk.size()), record.payload_bytes - done);
    TENSOROPS_RETURN_IF_ERROR(
        ReadAt(payload_start + done, absl::MakeSpan(chunk.data(), static_cast<size_t>(n))));
    const std::string_view piece(chunk.data(), static_cast<size_t>(n));
    crc = Crc(crc, piece);
    if (sink) TENSOROPS_RETURN_IF_ERROR(sink(done, piece));
    done += n;
  }
  char tail[kRecordTailBytes];
  TENSOROPS_RETURN_IF_ERROR(ReadAt(end - kRecordTailBytes, absl::MakeSpan(tail, sizeof(tail))));
  if (std::memcmp(tail + 4, kTailMagic, 4) != 0 || GetU32(tail) != crc) {
    TENSOROPS_ASSIGN_OR_RETURN(const bool zeros_after, ZerosFrom(end));
    if (zeros_after) return Torn(start);
    return Damaged(start, "the record fails its CRC-32 check");
  }
  offset_ = end;
  return record;
}

// ---- Names ----

namespace {
constexpr char kSnapshotPrefix[] = "snapshot-";
constexpr char kSnapshotSuffix[] = ".tosnap";
constexpr char kLogPrefix[] = "log-";
constexpr char kLogSuffix[] = ".tolog";
}  // namespace

std::string SnapshotFileName(int64_t generation) {
  return absl::StrFormat("%s%012d%s", kSnapshotPrefix, generation, kSnapshotSuffix);
}

std::string LogFileName(int64_t generation) {
  return absl::StrFormat("%s%012d%s", kLogPrefix, generation, kLogSuffix);
}

std::optional<int64_t> ParseStoreFileName(std::string_view name, bool snapshot) {
  const std::string_view prefix = snapshot ? kSnapshotPrefix : kLogPrefix;
  const std::string_view suffix = snapshot ? kSnapshotSuffix : kLogSuffix;
  if (name.size() != prefix.size() + 12 + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string_view digits = name.substr(prefix.size(), 12);
  int64_t generation;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &generation)) {
    return std::nullopt;
  }
  return generation;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open directory", dir);
  const int synced = fsync(fd);
  const int error = errno;
  close(fd);
  if (synced != 0) return ErrnoError(error, "cannot sync directory", dir);
  return absl::OkStatus();
}

}  // namespace tensorops
