// HttpGet: a minimal HTTP/1.0 GET over a POSIX socket to a loopback port, for tests that scrape
// the metrics endpoint without an HTTP client library; ConnectToLoopback, the socket under it.
#ifndef TENSOROPS_TESTS_HTTP_GET_H_
#define TENSOROPS_TESTS_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorops::testing {

// HttpResponse: the status code and body of one HTTP response.
struct HttpResponse {
  int status = 0;
  std::string body;
};

// ConnectToLoopback opens a TCP connection to 127.0.0.1:`port` whose reads and writes give up
// after 10 s (which only bounds a broken run); the caller closes the descriptor.
inline absl::StatusOr<int> ConnectToLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(error)));
  }
  return fd;
}

// HttpGet sends `GET path HTTP/1.0` to 127.0.0.1:port and reads the response until the server
// closes the connection. Every socket operation gives up after 10 s, which only bounds a broken
// run: a working endpoint answers in milliseconds.
inline absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path) {
  const absl::StatusOr<int> connected = ConnectToLoopback(port);
  if (!connected.ok()) return connected.status();
  const int fd = *connected;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += n;
  }
  std::string response;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DeadlineExceededError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    response.append(buffer, n);
  }
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no end of headers in: ", response));
  }
  // Status line: HTTP/1.x SP code SP reason.
  const std::vector<std::string> status_line =
      absl::StrSplit(response.substr(0, response.find("\r\n")), absl::MaxSplits(' ', 2));
  HttpResponse parsed;
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &parsed.status)) {
    return absl::DataLossError(absl::StrCat("bad status line in: ", response));
  }
  parsed.body = response.substr(header_end + 4);
  return parsed;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_HTTP_GET_H_
