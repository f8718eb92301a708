// ValidateServerOptions and ValidateSchedulerOptions: every range error's message, --device's
// parse into DeviceChoice, the server's command line (server/config/command_line.h), and what Start
// makes of --unix_socket's path (a stale socket, one in use, a file that is not a socket).
#include "server/config/server_options.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/config/command_line.h"
#include "server/core/scheduler.h"
#include "server/rpc/unix_socket.h"
#include "server/server.h"
#include "tensorops/v1/service.grpc.pb.h"

// A flag of the type --device has, to parse through Abseil's flag machinery as main.cc does.
ABSL_FLAG(tensorops::DeviceChoice, device_choice_for_test, tensorops::DeviceChoice::kAuto,
          "Parsed by DeviceChoiceFlagTest only.");

// Flags for the command line tests: two groups of them, and one that no group lists.
ABSL_FLAG(std::string, cl_host, "127.0.0.1",
          "Address to listen on. A help text long enough that FlagsHelp has to wrap it: it goes on "
          "past a hundred columns, the width of the help, and then some more.");
ABSL_FLAG(int, cl_port, 50051, "Port.");
ABSL_FLAG(bool, cl_verbose, false, "Log more.");
ABSL_FLAG(tensorops::DeviceChoice, cl_device, tensorops::DeviceChoice::kAuto, "Where.");
ABSL_FLAG(int, cl_unlisted, 0, "Registered, but in no group.");

namespace tensorops {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// BadServerOption is one value out of range and the message that must name it.
struct BadServerOption {
  std::function<void(ServerOptions&)> set;
  std::string message;
};

TEST(ValidateServerOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateServerOptions(ServerOptions()).ok());
}

TEST(ValidateServerOptionsTest, EachValueOutOfRangeNamesTheFlagTheValueAndTheRule) {
  const std::vector<BadServerOption> cases = {
      {[](ServerOptions& o) { o.host = ""; },
       "--host is empty: must be an IPv4 or IPv6 address or a host name"},
      {[](ServerOptions& o) { o.port = -1; },
       "--port=-1 is out of range: must be 0..65535 (0 picks a free port)"},
      {[](ServerOptions& o) { o.port = 65536; },
       "--port=65536 is out of range: must be 0..65535 (0 picks a free port)"},
      {[](ServerOptions& o) { o.unix_socket = "/run/" + std::string(103, 's'); },
       "--unix_socket=/run/" + std::string(103, 's') +
           " is too long: 108 bytes, and a Unix socket's path holds at most 107 (sockaddr_un's "
           "108 bytes with the terminating NUL); choose a shorter path"},
      {[](ServerOptions& o) { o.unix_socket = "unix:/run/tensorops.sock"; },
       "--unix_socket=unix:/run/tensorops.sock is a gRPC target, not a path: give the socket's "
       "path alone (/run/tensorops.sock)"},
      {[](ServerOptions& o) { o.unix_socket = "unix-abstract:tensorops"; },
       "--unix_socket=unix-abstract:tensorops is a gRPC target, not a path: give the socket's "
       "path alone (tensorops)"},
      {[](ServerOptions& o) { o.threads = -2; },
       "--threads=-2 is out of range: must be >= 0 (0 = every core)"},
      {[](ServerOptions& o) { o.limits.max_message_bytes = 0; },
       "--max_message_bytes=0 is out of range: must be 1..2147483647 (gRPC's limit)"},
      {[](ServerOptions& o) { o.limits.max_message_bytes = int64_t{1} << 31; },
       "--max_message_bytes=2147483648 is out of range: must be 1..2147483647 (gRPC's limit)"},
      {[](ServerOptions& o) { o.limits.max_elements = 0; },
       "--max_elements=0 is out of range: must be >= 1"},
      {[](ServerOptions& o) { o.limits.max_rank = 17; },
       "--max_rank=17 is out of range: must be 0..16"},
      {[](ServerOptions& o) { o.limits.max_rank = -1; },
       "--max_rank=-1 is out of range: must be 0..16"},
      {[](ServerOptions& o) { o.store.memory_bytes = -1; },
       "--store_memory_bytes=-1 is out of range: must be >= 0 (0 = no store)"},
      {[](ServerOptions& o) { o.limits.max_stream_in_flight = 0; },
       "--max_stream_in_flight=0 is out of range: must be >= 1"},
      {[](ServerOptions& o) { o.limits.max_memory_bytes = -1; },
       "--max_memory_bytes=-1 is out of range: must be >= 0 (0 = no limit)"},
      {[](ServerOptions& o) { o.memory_trim.idle_after = absl::Milliseconds(-1); },
       "--memory_trim_idle_ms=-1 is out of range: must be >= 0 (0 = never trim)"},
      {[](ServerOptions& o) { o.queue.max_concurrent_calls = -1; },
       "--max_concurrent_calls=-1 is out of range: must be >= 0 (0 = one per CPU thread)"},
      {[](ServerOptions& o) { o.queue.max_queued_calls = -5; },
       "--max_queued_calls=-5 is out of range: must be >= 0"},
      {[](ServerOptions& o) { o.queue.max_batch = 0; },
       "--max_batch=0 is out of range: must be >= 1"},
      {[](ServerOptions& o) { o.queue.max_batch_bytes = 0; },
       "--max_batch_bytes=0 is out of range: must be >= 1"},
      {[](ServerOptions& o) { o.queue.max_queue_delay = absl::Microseconds(-1); },
       "--max_queue_delay_us=-1 is out of range: must be >= 0 (0 = never wait)"},
      // A fraction of the flag's unit shows as one, not as 0.
      {[](ServerOptions& o) { o.queue.max_queue_delay = absl::Nanoseconds(-500); },
       "--max_queue_delay_us=-0.5 is out of range: must be >= 0 (0 = never wait)"},
      {[](ServerOptions& o) { o.queue.inline_max_bytes = -1; },
       "--inline_max_bytes=-1 is out of range: must be >= 0 (0 = never inline)"},
      {[](ServerOptions& o) { o.device = static_cast<DeviceChoice>(7); },
       "--device=7 is out of range: must be one of auto, cpu, cuda"},
      {[](ServerOptions& o) { o.gpu.streams = 0; }, "--streams=0 is out of range: must be >= 1"},
      {[](ServerOptions& o) { o.gpu.min_bytes = -1; },
       "--gpu_min_bytes=-1 is out of range: must be >= 0"},
      {[](ServerOptions& o) { o.gpu.memory_limit_bytes = -1; },
       "--gpu_memory_limit=-1 is out of range: must be >= 0 (0 = no limit but the device's)"},
      {[](ServerOptions& o) { o.metrics.port = -2; },
       "--metrics_port=-2 is out of range: must be -1..65535 (-1 = no endpoint, 0 = any free "
       "port)"},
      {[](ServerOptions& o) { o.metrics.port = 70000; },
       "--metrics_port=70000 is out of range: must be -1..65535 (-1 = no endpoint, 0 = any free "
       "port)"},
      {[](ServerOptions& o) { o.shutdown.grace = absl::Seconds(-1); },
       "--shutdown_grace_s=-1 is out of range: must be >= 0 (0 cancels calls in flight at once)"},
      {[](ServerOptions& o) { o.security.tls_cert_file = "server.crt"; },
       "--tls_cert needs --tls_key: TLS needs the certificate's key"},
      {[](ServerOptions& o) { o.security.tls_key_file = "server.key"; },
       "--tls_key needs --tls_cert: TLS needs the key's certificate"},
      {[](ServerOptions& o) { o.security.tls_client_ca_file = "ca.crt"; },
       "--tls_client_ca needs --tls_cert and --tls_key: mutual TLS is TLS first"},
  };
  for (const BadServerOption& bad : cases) {
    ServerOptions options;
    bad.set(options);
    const absl::Status status = ValidateServerOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_EQ(status.message(), bad.message);
  }
}

TEST(ValidateServerOptionsTest, TheEndsOfEachRangeAreValid) {
  const std::vector<std::function<void(ServerOptions&)>> edges = {
      [](ServerOptions& o) { o.port = 0; },
      [](ServerOptions& o) { o.port = 65535; },
      [](ServerOptions& o) { o.unix_socket = "/run/" + std::string(102, 's'); },  // 107 bytes
      [](ServerOptions& o) { o.unix_socket = "tensorops.sock"; },  // relative to the working dir
      [](ServerOptions& o) { o.limits.max_message_bytes = 1; },
      [](ServerOptions& o) { o.limits.max_message_bytes = INT_MAX; },
      [](ServerOptions& o) { o.limits.max_rank = 0; },
      [](ServerOptions& o) { o.queue.max_concurrent_calls = 0; },
      [](ServerOptions& o) { o.queue.max_queued_calls = 0; },
      [](ServerOptions& o) { o.queue.inline_max_bytes = 0; },
      [](ServerOptions& o) { o.gpu.min_bytes = 0; },
      [](ServerOptions& o) { o.limits.max_memory_bytes = 0; },
      [](ServerOptions& o) { o.limits.max_memory_bytes = 1; },
      [](ServerOptions& o) { o.memory_trim.idle_after = absl::ZeroDuration(); },
      [](ServerOptions& o) { o.metrics.port = -1; },
      [](ServerOptions& o) { o.metrics.port = 65535; },
      [](ServerOptions& o) { o.shutdown.grace = absl::ZeroDuration(); },
      [](ServerOptions& o) {
        o.security.tls_cert_file = "server.crt";
        o.security.tls_key_file = "server.key";
        o.security.tls_client_ca_file = "ca.crt";
      },
  };
  for (size_t i = 0; i < edges.size(); ++i) {
    ServerOptions options;
    edges[i](options);
    EXPECT_TRUE(ValidateServerOptions(options).ok()) << "edge " << i;
  }
}

// The server's own defaults for the queue, not the Scheduler's.
TEST(ServerOptionsTest, QueueDefaultsAreTheServers) {
  const ServerOptions options;
  EXPECT_EQ(options.queue.max_concurrent_calls, 0);
  EXPECT_EQ(options.queue.max_queued_calls, 1024);
  EXPECT_EQ(options.queue.max_batch, 8);
  EXPECT_EQ(options.queue.max_batch_bytes, int64_t{64} << 20);
  EXPECT_EQ(options.queue.max_queue_delay, absl::ZeroDuration());
  EXPECT_EQ(options.queue.inline_max_bytes, int64_t{64} << 10);
  EXPECT_EQ(options.device, DeviceChoice::kAuto);

  const SchedulerOptions scheduler;
  EXPECT_EQ(scheduler.queue.max_concurrent_calls, 1);
  EXPECT_EQ(scheduler.queue.max_batch, 1);
  EXPECT_EQ(scheduler.queue.inline_max_bytes, 0);
}

TEST(ServerOptionsTest, MemoryDefaultsAreNoLimitAndATrimAfterOneIdleSecond) {
  const ServerOptions options;
  EXPECT_EQ(options.limits.max_memory_bytes, 0);
  EXPECT_EQ(options.memory_trim.idle_after, absl::Seconds(1));
}

// gRPC's receive limit is above --max_message_bytes, so that the handlers see a request over the
// flag and refuse it naming the flag: twice the flag, at least the flag plus 4 MiB, at most
// INT_MAX.
TEST(ServerOptionsTest, GrpcReceivesUpToTwiceTheMessageLimitAndAtLeast4MiBMore) {
  ServerOptions::Limits limits;
  EXPECT_EQ(GrpcMaxReceiveMessageBytes(limits), INT_MAX);  // the default, 1 GiB
  limits.max_message_bytes = 100000;
  EXPECT_EQ(GrpcMaxReceiveMessageBytes(limits), 100000 + (4 << 20));
  limits.max_message_bytes = int64_t{64} << 20;
  EXPECT_EQ(GrpcMaxReceiveMessageBytes(limits), int64_t{128} << 20);
  limits.max_message_bytes = INT_MAX;
  EXPECT_EQ(GrpcMaxReceiveMessageBytes(limits), INT_MAX);
}

// Under --max_memory_bytes gRPC's buffers get a quota of the limit plus the smaller of the limit
// and gRPC's receive limit; without the limit, no quota.
TEST(ServerOptionsTest, TheGrpcMemoryQuotaIsAtMostTwiceTheLimit) {
  ServerOptions::Limits limits;
  EXPECT_EQ(GrpcMemoryQuotaBytes(limits), 0);
  limits.max_memory_bytes = int64_t{256} << 20;
  EXPECT_EQ(GrpcMemoryQuotaBytes(limits), int64_t{512} << 20);
  limits.max_message_bytes = int64_t{64} << 20;  // gRPC receives up to 128 MiB
  EXPECT_EQ(GrpcMemoryQuotaBytes(limits), int64_t{384} << 20);
  limits.max_memory_bytes = INT64_MAX - 1;
  EXPECT_EQ(GrpcMemoryQuotaBytes(limits), INT64_MAX);
}

// Start refuses what ValidateServerOptions refuses, in the same words, before it starts anything.
TEST(ServerOptionsTest, StartGivesTheValidationError) {
  ServerOptions options;
  options.port = 0;
  options.queue.max_batch = 0;
  const absl::Status status = Server::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "--max_batch=0 is out of range: must be >= 1");
}

TEST(ValidateSchedulerOptionsTest, UsesTheSameWordingWithAtLeastOneWorker) {
  EXPECT_TRUE(ValidateSchedulerOptions(SchedulerOptions()).ok());

  EXPECT_EQ(ValidateSchedulerOptions({.queue = {.max_concurrent_calls = 0}}).message(),
            "--max_concurrent_calls=0 is out of range: must be >= 1");
  EXPECT_EQ(ValidateSchedulerOptions({.queue = {.max_batch = 0}}).message(),
            "--max_batch=0 is out of range: must be >= 1");
  EXPECT_EQ(ValidateSchedulerOptions({.threads = -1}).message(),
            "--threads=-1 is out of range: must be >= 0 (0 = every core)");
  EXPECT_EQ(ValidateSchedulerOptions({.gpu_min_bytes = -1}).message(),
            "--gpu_min_bytes=-1 is out of range: must be >= 0");

  const absl::Status created = Scheduler::Create({.queue = {.max_queued_calls = -1}}).status();
  EXPECT_EQ(created.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(created.message(), "--max_queued_calls=-1 is out of range: must be >= 0");
}

// --- --device ------------------------------------------------------------------------------------

TEST(DeviceChoiceFlagTest, ParsesEachChoiceAndUnparsesItBack) {
  const std::vector<std::pair<std::string, DeviceChoice>> choices = {
      {"auto", DeviceChoice::kAuto}, {"cpu", DeviceChoice::kCpu}, {"cuda", DeviceChoice::kCuda}};
  for (const auto& [text, expected] : choices) {
    DeviceChoice parsed = DeviceChoice::kAuto;
    std::string error;
    EXPECT_TRUE(absl::ParseFlag(text, &parsed, &error)) << text << ": " << error;
    EXPECT_EQ(parsed, expected) << text;
    EXPECT_EQ(absl::UnparseFlag(expected), text);
    EXPECT_EQ(DeviceChoiceName(expected), text);
  }
}

TEST(DeviceChoiceFlagTest, ATypoFailsListingTheChoices) {
  for (const std::string typo : {"gpu", "", "CUDA", "cpu "}) {
    DeviceChoice parsed = DeviceChoice::kCpu;
    std::string error;
    EXPECT_FALSE(absl::ParseFlag(typo, &parsed, &error)) << typo;
    EXPECT_EQ(error, "must be one of auto, cpu, cuda") << typo;
    EXPECT_EQ(parsed, DeviceChoice::kCpu) << "a failed parse left a value behind: " << typo;
  }
}

// Through a registered flag, as ParseCommandLine sets --device.
TEST(DeviceChoiceFlagTest, AFlagOfTheTypeTakesAChoiceAndRefusesATypo) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag("device_choice_for_test");
  ASSERT_NE(flag, nullptr);
  EXPECT_EQ(flag->DefaultValue(), "auto");
  std::string error;
  ASSERT_TRUE(flag->ParseFrom("cuda", &error)) << error;
  EXPECT_EQ(absl::GetFlag(FLAGS_device_choice_for_test), DeviceChoice::kCuda);
  EXPECT_FALSE(flag->ParseFrom("gpu", &error));
  EXPECT_THAT(error, HasSubstr("must be one of auto, cpu, cuda"));
  EXPECT_EQ(absl::GetFlag(FLAGS_device_choice_for_test), DeviceChoice::kCuda);
}

// --- The command line ----------------------------------------------------------------------------

const std::vector<FlagGroup> kTestGroups = {{"Network", {"cl_host", "cl_port"}},
                                            {"Other", {"cl_verbose", "cl_device"}}};

class CommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "command_line_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    directory_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  // WriteFile writes `text` to `name` in the test's folder and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(directory_) / name).string();
    std::ofstream(path) << text;
    return path;
  }

  absl::StatusOr<ParsedCommandLine> Parse(const std::vector<std::string>& args) {
    return ParseCommandLine(args, kTestGroups);
  }

  absl::FlagSaver saver_;  // Every test starts from the defaults and leaves them.
  std::string directory_;
};

TEST_F(CommandLineTest, SetsFlagsInEveryForm) {
  absl::StatusOr<ParsedCommandLine> parsed =
      Parse({"--cl_host=::1", "-cl_port", "7", "--cl_verbose", "--cl_device=cuda"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->help);
  EXPECT_FALSE(parsed->version);
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_host), "::1");
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_port), 7);
  EXPECT_TRUE(absl::GetFlag(FLAGS_cl_verbose));
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_device), DeviceChoice::kCuda);
  ASSERT_TRUE(Parse({"--nocl_verbose", "--cl_port=8"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cl_verbose));
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_port), 8);
}

TEST_F(CommandLineTest, HelpAndVersionStopTheParse) {
  for (const char* help : {"--help", "-h", "--helpfull", "-help"}) {
    absl::StatusOr<ParsedCommandLine> parsed = Parse({"--cl_port=9", help, "--no_such_flag"});
    ASSERT_TRUE(parsed.ok()) << help << ": " << parsed.status();
    EXPECT_TRUE(parsed->help) << help;
    EXPECT_FALSE(parsed->version) << help;
  }
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--version", "stray"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->version);
  EXPECT_FALSE(parsed->help);
}

TEST_F(CommandLineTest, EachMistakeIsInvalidArgumentNamingTheArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--no_such_flag=1"}, "unknown flag '--no_such_flag=1' (see --help)"},
      // Registered, but not one of the groups': not this program's flag.
      {{"--cl_unlisted=1"}, "unknown flag '--cl_unlisted=1' (see --help)"},
      {{"--nocl_port"}, "unknown flag '--nocl_port' (see --help)"},
      {{"--cl_port=9", "serve"},
       "unexpected argument 'serve': tensorops-server takes flags only (--name=value)"},
      {{"--", "--cl_port=9"},
       "unexpected argument '--': tensorops-server takes flags only (--name=value)"},
      {{"--cl_port"}, "flag --cl_port needs a value"},
      {{"--cl_port=abc"}, "--cl_port=abc does not parse: "},
      {{"--cl_device=gpu"},
       "--cl_device=gpu does not parse: Illegal value 'gpu' specified for flag 'cl_device'; must "
       "be one of auto, cpu, cuda"},
  };
  for (const auto& [args, message] : cases) {
    absl::StatusOr<ParsedCommandLine> parsed = Parse(args);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(parsed.status().message(), HasSubstr(message));
  }
}

TEST_F(CommandLineTest, FlagfilesAddTheirLinesInPlace) {
  const std::string inner = WriteFile("inner.flags", "--cl_device=cpu\n");
  const std::string outer =
      WriteFile("outer.flags", "# a comment line\n\n  --cl_port=1234  \n--cl_host=0.0.0.0\n" +
                                   ("--flagfile=" + inner) + "\n");
  // A later flag wins over the file's.
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--flagfile", outer, "--cl_host=10.0.0.1"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_port), 1234);
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_host), "10.0.0.1");
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_device), DeviceChoice::kCpu);

  const std::string second = WriteFile("second.flags", "--cl_port=99\n");
  ASSERT_TRUE(Parse({"--flagfile=" + inner + "," + second}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_port), 99);
}

TEST_F(CommandLineTest, FlagfileErrorsNameTheFile) {
  const std::string missing = (std::filesystem::path(directory_) / "missing.flags").string();
  absl::StatusOr<ParsedCommandLine> parsed = Parse({"--flagfile=" + missing});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("--flagfile=" + missing + " cannot be read"));

  const std::string typo = WriteFile("typo.flags", "--cl_prot=1\n");
  parsed = Parse({"--flagfile=" + typo});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "unknown flag '--cl_prot=1' (see --help) (in --flagfile=" + typo + ")");

  const std::string loop = (std::filesystem::path(directory_) / "loop.flags").string();
  WriteFile("loop.flags", "--flagfile=" + loop + "\n");
  parsed = Parse({"--flagfile=" + loop});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("--flagfile=" + loop + " includes itself"));
}

TEST(FlagsHelpTest, ListsTheGroupsFlagsWithDefaultsWrappedToAHundredColumns) {
  const std::string help = FlagsHelp(kTestGroups);
  const size_t network = help.find("\nNetwork:\n");
  const size_t other = help.find("\nOther:\n");
  ASSERT_NE(network, std::string::npos) << help;
  ASSERT_NE(other, std::string::npos) << help;
  EXPECT_LT(network, help.find("  --cl_host=127.0.0.1\n"));
  EXPECT_LT(help.find("  --cl_port=50051\n      Port.\n"), other);
  EXPECT_GT(help.find("  --cl_verbose=false\n      Log more.\n"), other);
  EXPECT_GT(help.find("  --cl_device=auto\n      Where.\n"), other);
  EXPECT_THAT(help, Not(HasSubstr("cl_unlisted")));
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  // The long help text (longer than a line, so wrapped by the check above) is all there.
  EXPECT_THAT(absl::StrReplaceAll(help, {{"\n      ", " "}}),
              HasSubstr(absl::StrCat(" ", absl::FindCommandLineFlag("cl_host")->Help(), "\n")));
}

// Byte-count flags take Kubernetes' quantity suffixes; anything else is refused with the form.
TEST(ByteCountTest, ParsesIntegersAndQuantitySuffixes) {
  const std::pair<std::string, int64_t> accepted[] = {{"0", 0},
                                                      {"1048576", 1048576},
                                                      {"2K", 2000},
                                                      {"2Ki", 2048},
                                                      {"512Mi", int64_t{512} << 20},
                                                      {"2G", int64_t{2000000000}},
                                                      {"8Gi", int64_t{8} << 30},
                                                      {"3T", int64_t{3000000000000}},
                                                      {"1Ti", int64_t{1} << 40},
                                                      {"-1", -1},
                                                      {" 64Mi ", int64_t{64} << 20}};
  for (const auto& [text, bytes] : accepted) {
    ByteCount count;
    std::string error;
    EXPECT_TRUE(AbslParseFlag(text, &count, &error)) << text << ": " << error;
    EXPECT_EQ(count.bytes, bytes) << text;
  }
  for (const std::string text :
       {"", "Gi", "2GB", "2g", "1.5G", "2 G i", "x", "9223372036854775807K"}) {
    ByteCount count;
    std::string error;
    EXPECT_FALSE(AbslParseFlag(text, &count, &error)) << text;
    EXPECT_THAT(error, ::testing::AnyOf(HasSubstr("e.g. 2G or 512Mi"), HasSubstr("2^63 - 1")))
        << text;
  }
  EXPECT_EQ(AbslUnparseFlag(ByteCount{int64_t{1} << 30}), "1073741824");
}

// --- --unix_socket: Start and Shutdown ------------------------------------------------------

// SocketDirectory makes a fresh directory for sockets (TempDir is short enough for their paths).
std::string SocketDirectory() {
  std::string pattern = (std::filesystem::path(::testing::TempDir()) / "sock_XXXXXX").string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
  return pattern;
}

ServerOptions UnixSocketOptions(const std::string& path) {
  ServerOptions options;
  options.port = 0;
  options.threads = 1;
  options.device = DeviceChoice::kCpu;
  options.memory_trim.idle_after = absl::ZeroDuration();
  options.shutdown.grace = absl::Seconds(1);
  options.unix_socket = path;
  return options;
}

// ServerInfoAt calls ServerInfo through a channel of its own to `target`.
grpc::Status ServerInfoAt(const std::string& target) {
  std::unique_ptr<v1::TensorOps::Stub> stub =
      v1::TensorOps::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::ServerInfoResponse response;
  return stub->ServerInfo(&context, v1::ServerInfoRequest(), &response);
}

// BoundSocket binds a socket of its own to `path` (listening on it when `listen_too`) and returns
// it; closing a socket that is not listened on leaves the file behind, as a killed server does.
int BoundSocket(const std::string& path, bool listen_too) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
      << path << ": " << std::strerror(errno);
  if (listen_too) EXPECT_EQ(listen(fd, 4), 0) << std::strerror(errno);
  return fd;
}

bool IsSocket(const std::string& path) {
  struct stat status;
  return lstat(path.c_str(), &status) == 0 && S_ISSOCK(status.st_mode);
}

TEST(UnixSocketTest, ServesOnTheSocketBesideTcpAndRemovesItAtShutdown) {
  const std::string directory = SocketDirectory();
  const std::string path = directory + "/tensorops.sock";
  // The socket file's mode follows the umask (bind's 0777 less it).
  const mode_t umask_before = umask(027);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(UnixSocketOptions(path));
  umask(umask_before);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(IsSocket(path));
  struct stat status;
  ASSERT_EQ(lstat(path.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0750);

  EXPECT_TRUE(ServerInfoAt("unix:" + path).ok());
  EXPECT_TRUE(ServerInfoAt("unix://" + path).ok());
  EXPECT_TRUE(ServerInfoAt(absl::StrCat("127.0.0.1:", (*server)->port())).ok());

  (*server)->Shutdown();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path)));
  server->reset();
  std::filesystem::remove_all(directory);
}

TEST(UnixSocketTest, AStaleSocketFileIsReplaced) {
  const std::string directory = SocketDirectory();
  const std::string path = directory + "/stale.sock";
  close(BoundSocket(path, /*listen_too=*/false));
  ASSERT_TRUE(IsSocket(path));

  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(UnixSocketOptions(path));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(ServerInfoAt("unix:" + path).ok());
  server->reset();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path)));
  std::filesystem::remove_all(directory);
}

TEST(UnixSocketTest, ASocketAProcessListensOnIsInUseAndLeftAlone) {
  const std::string directory = SocketDirectory();
  const std::string path = directory + "/busy.sock";
  const std::string in_use = absl::StrCat(
      "cannot listen on unix:", path,
      ": the socket is in use: another server listens there (stop it, or choose another "
      "--unix_socket)");

  // Any listener: gRPC alone would remove its file and take the path.
  const int listener = BoundSocket(path, /*listen_too=*/true);
  absl::Status status = Server::Start(UnixSocketOptions(path)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(status.message(), in_use);
  EXPECT_TRUE(IsSocket(path));
  close(listener);
  ASSERT_EQ(unlink(path.c_str()), 0);

  // Another tensorops server: it keeps its socket and keeps serving.
  absl::StatusOr<std::unique_ptr<Server>> first = Server::Start(UnixSocketOptions(path));
  ASSERT_TRUE(first.ok()) << first.status();
  status = Server::Start(UnixSocketOptions(path)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(status.message(), in_use);
  EXPECT_TRUE(ServerInfoAt("unix:" + path).ok());
  first->reset();
  std::filesystem::remove_all(directory);
}

TEST(UnixSocketTest, AFileThatIsNotASocketIsAnErrorAndLeftAlone) {
  const std::string directory = SocketDirectory();
  const std::string file = directory + "/notes.txt";
  std::ofstream(file) << "keep me";
  absl::Status status = Server::Start(UnixSocketOptions(file)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(status.message(),
            absl::StrCat("cannot listen on unix:", file, ": ", file,
                         " exists and is a regular file, not a socket (remove it, or choose "
                         "another --unix_socket)"));
  std::ifstream in(file);
  std::string contents;
  std::getline(in, contents);
  EXPECT_EQ(contents, "keep me");

  status = Server::Start(UnixSocketOptions(directory)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" exists and is a directory, not a socket"));

  const std::string missing = directory + "/no/such/dir/t.sock";
  status = Server::Start(UnixSocketOptions(missing)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(status.message(), absl::StrCat("cannot listen on unix:", missing, ": its directory ",
                                           directory, "/no/such/dir does not exist"));
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace tensorops
