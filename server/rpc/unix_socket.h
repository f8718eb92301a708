// The server's Unix domain socket (--unix_socket, ServerOptions::unix_socket): the checks made on
// its path before gRPC binds it, and the removal of the socket file when the server stops.
//
//   TENSOROPS_RETURN_IF_ERROR(PrepareUnixSocketPath(path));        // before gRPC binds it
//   builder.AddListeningPort(UnixSocketTarget(path), credentials, &bound);
//   ... BuildAndStart() ...
//   std::optional<UnixSocketFile> file = IdentifyUnixSocket(path);  // right after the bind
//   ...
//   if (file.has_value()) RemoveUnixSocket(*file);                  // once the server stopped
//
// gRPC itself removes any socket file at the path before it binds, whether or not a server still
// listens there, so that a second server would silently take the socket of a running one;
// PrepareUnixSocketPath refuses that case first.
#ifndef TENSOROPS_SERVER_RPC_UNIX_SOCKET_H_
#define TENSOROPS_SERVER_RPC_UNIX_SOCKET_H_

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorops {

// kMaxUnixSocketPathBytes is the longest path a Unix domain socket can have: sockaddr_un's
// sun_path (108 bytes on Linux) less the terminating NUL.
inline constexpr size_t kMaxUnixSocketPathBytes = sizeof(sockaddr_un::sun_path) - 1;

// UnixSocketTarget is the gRPC address of the socket at `path`: "unix:PATH" (a relative path is
// relative to the working directory).
std::string UnixSocketTarget(absl::string_view path);

// PrepareUnixSocketPath makes `path` ready for gRPC to bind, or says why it cannot be:
//   - nothing at `path`: OK;
//   - a socket that a process accepts connections on: UNAVAILABLE, "in use", left alone;
//   - a socket nobody listens on (a stale one, left by a server that was killed): removed, OK
//     (logged);
//   - anything else (a regular file, a directory, a symbolic link, ...): UNAVAILABLE, left alone;
// and then binds a socket of its own there (and removes it again), so that a directory that does
// not exist or cannot be written fails with the reason, not gRPC's core error. Every message
// begins "cannot listen on unix:PATH: ".
absl::Status PrepareUnixSocketPath(const std::string& path);

// UnixSocketFile identifies the socket file a server bound, so that the server removes that file
// when it stops and not one that another process has put at the path since.
struct UnixSocketFile {
  std::string path;
  dev_t device = 0;
  ino_t inode = 0;
  // Its permission bits (0777 less the umask): connecting takes write permission.
  mode_t mode = 0;
};

// IdentifyUnixSocket describes the socket file at `path`; nullopt when there is no socket there.
std::optional<UnixSocketFile> IdentifyUnixSocket(const std::string& path);

// RemoveUnixSocket removes file.path when it still is that socket file (gRPC may have removed it
// already).
void RemoveUnixSocket(const UnixSocketFile& file);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RPC_UNIX_SOCKET_H_
