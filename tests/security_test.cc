// Tests of TLS, mutual TLS and bearer-token auth: a real Server in-process on a free loopback port,
// called through tensorops::Client (and once through tensorops-cli), with the server options,
// the client options and TokenAuthenticator also checked on their own.
//
// The certificates are made once per suite by the `openssl` command (scripts/install-deps installs
// it) in a temporary directory: a CA, a server certificate for DNS:localhost and IP:127.0.0.1
// signed by it, a client certificate signed by it, and a second, unrelated CA. EC P-256 keys keep
// that quick. The command rather than OpenSSL's C API, because the tests then need no OpenSSL
// headers or link flags, and the commands are the ones docs/service.md gives for trying TLS by
// hand.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/npy.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/rpc/auth.h"
#include "server/server.h"
#include "tests/generic_stream.h"

extern char** environ;

namespace tensorops {
namespace {

using ::tensorops::testing::ToByteBuffer;
using ::tensorops::testing::ToString;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kCallTimeout = absl::Seconds(30);
constexpr absl::Duration kProcessTimeout = absl::Seconds(60);
constexpr char kToken[] = "s3cret-token_0123456789";

// --- Processes and files ------------------------------------------------------------------------

// ProcessResult is how a child process ended and what it wrote (stdout and stderr together).
struct ProcessResult {
  int wait_status = -1;
  std::string output;
};

bool ExitedWith(const ProcessResult& result, int code) {
  return WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) == code;
}

std::string DescribeExit(const ProcessResult& result) {
  if (WIFEXITED(result.wait_status))
    return absl::StrCat("exit code ", WEXITSTATUS(result.wait_status));
  if (WIFSIGNALED(result.wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(result.wait_status));
  }
  return absl::StrCat("wait status ", result.wait_status);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// RunProcess runs `argv` (argv[0] looked up in PATH) with stdin from /dev/null and stdout and
// stderr into `log_path`, waits up to kProcessTimeout (then kills it), and returns how it ended.
// The output goes to a file, not a pipe, so that a chatty child cannot block on a full pipe.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) return absl::ErrnoToStatus(spawn_error, absl::StrCat("spawn ", argv[0]));

  ProcessResult result;
  const absl::Time deadline = absl::Now() + kProcessTimeout;
  while (waitpid(pid, &result.wait_status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &result.wait_status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  result.output = ReadText(log_path);
  return result;
}

// Certificates are the PEM files of one test PKI, all in `directory`.
struct Certificates {
  std::string directory;
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  // A CA that signed nothing here: trusting only it must not let a client reach the server.
  std::string other_ca_cert, other_ca_key;

  std::string Path(const std::string& name) const {
    return (std::filesystem::path(directory) / name).string();
  }
};

// The openssl configuration for the certificates: extensions written out in full, so that the
// result does not depend on the system's openssl.cnf.
constexpr char kOpensslConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)";

// MakeCertificates generates the test PKI in a new temporary directory.
absl::StatusOr<Certificates> MakeCertificates() {
  std::string pattern =
      (std::filesystem::path(::testing::TempDir()) / "security_test_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp");
  Certificates certs;
  certs.directory = pattern;
  const std::string config = certs.Path("openssl.cnf");
  {
    std::ofstream out(config);
    out << kOpensslConfig;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", config));
  }
  const std::string log = certs.Path("openssl.log");
  auto openssl = [&](std::vector<std::string> args) -> absl::Status {
    args.insert(args.begin(), "openssl");
    absl::StatusOr<ProcessResult> result = RunProcess(args, log);
    if (!result.ok()) return result.status();
    if (!ExitedWith(*result, 0)) {
      return absl::InternalError(absl::StrFormat("%s: %s\n%s", absl::StrJoin(args, " "),
                                                 DescribeExit(*result), result->output));
    }
    return absl::OkStatus();
  };
  const std::vector<std::string> new_ec_key = {"-newkey", "ec", "-pkeyopt",
                                               "ec_paramgen_curve:P-256", "-nodes"};
  auto self_signed_ca = [&](const std::string& name, std::string* cert,
                            std::string* key) -> absl::Status {
    *cert = certs.Path(name + ".crt");
    *key = certs.Path(name + ".key");
    std::vector<std::string> args = {"req", "-x509", "-new"};
    args.insert(args.end(), new_ec_key.begin(), new_ec_key.end());
    args.insert(args.end(),
                {"-keyout", *key, "-out", *cert, "-days", "2", "-subj",
                 "/CN=tensorops test " + name, "-config", config, "-extensions", "ca_ext"});
    return openssl(args);
  };
  auto signed_by_ca = [&](const std::string& name, const std::string& common_name,
                          const std::string& extensions, const std::string& serial,
                          std::string* cert, std::string* key) -> absl::Status {
    *cert = certs.Path(name + ".crt");
    *key = certs.Path(name + ".key");
    const std::string request = certs.Path(name + ".csr");
    std::vector<std::string> args = {"req", "-new"};
    args.insert(args.end(), new_ec_key.begin(), new_ec_key.end());
    args.insert(args.end(), {"-keyout", *key, "-out", request, "-subj", "/CN=" + common_name,
                             "-config", config});
    if (absl::Status status = openssl(args); !status.ok()) return status;
    return openssl({"x509", "-req", "-in", request, "-CA", certs.ca_cert, "-CAkey", certs.ca_key,
                    "-set_serial", serial, "-days", "2", "-out", *cert, "-extfile", config,
                    "-extensions", extensions});
  };
  if (absl::Status status = self_signed_ca("ca", &certs.ca_cert, &certs.ca_key); !status.ok()) {
    return status;
  }
  if (absl::Status status = self_signed_ca("other_ca", &certs.other_ca_cert, &certs.other_ca_key);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = signed_by_ca("server", "localhost", "server_ext", "2",
                                         &certs.server_cert, &certs.server_key);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = signed_by_ca("client", "tensorops test client", "client_ext", "3",
                                         &certs.client_cert, &certs.client_key);
      !status.ok()) {
    return status;
  }
  return certs;
}

// --- Calls --------------------------------------------------------------------------------------

// GatherOnce asks `client` for gather([10, 20, 30], 0, [2, 0]) and returns the values, which must
// be [30, 10], or the call's status.
absl::StatusOr<std::vector<int64_t>> GatherOnce(Client& client) {
  const std::vector<int64_t> input = {10, 20, 30};
  const std::vector<int64_t> index = {2, 0};
  const Shape input_shape = {3};
  const Shape index_shape = {2};
  absl::StatusOr<Tensor> result = client.Gather(
      TensorView(DataType::kInt64, input_shape, input.data()), /*axis=*/0,
      TensorView(DataType::kInt64, index_shape, index.data()), {.timeout = kCallTimeout});
  if (!result.ok()) return result.status();
  const int64_t* values = result->data_as<int64_t>();
  return std::vector<int64_t>(values, values + result->numel());
}

// HealthReply is the outcome of one health Check: the call's status and, when OK, the reply's
// bytes (a HealthCheckResponse; "\x08\x01" is status = SERVING).
struct HealthReply {
  grpc::Status status;
  std::string response;
};

// CheckHealth calls /grpc.health.v1.Health/Check for the whole server (an empty
// HealthCheckRequest, so zero bytes) on `channel`, with no metadata beyond gRPC's own.
HealthReply CheckHealth(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  const grpc::ByteBuffer request = ToByteBuffer("");
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  HealthReply reply{done.get_future().get()};
  if (reply.status.ok()) reply.response = ToString(response);
  return reply;
}

constexpr char kServingResponse[] = "\x08\x01";

// --- Fixture ------------------------------------------------------------------------------------

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<Certificates> certs = MakeCertificates();
    if (!certs.ok()) {
      setup_status_ = certs.status();
      return;
    }
    certs_ = new Certificates(std::move(*certs));
  }

  static void TearDownTestSuite() {
    if (certs_ != nullptr) std::filesystem::remove_all(certs_->directory);
    delete certs_;
    certs_ = nullptr;
  }

  void SetUp() override { ASSERT_TRUE(setup_status_.ok()) << setup_status_; }

  const Certificates& certs() const { return *certs_; }

  // TokenFile writes `contents` to a new file in the suite's directory and returns its path.
  std::string TokenFile(const std::string& contents) {
    const std::string path = certs().Path(absl::StrCat("token_", token_files_++));
    WriteText(path, contents);
    return path;
  }

  // Start starts a server on a free loopback port with `security`.
  absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions::Security& security) {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.shutdown.grace = absl::ZeroDuration();
    options.security = security;
    return Server::Start(options);
  }

  ServerOptions::Security Tls() const {
    return {.tls_cert_file = certs().server_cert, .tls_key_file = certs().server_key};
  }

  ClientOptions::Tls TrustingTheCa() const { return {.root_ca_file = certs().ca_cert}; }

  // Connect returns a client of the server on `port` at 127.0.0.1 (the server certificate's IP
  // name).
  std::unique_ptr<Client> Connect(int port, ClientOptions options) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(absl::StrFormat("127.0.0.1:%d", port), std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

 private:
  static inline absl::Status setup_status_;
  static inline Certificates* certs_ = nullptr;
  int token_files_ = 0;
};

// --- TLS ----------------------------------------------------------------------------------------

TEST_F(SecurityTest, TlsClientTrustingTheCaSucceeds) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start(Tls());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = Connect((*server)->port(), {.tls = TrustingTheCa()});
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<int64_t>> values = GatherOnce(*client);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(30, 10));
}

// The certificate names localhost too; the override makes the client check that name although
// the target is an IP address, and a name the certificate lacks fails the handshake.
TEST_F(SecurityTest, ServerNameOverrideIsTheNameChecked) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start(Tls());
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions::Tls tls = TrustingTheCa();
  tls.server_name_override = "localhost";
  std::unique_ptr<Client> client = Connect((*server)->port(), {.tls = tls});
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<int64_t>> values = GatherOnce(*client);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(30, 10));

  tls.server_name_override = "not-this-server.example";
  std::unique_ptr<Client> misnamed = Connect((*server)->port(), {.tls = tls});
  ASSERT_NE(misnamed, nullptr);
  EXPECT_EQ(GatherOnce(*misnamed).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, PlaintextClientOfTlsServerIsUnavailable) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start(Tls());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = Connect((*server)->port(), {});
  ASSERT_NE(client, nullptr);
  const absl::Status status = GatherOnce(*client).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  // The error names the target and the likely cause, gRPC's words at the end.
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrFormat("no tensorops server answers at 127.0.0.1:%d (is it "
                                        "running?); the connection was closed as it opened, as a "
                                        "TLS server closes a plaintext client's",
                                        (*server)->port())));
}

TEST_F(SecurityTest, ClientTrustingAnotherCaIsUnavailable) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start(Tls());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = Connect(
      (*server)->port(), {.tls = ClientOptions::Tls{.root_ca_file = certs().other_ca_cert}});
  ASSERT_NE(client, nullptr);
  const absl::Status status = GatherOnce(*client).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("its TLS certificate is not trusted"));
}

TEST_F(SecurityTest, TlsClientOfPlaintextServerIsUnavailable) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = Connect((*server)->port(), {.tls = TrustingTheCa()});
  ASSERT_NE(client, nullptr);
  const absl::Status status = GatherOnce(*client).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("may not use TLS"));
}

TEST_F(SecurityTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  ServerOptions::Security security = Tls();
  security.tls_client_ca_file = certs().ca_cert;
  absl::StatusOr<std::unique_ptr<Server>> server = Start(security);
  ASSERT_TRUE(server.ok()) << server.status();

  std::unique_ptr<Client> anonymous = Connect((*server)->port(), {.tls = TrustingTheCa()});
  ASSERT_NE(anonymous, nullptr);
  absl::StatusOr<std::vector<int64_t>> refused = GatherOnce(*anonymous);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("as a server that requires client certificates (--tls_client_ca)"));

  // A certificate the server's client CA did not sign: the other CA's own, self-signed one.
  ClientOptions::Tls stranger = TrustingTheCa();
  stranger.cert_file = certs().other_ca_cert;
  stranger.key_file = certs().other_ca_key;
  std::unique_ptr<Client> unknown = Connect((*server)->port(), {.tls = stranger});
  ASSERT_NE(unknown, nullptr);
  absl::StatusOr<std::vector<int64_t>> rejected = GatherOnce(*unknown);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kUnavailable) << rejected.status();
  EXPECT_THAT(std::string(rejected.status().message()),
              HasSubstr("the server may not accept this client certificate"));

  ClientOptions::Tls with_certificate = TrustingTheCa();
  with_certificate.cert_file = certs().client_cert;
  with_certificate.key_file = certs().client_key;
  std::unique_ptr<Client> client = Connect((*server)->port(), {.tls = with_certificate});
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<int64_t>> values = GatherOnce(*client);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(30, 10));
}

// --- Bearer token -------------------------------------------------------------------------------

TEST_F(SecurityTest, TokenIsRequiredAndChecked) {
  absl::StatusOr<std::unique_ptr<Server>> server =
      Start({.auth_token_file = TokenFile(absl::StrCat(kToken, "\n"))});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  std::unique_ptr<Client> anonymous = Connect(port, {});
  ASSERT_NE(anonymous, nullptr);
  const absl::Status missing = GatherOnce(*anonymous).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("missing authorization metadata"));

  std::unique_ptr<Client> wrong = Connect(port, {.auth_token = "not-the-token"});
  ASSERT_NE(wrong, nullptr);
  const absl::Status wrong_status = GatherOnce(*wrong).status();
  EXPECT_EQ(wrong_status.code(), absl::StatusCode::kUnauthenticated) << wrong_status;
  EXPECT_THAT(wrong_status.message(),
              AllOf(HasSubstr("wrong bearer token"), Not(HasSubstr("not-the-token")),
                    Not(HasSubstr(kToken))));

  // The right token with one character more, and its prefix: length alone must not pass.
  for (const std::string near_miss :
       {absl::StrCat(kToken, "x"), std::string(kToken).substr(0, 5)}) {
    std::unique_ptr<Client> client = Connect(port, {.auth_token = near_miss});
    ASSERT_NE(client, nullptr);
    EXPECT_EQ(GatherOnce(*client).status().code(), absl::StatusCode::kUnauthenticated) << near_miss;
  }

  std::unique_ptr<Client> client = Connect(port, {.auth_token = kToken});
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<int64_t>> values = GatherOnce(*client);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(30, 10));
}

TEST_F(SecurityTest, TokenGuardsRunRunStreamAndServerInfo) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start({.auth_token_file = TokenFile(kToken)});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  v1::OpRequest request;
  v1::GatherRequest* gather = request.mutable_gather();
  for (v1::Tensor* tensor : {gather->mutable_input(), gather->mutable_index()}) {
    tensor->set_dtype(v1::DATA_TYPE_INT64);
    tensor->add_shape(1);
    tensor->set_data(std::string(sizeof(int64_t), '\0'));
  }

  std::unique_ptr<Client> anonymous = Connect(port, {});
  ASSERT_NE(anonymous, nullptr);
  EXPECT_EQ(anonymous->Run(request, {.timeout = kCallTimeout}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->ServerInfo({.timeout = kCallTimeout}).status().code(),
            absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::unique_ptr<OpStream>> stream =
      anonymous->OpenStream({.timeout = kCallTimeout});
  ASSERT_TRUE(stream.ok()) << stream.status();
  (*stream)->Send(1, request);  // May already fail: the server ends the stream at once.
  EXPECT_FALSE((*stream)->Receive().has_value());
  EXPECT_EQ((*stream)->Finish().code(), absl::StatusCode::kUnauthenticated);

  std::unique_ptr<Client> client = Connect(port, {.auth_token = kToken});
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Run(request, {.timeout = kCallTimeout}).ok());
  absl::StatusOr<v1::ServerInfoResponse> info = client->ServerInfo({.timeout = kCallTimeout});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->auth_token_required());
  EXPECT_FALSE(info->tls());
  stream = client->OpenStream({.timeout = kCallTimeout});
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->Send(1, request));
  ASSERT_TRUE((*stream)->CloseSend());
  std::optional<StreamResult> answer = (*stream)->Receive();
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->result.ok()) << answer->result.status();
  EXPECT_TRUE((*stream)->Finish().ok());
}

// KServe's protocol on the same port keeps the same token: every RPC, health and metadata too
// (as ServerInfo does; Kubernetes probes use grpc.health.v1, which needs none).
TEST_F(SecurityTest, TokenGuardsTheKServeProtocol) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start({.auth_token_file = TokenFile(kToken)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", (*server)->port()), grpc::InsecureChannelCredentials()));
  inference::ModelInferRequest request;
  request.set_model_name("gather");
  for (const char* name : {"input", "index"}) {
    inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(1);
    request.add_raw_input_contents(std::string(sizeof(int64_t), '\0'));
  }
  for (const bool with_token : {false, true}) {
    SCOPED_TRACE(with_token ? "with the token" : "without a token");
    const auto set_token = [&](grpc::ClientContext* context) {
      if (with_token) context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    };
    grpc::ClientContext infer_context;
    set_token(&infer_context);
    inference::ModelInferResponse response;
    const grpc::Status infer = stub->ModelInfer(&infer_context, request, &response);
    grpc::ClientContext live_context;
    set_token(&live_context);
    inference::ServerLiveResponse live;
    const grpc::Status live_status = stub->ServerLive(&live_context, {}, &live);
    grpc::ClientContext stream_context;
    set_token(&stream_context);
    auto stream = stub->ModelStreamInfer(&stream_context);
    stream->Write(request);  // May fail at once without the token: the server ends the stream.
    stream->WritesDone();
    inference::ModelStreamInferResponse answer;
    while (stream->Read(&answer)) {
    }
    const grpc::Status stream_status = stream->Finish();
    if (with_token) {
      EXPECT_TRUE(infer.ok()) << infer.error_message();
      EXPECT_TRUE(live_status.ok()) << live_status.error_message();
      EXPECT_TRUE(stream_status.ok()) << stream_status.error_message();
      EXPECT_EQ(answer.error_message(), "");
    } else {
      EXPECT_EQ(infer.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_EQ(live_status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
  }
}

TEST_F(SecurityTest, HealthNeedsNoToken) {
  absl::StatusOr<std::unique_ptr<Server>> server = Start({.auth_token_file = TokenFile(kToken)});
  ASSERT_TRUE(server.ok()) << server.status();
  const HealthReply reply = CheckHealth(grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", (*server)->port()), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(reply.response, kServingResponse);
}

TEST_F(SecurityTest, TokenOverMutualTls) {
  ServerOptions::Security security = Tls();
  security.tls_client_ca_file = certs().ca_cert;
  security.auth_token_file = TokenFile(kToken);
  absl::StatusOr<std::unique_ptr<Server>> server = Start(security);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions::Tls tls = TrustingTheCa();
  tls.cert_file = certs().client_cert;
  tls.key_file = certs().client_key;

  std::unique_ptr<Client> tokenless = Connect((*server)->port(), {.tls = tls});
  ASSERT_NE(tokenless, nullptr);
  EXPECT_EQ(GatherOnce(*tokenless).status().code(), absl::StatusCode::kUnauthenticated);

  std::unique_ptr<Client> client = Connect((*server)->port(), {.tls = tls, .auth_token = kToken});
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<int64_t>> values = GatherOnce(*client);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(30, 10));

  // Health over the same TLS, still without a token.
  grpc::SslCredentialsOptions ssl_options;
  ssl_options.pem_root_certs = ReadText(certs().ca_cert);
  ssl_options.pem_cert_chain = ReadText(certs().client_cert);
  ssl_options.pem_private_key = ReadText(certs().client_key);
  const HealthReply reply = CheckHealth(grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", (*server)->port()), grpc::SslCredentials(ssl_options)));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(reply.response, kServingResponse);
}

// --- TokenAuthenticator on its own --------------------------------------------------------------

TEST_F(SecurityTest, AuthenticatorChecksTheBearerValue) {
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> authenticator =
      TokenAuthenticator::FromFile(TokenFile(absl::StrCat("  \t", kToken, "\r\n\n")));
  ASSERT_TRUE(authenticator.ok()) << authenticator.status();
  auto check = [&](const std::string& key, const std::string& value) {
    const std::multimap<grpc::string_ref, grpc::string_ref> metadata = {{key, value}};
    return (*authenticator)->Check(metadata);
  };
  EXPECT_TRUE(check("authorization", absl::StrCat("Bearer ", kToken)).ok());
  // RFC 6750: the scheme is case-insensitive.
  EXPECT_TRUE(check("authorization", absl::StrCat("bearer ", kToken)).ok());

  const absl::Status basic = check("authorization", absl::StrCat("Basic ", kToken));
  EXPECT_EQ(basic.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(basic.message(), AllOf(HasSubstr("not a bearer token"), Not(HasSubstr(kToken))));
  EXPECT_EQ(check("authorization", kToken).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(check("authorization", "Bearer ").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(check("authorization", absl::StrCat("Bearer  ", kToken)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(check("x-token", absl::StrCat("Bearer ", kToken)).message(),
              HasSubstr("missing authorization metadata"));
}

// Each token's namespace: an unnamed token's is "token:" and the first 8 bytes of its SHA-256
// (the hex below is `printf first-token | sha256sum`'s); a named tenant's is its name, shared by
// every line that names it, whichever of its two words comes first. Comments run from a word
// that starts with '#' to the end of the line.
TEST_F(SecurityTest, AuthenticatorTellsTheTenantsOfAFileApart) {
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> authenticator =
      TokenAuthenticator::FromFile(TokenFile(
          "# tenants\n  first-token \r\n\nsecond-token #rotated in 2025\n"
          "alice:  alice-old\n\talice: alice-new   # the new one\nbob-token bob.2:\n# end\n"));
  ASSERT_TRUE(authenticator.ok()) << authenticator.status();
  EXPECT_EQ((*authenticator)->token_count(), 5);
  auto identify = [&](const std::string& token) -> absl::StatusOr<std::string> {
    const std::string value = absl::StrCat("Bearer ", token);
    const std::multimap<grpc::string_ref, grpc::string_ref> metadata = {{"authorization", value}};
    absl::StatusOr<std::string_view> ns = (*authenticator)->Identify(metadata);
    if (!ns.ok()) return ns.status();
    return std::string(*ns);
  };
  EXPECT_EQ(identify("first-token").value_or(""), "token:55b4b48f529c3d2d");
  EXPECT_EQ(identify("second-token").value_or(""), "token:7a35833597e6687c");
  EXPECT_EQ(identify("alice-old").value_or(""), "alice");
  EXPECT_EQ(identify("alice-new").value_or(""), "alice");
  EXPECT_EQ(identify("bob-token").value_or(""), "bob.2");
  for (const char* wrong : {"# tenants", "first", "alice", "alice:", "alice: alice-old", "#rotated",
                            "second-token"
                            " #rotated"}) {
    EXPECT_EQ(identify(wrong).status().code(), absl::StatusCode::kUnauthenticated) << wrong;
  }
  EXPECT_THAT((*authenticator)->Namespaces(),
              ElementsAre("token:55b4b48f529c3d2d", "token:7a35833597e6687c", "alice", "bob.2"));
  // What earlier servers called each token: its position among the file's tokens. Alice's
  // second line is left out: earlier servers had two tenants there, which must not merge.
  EXPECT_THAT((*authenticator)->LegacyNamespaces(),
              UnorderedElementsAre(Pair("token-1", "token:55b4b48f529c3d2d"),
                                   Pair("token-2", "token:7a35833597e6687c"),
                                   Pair("token-3", "alice"), Pair("token-5", "bob.2")));
}

// A namespace follows its token, not its line: reordering, adding and removing other lines leaves
// every remaining token's namespace as it was.
TEST_F(SecurityTest, ATokensNamespaceDoesNotDependOnItsLine) {
  auto namespace_in = [&](const std::string& contents, const std::string& token) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> authenticator =
        TokenAuthenticator::FromFile(TokenFile(contents));
    EXPECT_TRUE(authenticator.ok()) << authenticator.status();
    if (!authenticator.ok()) return std::string();
    const std::string value = absl::StrCat("Bearer ", token);
    const std::multimap<grpc::string_ref, grpc::string_ref> metadata = {{"authorization", value}};
    return std::string((*authenticator)->Identify(metadata).value_or(""));
  };
  const std::string before = "one\ntwo\nteam: three\n";
  for (const std::string after :
       {"two\none\nteam: three\n", "three team:\ntwo\n", "new\ntwo\nteam: three\n"}) {
    EXPECT_EQ(namespace_in(before, "two"), namespace_in(after, "two")) << after;
    EXPECT_EQ(namespace_in(after, "three"), "team") << after;
  }
  EXPECT_NE(namespace_in(before, "one"), namespace_in(before, "two"));
}

TEST_F(SecurityTest, AuthenticatorRejectsBadTokenFiles) {
  for (const std::string contents : {"", " \n\t\n"}) {
    const std::string path = TokenFile(contents);
    const absl::Status empty = TokenAuthenticator::FromFile(path).status();
    EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
    EXPECT_THAT(empty.message(), AllOf(HasSubstr(path), HasSubstr("no token")));
  }
  const std::string comments = TokenFile("# no token here\n\n");
  EXPECT_THAT(TokenAuthenticator::FromFile(comments).status().message(), HasSubstr("no token"));
  const std::string twice = TokenFile(absl::StrCat(kToken, "\nother\n", kToken, "\n"));
  const absl::Status twice_status = TokenAuthenticator::FromFile(twice).status();
  EXPECT_EQ(twice_status.code(), absl::StatusCode::kInvalidArgument) << twice_status;
  EXPECT_THAT(
      twice_status.message(),
      AllOf(HasSubstr("line 3"), HasSubstr("repeats an earlier token"), Not(HasSubstr(kToken))));
  // Lines of neither form: too many words, two words without a tenant (two tokens, or a comment
  // without its '#'), two tenants, a tenant without a token.
  for (const std::string line :
       {"tenant: secretA secretB", "secretA secretB", "one: two:", "alone:", "alone: #token"}) {
    const std::string spaced = TokenFile(absl::StrCat("# comment\n", line, "\n"));
    const absl::Status spaced_status = TokenAuthenticator::FromFile(spaced).status();
    EXPECT_EQ(spaced_status.code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_THAT(
        spaced_status.message(),
        AllOf(HasSubstr(spaced), HasSubstr("line 2"), HasSubstr("is not TOKEN or TENANT: TOKEN"),
              Not(HasSubstr("secret")), Not(HasSubstr("one:")), Not(HasSubstr("alone"))))
        << line;
  }
  // Tenant names: the rule is in the message, the name (perhaps a token pasted in by mistake) not.
  for (const std::string& tenant :
       std::vector<std::string>{"-dash", ".dot", "token-1", "token-alice", "with/slash",
                                "colon:", std::string(65, 'a')}) {
    const std::string bad_name = TokenFile(absl::StrCat("# comment\n", tenant, ": ", kToken, "\n"));
    const absl::Status bad_name_status = TokenAuthenticator::FromFile(bad_name).status();
    EXPECT_EQ(bad_name_status.code(), absl::StatusCode::kInvalidArgument) << tenant;
    EXPECT_THAT(bad_name_status.message(), AllOf(HasSubstr("line 2"), HasSubstr("tenant name"),
                                                 HasSubstr(TokenAuthenticator::kTenantNameRule),
                                                 Not(HasSubstr(tenant)), Not(HasSubstr(kToken))))
        << tenant;
  }
  for (const std::string& tenant :
       std::vector<std::string>{"a", "Team_7", "x.y-z", std::string(64, 'a'), "tokens"}) {
    EXPECT_TRUE(TokenAuthenticator::FromFile(TokenFile(absl::StrCat(tenant, ": ", kToken))).ok())
        << tenant;
  }
  // One token, two tenants: refused like any repeated token.
  const std::string two_tenants = TokenFile(absl::StrCat("a: ", kToken, "\nb: ", kToken, "\n"));
  EXPECT_THAT(TokenAuthenticator::FromFile(two_tenants).status().message(),
              AllOf(HasSubstr("line 2"), HasSubstr("repeats an earlier token")));
  // A tenant named like a token of the file (a line written as TOKEN: TENANT, say) would put a
  // token in store files and logs.
  for (const std::string contents : {absl::StrCat(kToken, ": other\nx: ", kToken, "\n"),
                                     absl::StrCat("x\n", kToken, ": ", kToken)}) {
    const absl::Status named_like_a_token =
        TokenAuthenticator::FromFile(TokenFile(contents)).status();
    EXPECT_EQ(named_like_a_token.code(), absl::StatusCode::kInvalidArgument) << contents;
    EXPECT_THAT(named_like_a_token.message(), Not(HasSubstr(kToken))) << contents;
  }

  const std::string missing = certs().Path("no_such_token");
  const absl::Status missing_status = TokenAuthenticator::FromFile(missing).status();
  EXPECT_EQ(missing_status.code(), absl::StatusCode::kNotFound) << missing_status;
  EXPECT_THAT(missing_status.message(), HasSubstr(missing));
}

// --- Bad server options -------------------------------------------------------------------------

TEST_F(SecurityTest, StartRejectsInconsistentTlsOptions) {
  const absl::Status no_key = Start({.tls_cert_file = certs().server_cert}).status();
  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument) << no_key;
  EXPECT_THAT(no_key.message(), HasSubstr("--tls_key"));

  const absl::Status no_cert = Start({.tls_key_file = certs().server_key}).status();
  EXPECT_EQ(no_cert.code(), absl::StatusCode::kInvalidArgument) << no_cert;
  EXPECT_THAT(no_cert.message(), HasSubstr("--tls_cert"));

  const absl::Status ca_alone = Start({.tls_client_ca_file = certs().ca_cert}).status();
  EXPECT_EQ(ca_alone.code(), absl::StatusCode::kInvalidArgument) << ca_alone;
  EXPECT_THAT(ca_alone.message(), HasSubstr("--tls_client_ca"));
}

TEST_F(SecurityTest, StartNamesTheFileItCannotUse) {
  const std::string missing = certs().Path("no_such.crt");
  ServerOptions::Security security = Tls();
  security.tls_cert_file = missing;
  const absl::Status missing_cert = Start(security).status();
  EXPECT_EQ(missing_cert.code(), absl::StatusCode::kNotFound) << missing_cert;
  EXPECT_THAT(missing_cert.message(), AllOf(HasSubstr("--tls_cert"), HasSubstr(missing)));

  security = Tls();
  security.tls_client_ca_file = missing;
  const absl::Status missing_ca = Start(security).status();
  EXPECT_EQ(missing_ca.code(), absl::StatusCode::kNotFound) << missing_ca;
  EXPECT_THAT(missing_ca.message(), HasSubstr(missing));

  // Certificate and key swapped.
  security = {.tls_cert_file = certs().server_key, .tls_key_file = certs().server_cert};
  const absl::Status swapped = Start(security).status();
  EXPECT_EQ(swapped.code(), absl::StatusCode::kInvalidArgument) << swapped;
  EXPECT_THAT(swapped.message(), HasSubstr(certs().server_key));

  const std::string empty_token = TokenFile("\n");
  const absl::Status empty = Start({.auth_token_file = empty_token}).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_THAT(empty.message(), HasSubstr(empty_token));

  const std::string missing_token = certs().Path("no_such_token");
  const absl::Status no_token = Start({.auth_token_file = missing_token}).status();
  EXPECT_EQ(no_token.code(), absl::StatusCode::kNotFound) << no_token;
  EXPECT_THAT(no_token.message(), HasSubstr(missing_token));
}

// A key that is PEM but not the certificate's: only gRPC can tell, when it adds the port.
TEST_F(SecurityTest, StartFailsWithAKeyOfAnotherCertificate) {
  const absl::Status status =
      Start({.tls_cert_file = certs().server_cert, .tls_key_file = certs().client_key}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("TLS certificate and key"));
}

// --- Client options -----------------------------------------------------------------------------

TEST_F(SecurityTest, ClientCreateValidatesSecurityOptions) {
  ClientOptions::Tls cert_only = TrustingTheCa();
  cert_only.cert_file = certs().client_cert;
  const absl::Status no_key = Client::Create("127.0.0.1:1", {.tls = cert_only}).status();
  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument) << no_key;
  EXPECT_THAT(no_key.message(), HasSubstr("key_file"));

  const std::string missing = certs().Path("no_such_ca.crt");
  const absl::Status no_ca =
      Client::Create("127.0.0.1:1", {.tls = ClientOptions::Tls{.root_ca_file = missing}}).status();
  EXPECT_EQ(no_ca.code(), absl::StatusCode::kNotFound) << no_ca;
  EXPECT_THAT(no_ca.message(), HasSubstr(missing));

  const absl::Status newline = Client::Create("127.0.0.1:1", {.auth_token = "abc\n"}).status();
  EXPECT_EQ(newline.code(), absl::StatusCode::kInvalidArgument) << newline;
  EXPECT_THAT(newline.message(), Not(HasSubstr("abc")));

  absl::StatusOr<std::string> token = ReadAuthTokenFile(TokenFile(absl::StrCat(" ", kToken, "\n")));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);
  const std::string empty = TokenFile("");
  EXPECT_EQ(ReadAuthTokenFile(empty).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAuthTokenFile(certs().Path("no_such_token")).status().code(),
            absl::StatusCode::kNotFound);
}

// --- Binaries -----------------------------------------------------------------------------------

// The CLI against an in-process TLS server with a token: the token from --token_file, the CA from
// --tls_ca, the name from --tls_server_name.
TEST_F(SecurityTest, CliSendsTheTokenFromItsFileOverTls) {
  ServerOptions::Security security = Tls();
  security.auth_token_file = TokenFile(kToken);
  absl::StatusOr<std::unique_ptr<Server>> server = Start(security);
  ASSERT_TRUE(server.ok()) << server.status();

  const std::vector<int64_t> input_values = {10, 20, 30};
  const std::vector<int64_t> index_values = {2, 0};
  const Shape input_shape = {3};
  const Shape index_shape = {2};
  const std::string input = certs().Path("cli_input.npy");
  const std::string index = certs().Path("cli_index.npy");
  ASSERT_TRUE(WriteNpy(input, TensorView(DataType::kInt64, input_shape, input_values.data())).ok());
  ASSERT_TRUE(WriteNpy(index, TensorView(DataType::kInt64, index_shape, index_values.data())).ok());
  const std::string log = certs().Path("cli.log");
  auto run_cli = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {
        TENSOROPS_CLI_PATH, absl::StrFormat("--target=127.0.0.1:%d", (*server)->port()),
        "--timeout=30s", "--tls_ca=" + certs().ca_cert, "--tls_server_name=localhost"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"gather", "--input=" + input, "--index=" + index, "--axis=0"});
    absl::StatusOr<ProcessResult> result = RunProcess(argv, log);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProcessResult{};
  };

  const ProcessResult ok = run_cli({"--token_file=" + TokenFile(absl::StrCat(kToken, "\n"))});
  EXPECT_TRUE(ExitedWith(ok, 0)) << DescribeExit(ok) << "\n" << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("[30, 10]"));

  const ProcessResult tokenless = run_cli({});
  EXPECT_TRUE(ExitedWith(tokenless, 1)) << DescribeExit(tokenless) << "\n" << tokenless.output;
  EXPECT_THAT(tokenless.output, HasSubstr("error: UNAUTHENTICATED: missing authorization"));

  const ProcessResult wrong = run_cli({"--token_file=" + TokenFile("wrong")});
  EXPECT_TRUE(ExitedWith(wrong, 1)) << DescribeExit(wrong) << "\n" << wrong.output;
  EXPECT_THAT(wrong.output, HasSubstr("error: UNAUTHENTICATED: wrong bearer token"));

  const std::string missing = certs().Path("no_such_token");
  // A token file that cannot be read is a local file's problem: a usage error, no status code.
  const ProcessResult unreadable = run_cli({"--token_file=" + missing});
  EXPECT_TRUE(ExitedWith(unreadable, 2)) << DescribeExit(unreadable) << "\n" << unreadable.output;
  EXPECT_THAT(unreadable.output, AllOf(HasSubstr(missing), Not(HasSubstr("NOT_FOUND"))));

  const ProcessResult half = run_cli({"--tls_cert=" + certs().client_cert});
  EXPECT_TRUE(ExitedWith(half, 2)) << DescribeExit(half) << "\n" << half.output;
  EXPECT_THAT(half.output, HasSubstr("--tls_cert needs --tls_key"));
}

TEST_F(SecurityTest, ServerBinaryRejectsInconsistentTlsFlags) {
  const std::string log = certs().Path("server.log");
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"--tls_cert=" + certs().server_cert, "--tls_cert needs --tls_key"},
           {"--tls_key=" + certs().server_key, "--tls_key needs --tls_cert"},
           {"--tls_client_ca=" + certs().ca_cert, "--tls_client_ca needs --tls_cert"}}) {
    absl::StatusOr<ProcessResult> result =
        RunProcess({TENSOROPS_SERVER_PATH, "--port=0", flag}, log);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(ExitedWith(*result, 2)) << flag << ": " << DescribeExit(*result) << "\n"
                                        << result->output;
    EXPECT_THAT(result->output, HasSubstr(message));
  }
}

}  // namespace
}  // namespace tensorops
