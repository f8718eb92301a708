// ChildProcess: a child process with its output captured, for tests that run the real binaries.
#ifndef TENSOROPS_TESTS_CHILD_PROCESS_H_
#define TENSOROPS_TESTS_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace tensorops::testing {

// ChildProcess runs a binary with stdin from /dev/null and stdout and stderr captured by two
// threads (so that a chatty child never blocks on a full pipe). The destructor kills a child that
// is still running.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv) {
    std::array<int, 2> stdout_pipe, stderr_pipe;
    if (pipe2(stdout_pipe.data(), O_CLOEXEC) != 0 || pipe2(stderr_pipe.data(), O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(errno, "pipe2");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, stdout_pipe[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, stderr_pipe[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int spawn_error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(stdout_pipe[1]);
    close(stderr_pipe[1]);
    if (spawn_error != 0) {
      close(stdout_pipe[0]);
      close(stderr_pipe[0]);
      return absl::ErrnoToStatus(spawn_error, absl::StrCat("posix_spawn ", argv[0]));
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, stdout_pipe[0], stderr_pipe[0]));
  }

  ~ChildProcess() {
    if (!exit_status_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (std::thread& reader : readers_) reader.join();
  }

  // WaitForMatch waits up to `timeout` for `pattern` to match stdout or stderr and returns the
  // text of capture group 1; nullopt when the time passes or both streams close without a match.
  std::optional<std::string> WaitForMatch(const std::regex& pattern, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<std::string> match;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
      for (const std::string& text : output_) {
        std::smatch found;
        if (std::regex_search(text, found, pattern)) {
          match = found[1].str();
          return true;
        }
      }
      return open_streams_ == 0;
    });
    return match;
  }

  // WaitForExit waits up to `timeout` for the child to exit, kills it with SIGKILL after that, and
  // returns its wait status.
  int WaitForExit(absl::Duration timeout) {
    if (exit_status_.has_value()) return *exit_status_;
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    exit_status_ = status;
    for (std::thread& reader : readers_) reader.join();
    readers_.clear();
    return status;
  }

  // Signal sends `signal` to the child unless it has been waited for.
  void Signal(int signal) {
    if (!exit_status_.has_value()) kill(pid_, signal);
  }

  // Terminate sends SIGTERM and then waits as WaitForExit.
  int Terminate(absl::Duration timeout) {
    if (!exit_status_.has_value()) kill(pid_, SIGTERM);
    return WaitForExit(timeout);
  }

  std::string stdout_text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return output_[0];
  }
  std::string stderr_text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return output_[1];
  }

 private:
  ChildProcess(pid_t pid, int stdout_fd, int stderr_fd) : pid_(pid) {
    readers_.emplace_back([this, stdout_fd] { Drain(stdout_fd, 0); });
    readers_.emplace_back([this, stderr_fd] { Drain(stderr_fd, 1); });
  }

  void Drain(int fd, int stream) {
    char buffer[4096];
    ssize_t count = 0;
    while ((count = read(fd, buffer, sizeof(buffer))) != 0) {
      if (count < 0) {
        if (errno == EINTR) continue;
        break;
      }
      std::lock_guard<std::mutex> lock(mu_);
      output_[stream].append(buffer, static_cast<size_t>(count));
      cv_.notify_all();
    }
    close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    --open_streams_;
    cv_.notify_all();
  }

  const pid_t pid_;
  std::optional<int> exit_status_;
  std::vector<std::thread> readers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string output_[2];  // stdout, stderr; guarded by mu_.
  int open_streams_ = 2;   // Guarded by mu_.
};

// DescribeExit describes a wait status for failure messages.
inline std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// ExitedWith tells whether a wait status is a normal exit with `code`.
inline bool ExitedWith(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_CHILD_PROCESS_H_
