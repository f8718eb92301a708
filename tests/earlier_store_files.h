// RewriteAsEarlierServers: turns a store directory into one a server from before tenants were
// named could have written, for the tests of what recovery makes of such files
// (DurableStoreOptions::renamed_namespaces).
#ifndef TENSOROPS_TESTS_EARLIER_STORE_FILES_H_
#define TENSOROPS_TESTS_EARLIER_STORE_FILES_H_

#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/empty.pb.h"
#include "server/store/store_files.h"
#include "tensorops/storefiles/v1/store_files.pb.h"

namespace tensorops::testing {

// RewriteAsEarlierServers copies every snapshot and log in `dir` record by record, its header
// without tenant_namespaces (which earlier servers did not write), and puts the copy in its place.
inline absl::Status RewriteAsEarlierServers(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!ParseStoreFileName(name, /*snapshot=*/true) &&
        !ParseStoreFileName(name, /*snapshot=*/false)) {
      continue;
    }
    const std::string path = entry.path().string();
    const std::string copy = path + ".earlier";
    absl::StatusOr<RecordReader> reader = RecordReader::Open(path);
    if (!reader.ok()) return reader.status();
    absl::StatusOr<RecordFile> file = RecordFile::Create(copy);
    if (!file.ok()) return file.status();
    while (true) {
      std::string payload;
      absl::StatusOr<std::optional<Record>> record =
          reader->Next([&payload](const Record&) -> absl::StatusOr<PayloadSink> {
            return [&payload](int64_t, std::string_view chunk) {
              payload.append(chunk);
              return absl::OkStatus();
            };
          });
      if (!record.ok()) return record.status();
      if (!record->has_value()) break;
      absl::StatusOr<int64_t> appended;
      if ((*record)->kind == RecordKind::kFileHeader) {
        storefiles::v1::FileHeader header;
        if (!header.ParseFromString((*record)->meta)) {
          return absl::DataLossError(path + ": its header does not parse");
        }
        header.clear_tenant_namespaces();
        appended = file->Append((*record)->kind, header);
      } else {
        // Every other record's metadata as read: parsed into Empty, its fields are unknown ones,
        // which protobuf writes back as they came.
        google::protobuf::Empty meta;
        if (!meta.ParseFromString((*record)->meta)) {
          return absl::DataLossError(path + ": a record's metadata does not parse");
        }
        appended = file->Append((*record)->kind, meta, static_cast<int64_t>(payload.size()),
                                HostPayload(payload));
      }
      if (!appended.ok()) return appended.status();
    }
    if (absl::Status synced = file->Sync(); !synced.ok()) return synced;
    std::filesystem::rename(copy, path);
  }
  return absl::OkStatus();
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_EARLIER_STORE_FILES_H_
