#include "proto/credential_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tensorops::wire {

absl::StatusOr<std::string> ReadCredentialFile(std::string_view field, const std::string& path) {
  constexpr size_t kMaxBytes = size_t{1} << 20;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("%s: cannot open %s", field, path));
  }
  std::string contents;
  char buffer[4096];
  while (true) {
    const ssize_t count = read(fd, buffer, sizeof(buffer));
    if (count == 0) break;
    if (count < 0) {
      if (errno == EINTR) continue;
      const int read_errno = errno;
      close(fd);
      return absl::ErrnoToStatus(read_errno, absl::StrFormat("%s: cannot read %s", field, path));
    }
    contents.append(buffer, static_cast<size_t>(count));
    if (contents.size() > kMaxBytes) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s is larger than %d bytes, too large for a certificate, key or token", field, path,
          kMaxBytes));
    }
  }
  close(fd);
  return contents;
}

}  // namespace tensorops::wire
