#include "server/rpc/unix_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace tensorops {
namespace {

// FileKind names what lstat found, for messages.
absl::string_view FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a named pipe";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device file";
  return "a file of another kind";
}

// CannotListen is every error's wording: the address, then why.
absl::Status CannotListen(const std::string& path, absl::string_view why) {
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", UnixSocketTarget(path), ": ", why));
}

// SocketAddress fills `address` with `path`, which ValidateServerOptions has kept short enough.
bool SocketAddress(const std::string& path, sockaddr_un* address) {
  if (path.empty() || path.size() > kMaxUnixSocketPathBytes) return false;
  *address = sockaddr_un{};
  address->sun_family = AF_UNIX;
  std::memcpy(address->sun_path, path.data(), path.size());
  return true;
}

// Listening says whether a process accepts connections on the socket at `address`: OK(true) when
// a connection is accepted or the backlog is full, OK(false) when refused (nobody listens),
// otherwise the errno of the attempt.
absl::StatusOr<bool> Listening(const sockaddr_un& address) {
  // Non-blocking: a connect to a full backlog fails with EAGAIN instead of waiting.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  const int result = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (result == 0 || error == EAGAIN || error == EINPROGRESS) return true;
  if (error == ECONNREFUSED) return false;
  return absl::ErrnoToStatus(error, "connect");
}

}  // namespace

std::string UnixSocketTarget(absl::string_view path) { return absl::StrCat("unix:", path); }

absl::Status PrepareUnixSocketPath(const std::string& path) {
  sockaddr_un address;
  if (!SocketAddress(path, &address)) {
    return CannotListen(path, absl::StrFormat("the path is empty or longer than %d bytes",
                                              kMaxUnixSocketPathBytes));
  }
  struct stat status;
  if (lstat(path.c_str(), &status) == 0) {
    if (!S_ISSOCK(status.st_mode)) {
      return CannotListen(
          path, absl::StrFormat("%s exists and is %s, not a socket (remove it, or choose another "
                                "--unix_socket)",
                                path, FileKind(status.st_mode)));
    }
    absl::StatusOr<bool> listening = Listening(address);
    if (!listening.ok()) {
      return CannotListen(
          path, absl::StrFormat("cannot tell whether a server listens on the socket there (%s)",
                                listening.status().message()));
    }
    if (*listening) {
      return CannotListen(path,
                          "the socket is in use: another server listens there (stop it, or choose "
                          "another --unix_socket)");
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return CannotListen(path, absl::StrFormat("cannot remove the stale socket file there: %s",
                                                std::strerror(errno)));
    }
    spdlog::info(
        "removed the stale socket file {} (nothing listened on it: left by a server that did not "
        "shut down)",
        path);
  } else if (errno != ENOENT) {
    return CannotListen(path, absl::StrFormat("cannot inspect %s: %s", path, std::strerror(errno)));
  }

  // A bind of our own, undone at once, so that a missing or unwritable directory is one clear
  // line (gRPC's bind error is several hundred characters of core error).
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return CannotListen(path, absl::StrCat("socket: ", std::strerror(errno)));
  const int bound = bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (bound == 0) {
    unlink(path.c_str());
    return absl::OkStatus();
  }
  const std::string directory = std::filesystem::path(path).parent_path().string();
  const std::string shown_directory = directory.empty() ? std::string(".") : directory;
  switch (error) {
    case ENOENT:
      return CannotListen(path,
                          absl::StrFormat("its directory %s does not exist", shown_directory));
    case ENOTDIR:
      return CannotListen(path, absl::StrFormat("%s is not a directory", shown_directory));
    case EACCES:
    case EPERM:
    case EROFS:
      return CannotListen(path, absl::StrFormat("cannot create a socket in %s: %s", shown_directory,
                                                std::strerror(error)));
    case EADDRINUSE:
      // Created between the lstat above and the bind.
      return CannotListen(path,
                          "the path is in use: another process created a file there just now");
    default:
      return CannotListen(path, absl::StrCat("bind: ", std::strerror(error)));
  }
}

std::optional<UnixSocketFile> IdentifyUnixSocket(const std::string& path) {
  struct stat status;
  if (lstat(path.c_str(), &status) != 0 || !S_ISSOCK(status.st_mode)) return std::nullopt;
  return UnixSocketFile{.path = path,
                        .device = status.st_dev,
                        .inode = status.st_ino,
                        .mode = static_cast<mode_t>(status.st_mode & 07777)};
}

void RemoveUnixSocket(const UnixSocketFile& file) {
  const std::optional<UnixSocketFile> now = IdentifyUnixSocket(file.path);
  if (!now.has_value() || now->device != file.device || now->inode != file.inode) return;
  if (unlink(file.path.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("shutdown: cannot remove the socket file {}: {}", file.path, std::strerror(errno));
  }
}

}  // namespace tensorops
