// tensorops-cli: runs one call of any tensorops op against a tensorops server, with tensors in
// NumPy `.npy` files or in the server's tensor store; works the store; asks the server about
// itself (ServerInfo, gRPC health, server reflection); and reads a durable store's files offline.
//
//   tensorops-cli gather --input=x.npy --index=i.npy --axis=1 --output=out.npy
//   tensorops-cli scatter --input=x.npy --index=i.npy --value=2.5 --axis=0 --reduce=add
//   tensorops-cli put x x.npy && tensorops-cli gather --input=@x --index=i.npy --axis=1
//   tensorops-cli health && tensorops-cli describe tensorops.v1.GatherRequest
//   tensorops-cli snapshot && tensorops-cli store-file /data/snapshot-000000000002.tosnap x x.npy
//   tensorops-cli --target=localhost:50051 --tls_ca=ca.crt --token_file=token gather ...
//
// Exit status: 0 on success, 1 when the call fails ("error: CODE: message" on stderr), the server
// is not SERVING (health) or a store file is damaged, 2 for a bad command line (the error, the
// command's synopsis and a pointer to --help on stderr) or a local file that cannot be read or
// written.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/grpc_services.h"
#include "client/cpp/npy.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/dispatch.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/status_macros.h"
#include "kernels/tensor.h"
#include "proto/codec.h"
#include "proto/credential_file.h"
#include "proto/op_list.h"
#include "server/store/store_files.h"
#include "tensorops/storefiles/v1/store_files.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address: host:port, or a gRPC target such as unix:PATH (a server's "
          "--unix_socket), dns:///host:port or ipv4:host:port,host:port.");
ABSL_FLAG(absl::Duration, timeout, absl::InfiniteDuration(),
          "Deadline of the call, e.g. 10s or 500ms; inf for none.");
ABSL_FLAG(std::string, tls_ca, "",
          "Connect with TLS, trusting the CA certificate(s) in this PEM file. Any --tls_ flag "
          "turns TLS on; without --tls_ca, gRPC's default roots are trusted.");
ABSL_FLAG(std::string, tls_cert, "",
          "Connect with TLS, presenting this PEM client certificate (needs --tls_key); for servers "
          "that require client certificates.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Connect with TLS, checking the server's certificate against this name instead of "
          "--target's host (for IP targets and test certificates).");
ABSL_FLAG(std::string, token_file, "",
          "Send the bearer token in this file (whitespace around it ignored) as 'authorization: "
          "Bearer <token>' metadata; a file keeps the token out of the command line and ps.");
ABSL_FLAG(
    std::string, input, "",
    "Input tensor, a .npy file or @NAME for the server's stored tensor NAME (required, except "
    "by scatter_nd given --shape).");
ABSL_FLAG(std::string, index, "",
          "Index tensor, a .npy file or @NAME, of int32 or int64 (required).");
ABSL_FLAG(int64_t, axis, 0, "Axis the op works along, -rank <= axis < rank.");
ABSL_FLAG(bool, broadcast, false,
          "Broadcast as Paddle's take_along_axis / put_along_axis do (docs/semantics.md).");
ABSL_FLAG(std::string, src, "", "Source tensor, a .npy file or @NAME, of input's dtype.");
ABSL_FLAG(std::string, value, "",
          "scatter: scalar source instead of --src: true/false, an integer, or a float.");
ABSL_FLAG(std::string, reduce, "assign",
          "scatter, index_reduce, scatter_nd: assign|sum|prod|mean|amax|amin, or an alias "
          "add|mul|multiply|update|max|min (index_reduce, and scatter_nd given --shape, default "
          "to sum).");
ABSL_FLAG(bool, include_self, true,
          "scatter, index_reduce, scatter_nd: whether the destination's original value takes part "
          "in the reduction.");
ABSL_FLAG(std::string, alpha, "1", "index_reduce: scales src under sum (index_add's alpha).");
ABSL_FLAG(int64_t, select_index, 0, "select_scatter: the position along --axis to replace.");
ABSL_FLAG(int64_t, start, 0, "slice_scatter: slice start (Python rules; absent = beginning).");
ABSL_FLAG(int64_t, end, 0, "slice_scatter: slice end (Python rules; absent = end).");
ABSL_FLAG(int64_t, step, 1, "slice_scatter: slice step, > 0.");
ABSL_FLAG(int64_t, offset, 0, "diagonal_scatter: diagonal offset (> 0 above, < 0 below).");
ABSL_FLAG(int64_t, axis1, 0, "diagonal_scatter: first axis of the diagonal.");
ABSL_FLAG(int64_t, axis2, 1, "diagonal_scatter: second axis of the diagonal.");
ABSL_FLAG(std::vector<std::string>, axes, {},
          "gather_nd, scatter_nd: comma-separated axes the index's coordinates address (the "
          "compiler form); absent for the TensorFlow form.");
ABSL_FLAG(int64_t, batch_dims, 0,
          "gather_nd, scatter_nd: leading dimensions input and index share (TensorFlow form).");
ABSL_FLAG(std::vector<std::string>, shape, {},
          "scatter_nd: comma-separated shape of a zeros result, instead of --input "
          "(paddle.scatter_nd).");
ABSL_FLAG(std::string, mask, "",
          "masked_scatter: mask tensor, a .npy file or @NAME, of bool, broadcastable with the "
          "input.");
ABSL_FLAG(bool, deterministic, false,
          "scatter, scatter_nd: ask for bitwise reproducible floating sum/mean/prod results.");
ABSL_FLAG(std::string, output, "",
          "Write the result to this .npy file, or with @NAME keep it in the server's store under "
          "NAME (--overwrite replaces an existing NAME); without it, print the result to stdout. "
          "With --grad_output, each gradient goes to OUT.ARGUMENT.npy (OUT.input.npy, "
          "OUT.src.npy).");
ABSL_FLAG(bool, in_place, false,
          "Update the stored tensor --input=@NAME in place with the op's result (scatter, "
          "index_reduce, scatter_nd, masked_scatter, select/slice/diagonal_scatter).");
ABSL_FLAG(std::string, grad_output, "",
          "Compute the op's backward instead: the gradients of its differentiable inputs for this "
          ".npy gradient of its result (the result's shape and a floating or complex dtype).");
ABSL_FLAG(bool, overwrite, false,
          "put, --output=@NAME: replace NAME's value if it has one (an error otherwise).");
ABSL_FLAG(int64_t, expected_version, 0,
          "put, rm: act only if the stored tensor is at this version (>= 1), as the server's "
          "'pass overwrite or expected_version=N' says; put replaces it then.");
ABSL_FLAG(int64_t, version, 0,
          "get: the version the stored tensor must be at (>= 1); an error if it has moved on.");
ABSL_FLAG(std::string, namespace, "",
          "store-file FILE NAME OUT.npy: the namespace of NAME, as store-file FILE lists it (with "
          "--auth_token_file, the tenant's name, or token:HEX for a token without one; empty "
          "without).");
ABSL_FLAG(bool, bfloat16, false,
          "Read '<u2' (uint16) .npy inputs as bfloat16 raw bits; bfloat16 results are always "
          "written as '<u2'.");

namespace tensorops {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// NumPy's print options: summarize tensors with more elements than kPrintThreshold, keeping
// kEdgeItems at each end of every dimension.
constexpr int64_t kPrintThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// The usage text is kUsageHead, a line per command (the op commands' from Commands(), then the
// others' from ServiceCommands()), and kUsageTail, followed by the flags.
constexpr std::string_view kUsageHead =
    R"(usage: tensorops-cli [--target=HOST:PORT] [--timeout=DURATION] [--tls_ca=CA.pem]
                     [--tls_cert=CERT.pem --tls_key=KEY.pem] [--tls_server_name=NAME]
                     [--token_file=FILE] COMMAND [ARGUMENTS] [FLAGS]

Op commands (every one also takes [--output=OUT.npy] [--bfloat16] [--grad_output=G.npy]):
)";

// Between the op commands and the others.
constexpr std::string_view kServiceCommandsHead = R"(
Server and store commands:
)";

// Before the commands that need no server.
constexpr std::string_view kLocalCommandsHead = R"(
Store files (offline: no server, the connection flags are ignored):
)";

constexpr std::string_view kUsageTail = R"(
Tensors: every op flag that takes a tensor (--input, --index, --src, --mask) takes a .npy file or
@NAME, the tensor the server's store keeps under NAME (see put): it is read there and does not
cross the wire. A file whose name starts with '@' is written ./@FILE. --grad_output takes a file.

Without --output the result's shape, dtype and values are printed; with it, the path, shape and
dtype written. With --grad_output=G.npy any op command computes the op's backward instead: the
gradient of each differentiable input ("input", "src") for the result's gradient G, printed or
written to OUT.input.npy, OUT.src.npy. put and get print their progress on stderr for tensors of
16 MiB or more.

Exit status: 0 on success, 1 when the call fails (or health is not SERVING, or a store file is
damaged), 2 for a bad command line or a local file that cannot be read or written.

Security: any --tls_* flag connects with TLS, trusting --tls_ca (or gRPC's default roots) and
presenting --tls_cert/--tls_key to servers that require client certificates. --token_file sends
the bearer token of a server started with --auth_token_file (health and reflection need none).

Flags:
)";

// Flags every op command takes.
constexpr std::string_view kCommonFlags[] = {
    "target", "timeout", "tls_ca",   "tls_cert",    "tls_key",  "tls_server_name", "token_file",
    "input",  "output",  "bfloat16", "grad_output", "in_place", "overwrite"};

// The flags that say how to reach the server: every command takes them.
constexpr std::string_view kConnectionFlags[] = {
    "target", "timeout", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "token_file"};

// The flags that turn TLS on.
constexpr std::string_view kTlsFlags[] = {"tls_ca", "tls_cert", "tls_key", "tls_server_name"};

// Where an op flag's value names a stored tensor instead of a file: "@NAME".
constexpr char kStoredPrefix = '@';

// The status payload FileError sets.
constexpr absl::string_view kFileErrorPayload = "tensorops.cli/local_file";

// Transfers of at least this many bytes report their progress on stderr.
constexpr int64_t kProgressMinBytes = int64_t{16} << 20;

// StoredTensor is a tensor flag's "@NAME" or "@NAME@VERSION": a stored tensor, at a version.
struct StoredTensor {
  std::string name;
  std::optional<int64_t> version;
};

// ParseStored returns the stored tensor a flag's value names ("@NAME", "@NAME@VERSION"), nullopt
// for a file; INVALID_ARGUMENT naming `flag` for "@", "@NAME@" or a version that is not an integer
// >= 1 (stored names never hold '@').
absl::StatusOr<std::optional<StoredTensor>> ParseStored(std::string_view flag,
                                                        absl::string_view value) {
  if (value.empty() || value.front() != kStoredPrefix) return std::nullopt;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(value.substr(1), absl::MaxSplits(kStoredPrefix, 1));
  StoredTensor stored{.name = std::string(parts[0])};
  bool ok = !stored.name.empty();
  if (ok && parts.size() == 2) {
    int64_t version = 0;
    ok = absl::SimpleAtoi(parts[1], &version) && version >= 1;
    stored.version = version;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s = '%s' names no stored tensor (expected @NAME or @NAME@VERSION, VERSION >= 1)", flag,
        value));
  }
  return stored;
}

// StoredName returns NAME for a tensor flag's value "@NAME" (or "@NAME@VERSION"), nullopt for a
// file; the command line was validated (ParseStored) before.
std::optional<std::string> StoredName(absl::string_view value) {
  absl::StatusOr<std::optional<StoredTensor>> stored = ParseStored("", value);
  if (!stored.ok() || !stored->has_value()) return std::nullopt;
  return (*stored)->name;
}

// FileError marks a problem with a local file (a .npy to read or write, a token file): the CLI
// reports it as a usage problem (exit 2), without a server's status code.
absl::Status FileError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kFileErrorPayload, absl::Cord("1"));
  return status;
}

// ReadFlagNpy reads the .npy file a flag names.
absl::StatusOr<Tensor> ReadFlagNpy(const absl::Flag<std::string>& flag,
                                   const NpyReadOptions& read_options) {
  absl::StatusOr<Tensor> tensor = ReadNpy(absl::GetFlag(flag), read_options);
  if (!tensor.ok()) return FileError(tensor.status());
  return tensor;
}

// OpArgs is what an op command builds its request from besides the flags' values.
struct OpArgs {
  // --input's tensor; only scatter_nd, given --shape instead, has none.
  std::optional<Tensor> input;
  // The flags given explicitly, for the commands to which a flag's absence means something.
  const absl::flat_hash_set<std::string>* given = nullptr;
  NpyReadOptions read_options;
  // The tensor flags given as @NAME, by flag (= the request's field) name; Read adds to it.
  std::map<std::string, StoredTensor>* stored = nullptr;

  bool Given(absl::string_view flag) const { return given->contains(flag); }
  // Read reads the .npy file `flag` names; for @NAME it notes the reference in `stored` and
  // returns a stand-in that ReferenceStored replaces in the request.
  absl::StatusOr<Tensor> Read(const absl::Flag<std::string>& flag) const {
    const std::string value = absl::GetFlag(flag);
    const std::string name(absl::GetFlagReflectionHandle(flag).Name());
    TENSOROPS_ASSIGN_OR_RETURN(std::optional<StoredTensor> stored_tensor, ParseStored(name, value));
    if (stored_tensor.has_value()) {
      (*stored)[name] = *std::move(stored_tensor);
      return Tensor(DataType::kInt64, Shape{0});
    }
    return ReadFlagNpy(flag, read_options);
  }
};

// ReferenceStored replaces each argument of `op` that `stored` names (the flag's name is the
// field's, in every op's request) by a reference to the stored tensor.
void ReferenceStored(const std::map<std::string, StoredTensor>& stored, v1::OpRequest* op) {
  if (stored.empty()) return;
  const google::protobuf::Reflection* op_reflection = op->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> set;
  op_reflection->ListFields(*op, &set);
  // The builders set exactly one op.
  google::protobuf::Message* request = op_reflection->MutableMessage(op, set.front());
  for (const auto& [argument, stored_tensor] : stored) {
    const google::protobuf::FieldDescriptor* field =
        request->GetDescriptor()->FindFieldByName(argument);
    auto* tensor =
        static_cast<v1::Tensor*>(request->GetReflection()->MutableMessage(request, field));
    tensor->Clear();
    tensor->mutable_stored()->set_name(stored_tensor.name);
    if (stored_tensor.version.has_value()) {
      tensor->mutable_stored()->set_version(*stored_tensor.version);
    }
  }
}

// OneOf is a pair of flags of which a command needs exactly one.
struct OneOf {
  absl::string_view first;
  absl::string_view second;
  // Appended to the error when neither or both are given.
  absl::string_view note;
};

// CommandSpec describes one op command: its usage, the flags it takes beyond the common ones,
// those it needs, and how it builds its request.
struct CommandSpec {
  // The op's name (ops::Name), set by OpCommand.
  absl::string_view name;
  // The command's flags in the usage text; '\n' continues them on the next line.
  absl::string_view synopsis;
  std::vector<absl::string_view> flags;
  std::vector<absl::string_view> required;
  // Every command needs --input, unless `one_of` names it.
  std::optional<OneOf> one_of;
  // build makes the op's request from the flags; set by OpCommand.
  absl::StatusOr<v1::OpRequest> (*build)(const OpArgs& args) = nullptr;
};

// OpBuilder makes Op's request from the flags.
template <typename Op>
using OpBuilder = absl::StatusOr<typename Op::Request> (*)(const OpArgs& args);

// BuildOpRequest runs Op's builder and puts its request in an OpRequest, for Client::Run.
template <typename Op, OpBuilder<Op> kBuild>
absl::StatusOr<v1::OpRequest> BuildOpRequest(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(typename Op::Request message, kBuild(args));
  v1::OpRequest request;
  *ops::Mutable<Op>(&request) = std::move(message);
  return request;
}

// OpCommand completes `spec` as Op's command, named as the op is and building with kBuild.
template <typename Op, OpBuilder<Op> kBuild>
CommandSpec OpCommand(CommandSpec spec) {
  const std::string_view name = ops::Name<Op>();
  spec.name = absl::string_view(name.data(), name.size());
  spec.build = BuildOpRequest<Op, kBuild>;
  return spec;
}

// Commands is the op commands, in the op table's order.
const std::vector<CommandSpec>& Commands();
const CommandSpec* FindCommand(absl::string_view name);

// ServiceCommand is a command that runs no op: it asks the server about itself or works its
// tensor store, or (a local command) reads files with no server. It takes the connection flags,
// the flags it lists and `min_args` to `max_args` arguments after its name.
struct ServiceCommand {
  absl::string_view name;
  // Its arguments and flags in the usage text, e.g. "NAME FILE.npy [--overwrite]".
  absl::string_view synopsis;
  // What it does, for the usage text; '\n' continues it on the next line.
  absl::string_view summary;
  std::vector<absl::string_view> flags;
  size_t min_args = 0;
  size_t max_args = 0;
  // When not empty, the only argument counts it takes (each within min_args to max_args).
  std::vector<size_t> arg_counts;
  // run carries the command out with `args` (the arguments after its name); returns the exit
  // status.
  int (*run)(Client& client, const std::vector<std::string>& args) = nullptr;
  // A local command's run: it needs no server, so no client is made (the connection flags are
  // accepted and ignored).
  int (*run_local)(const std::vector<std::string>& args) = nullptr;

  bool local() const { return run_local != nullptr; }
};

// ServiceCommands is the commands other than the ops, in the usage text's order.
const std::vector<ServiceCommand>& ServiceCommands();

const ServiceCommand* FindServiceCommand(absl::string_view name) {
  for (const ServiceCommand& command : ServiceCommands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// CommandNames lists every command, the op commands first.
std::string CommandNames() {
  std::vector<absl::string_view> names;
  for (const CommandSpec& command : Commands()) names.push_back(command.name);
  for (const ServiceCommand& command : ServiceCommands()) names.push_back(command.name);
  return absl::StrJoin(names, ", ");
}

// IsCliFlag tells this CLI's flags from the ones linked-in libraries may register.
bool IsCliFlag(std::string_view name) {
  const absl::string_view flag(name.data(), name.size());
  if (absl::c_linear_search(kCommonFlags, name)) return true;
  return absl::c_any_of(Commands(),
                        [&](const CommandSpec& command) {
                          return absl::c_linear_search(command.flags, flag);
                        }) ||
         absl::c_any_of(ServiceCommands(), [&](const ServiceCommand& command) {
           return absl::c_linear_search(command.flags, flag);
         });
}

// AppendCommandUsage appends a command's lines of the usage text: its name, then its synopsis
// in a column of its own.
void AppendCommandUsage(absl::string_view name, absl::string_view synopsis, std::string* text) {
  constexpr int kNameWidth = 18;
  std::vector<absl::string_view> lines = absl::StrSplit(synopsis, '\n');
  absl::StrAppendFormat(text, "  %-*s%s\n", kNameWidth, name, lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::StrAppendFormat(text, "  %*s%s\n", kNameWidth, "", lines[i]);
  }
}

// ServiceCommandUsage is a service command's synopsis followed by its summary.
std::string ServiceCommandUsage(const ServiceCommand& command) {
  return command.synopsis.empty() ? absl::StrCat("(no arguments) ", command.summary)
                                  : absl::StrCat(command.synopsis, "\n", command.summary);
}

// AppendFlagsHelp appends each flag's name, help and default.
void AppendFlagsHelp(const std::vector<std::string_view>& names, std::string* text) {
  for (std::string_view name : names) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
    absl::StrAppendFormat(text, "  --%s\n      %s", name, flag->Help());
    const std::string default_value = flag->DefaultValue();
    // Positional flags (files, axis, slice bounds, versions) have defaults that mean nothing.
    constexpr std::string_view kNoDefault[] = {"input",  "index",        "src",
                                               "mask",   "axis",         "start",
                                               "end",    "select_index", "expected_version",
                                               "version"};
    if (!default_value.empty() && !absl::c_linear_search(kNoDefault, name)) {
      absl::StrAppendFormat(text, " Default: %s.", default_value);
    }
    text->push_back('\n');
  }
}

// UsageText lists the commands and the flags with their help and defaults.
std::string UsageText() {
  std::vector<std::string_view> names(std::begin(kCommonFlags), std::end(kCommonFlags));
  for (const CommandSpec& command : Commands()) {
    for (absl::string_view flag : command.flags) names.emplace_back(flag.data(), flag.size());
  }
  for (const ServiceCommand& command : ServiceCommands()) {
    for (absl::string_view flag : command.flags) names.emplace_back(flag.data(), flag.size());
  }
  absl::c_sort(names);
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string text(kUsageHead);
  for (const CommandSpec& command : Commands()) {
    AppendCommandUsage(command.name, command.synopsis, &text);
  }
  text.append(kServiceCommandsHead);
  for (const ServiceCommand& command : ServiceCommands()) {
    if (!command.local()) AppendCommandUsage(command.name, ServiceCommandUsage(command), &text);
  }
  text.append(kLocalCommandsHead);
  for (const ServiceCommand& command : ServiceCommands()) {
    if (command.local()) AppendCommandUsage(command.name, ServiceCommandUsage(command), &text);
  }
  text.append(kUsageTail);
  AppendFlagsHelp(names, &text);
  return text;
}

// CommandLinePrefix is what a command's synopsis follows in its help and usage errors.
absl::string_view CommandLinePrefix(absl::string_view name) {
  const ServiceCommand* service = FindServiceCommand(name);
  return service != nullptr && service->local()
             ? "usage: tensorops-cli "
             : "usage: tensorops-cli [--target=HOST:PORT] [FLAGS] ";
}

// CommandHelp is one command's help: its synopsis, what it does, and its flags (the connection
// flags last, for the commands that call a server).
std::string CommandHelp(absl::string_view name) {
  std::string text = absl::StrCat(CommandLinePrefix(name), name, " ");
  bool connects = true;
  std::vector<std::string_view> flags;
  if (const CommandSpec* command = FindCommand(name)) {
    absl::StrAppendFormat(&text, "%s\n    [--output=OUT.npy] [--bfloat16] [--grad_output=G.npy]\n",
                          absl::StrReplaceAll(command->synopsis, {{"\n", " "}}));
    absl::StrAppendFormat(
        &text,
        "\nRuns the op %s once on the server (docs/semantics.md). Tensors are .npy files or\n"
        "@NAME (@NAME@VERSION) for the server's stored tensors.\n",
        name);
    for (absl::string_view flag : command->flags) flags.emplace_back(flag.data(), flag.size());
    for (std::string_view flag : kCommonFlags) {
      if (!absl::c_linear_search(kConnectionFlags, flag)) flags.push_back(flag);
    }
  } else {
    const ServiceCommand& service = *FindServiceCommand(name);
    absl::StrAppendFormat(&text, "%s\n\n%s.\n", service.synopsis,
                          absl::StrReplaceAll(service.summary, {{"\n", " "}}));
    if (service.local()) {
      text.append("It needs no server: the connection flags are ignored.\n");
      connects = false;
    }
    for (absl::string_view flag : service.flags) flags.emplace_back(flag.data(), flag.size());
  }
  if (connects) {
    flags.insert(flags.end(), std::begin(kConnectionFlags), std::end(kConnectionFlags));
  }
  if (!flags.empty()) {
    text.append("\nFlags:\n");
    AppendFlagsHelp(flags, &text);
  }
  return text;
}

// UsageError prints a bad command line's error, the synopsis of its command (all commands' names
// when it has none that is known) and where the rest is, and returns the usage exit status.
int UsageError(const absl::Status& error, absl::string_view command_name) {
  std::string text = absl::StrFormat("error: %s\n\n", error.message());
  const absl::string_view kCommandLine = CommandLinePrefix(command_name);
  const ServiceCommand* service_command = FindServiceCommand(command_name);
  const CommandSpec* op_command = FindCommand(command_name);
  if (op_command != nullptr) {
    absl::StrAppendFormat(&text, "%s%s %s\n", kCommandLine, command_name,
                          absl::StrReplaceAll(op_command->synopsis, {{"\n", " "}}));
    text.append("    [--output=OUT.npy] [--bfloat16] [--grad_output=G.npy]\n");
  } else if (service_command != nullptr) {
    absl::StrAppendFormat(&text, "%s%s %s\n", kCommandLine, command_name,
                          service_command->synopsis);
    absl::StrAppendFormat(&text, "    %s\n",
                          absl::StrReplaceAll(service_command->summary, {{"\n", " "}}));
  } else {
    absl::StrAppendFormat(&text, "%sCOMMAND ...\ncommands: %s\n", kCommandLine, CommandNames());
  }
  text.append("see tensorops-cli --help for every command and flag\n");
  std::cerr << text;
  return kExitUsage;
}

// CommandLine is argv after flag parsing.
struct CommandLine {
  std::vector<std::string> positional;
  // The names of the flags given explicitly.
  absl::flat_hash_set<std::string> given;
  bool help = false;
  // "--version" without a number: print the CLI's version.
  bool version = false;
};

// ParseCommandLine sets the flags from `argv` ("--name=value", "--name value", "--flag" and
// "--noflag" for booleans; one or two dashes; "--" ends the flags) and collects the positional
// arguments. absl::ParseCommandLine would do the same but exits with status 1 on a bad flag, which
// this CLI reserves for failed calls; a bad flag here is INVALID_ARGUMENT, reported as usage.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine command_line;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      command_line.positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    if (arg == "help" || arg == "h") {
      command_line.help = true;
      continue;
    }
    // "--version" alone asks for the CLI's version; get's --version takes a number.
    int64_t next_number = 0;
    if (arg == "version" && (i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], &next_number))) {
      command_line.version = true;
      continue;
    }
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    if (const size_t equals = arg.find('='); equals != absl::string_view::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !value.has_value() && absl::ConsumePrefix(&name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name);
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        value = "false";
      }
    }
    if (flag == nullptr || !IsCliFlag(std::string_view(name.data(), name.size()))) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag %s", argv[i]));
    }
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrFormat("flag --%s needs a value", name));
      }
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad value '%s' for --%s: %s", *value, name, error));
    }
    command_line.given.emplace(name);
  }
  // A bare --version after a command is get's, missing its number: not a request for the CLI's
  // version, which would end the command without doing it.
  if (command_line.version && !command_line.positional.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "flag --version needs a value after a command (%s --version=N: the version the stored "
        "tensor must be at); the CLI's own version is `tensorops-cli --version` alone",
        command_line.positional.front()));
  }
  return command_line;
}

// ParseValue reads --value (or --alpha, `flag`): true/false as bool, an integer as int64,
// anything else as a double.
absl::StatusOr<Scalar> ParseValue(absl::string_view text, absl::string_view flag = "--value") {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true") return Scalar(true);
  if (lower == "false") return Scalar(false);
  int64_t integer = 0;
  if (absl::SimpleAtoi(text, &integer)) return Scalar(integer);
  double real = 0.0;
  if (absl::SimpleAtod(text, &real)) return Scalar(real);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s = '%s' is not true, false, an integer or a floating-point number", flag, text));
}

// ParseIntList reads a comma-separated list flag (--axes, --shape) as integers.
absl::StatusOr<std::vector<int64_t>> ParseIntList(std::string_view flag_name,
                                                  const std::vector<std::string>& items) {
  std::vector<int64_t> values;
  for (const std::string& item : items) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s: '%s' is not an integer (expected a comma-separated list of "
                          "integers, e.g. --%s=0,2)",
                          flag_name, item, flag_name));
    }
    values.push_back(value);
  }
  return values;
}

// FormatFloat prints like NumPy: the shortest text that reads back as the same `Float` (float
// for float32 and narrower, double for float64), "1.", "2.5", "1.0000001", "1234567.", "nan",
// "inf", "1e+30".
template <typename Float>
std::string FormatFloat(Float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const std::to_chars_result written = std::to_chars(std::begin(buffer), std::end(buffer), value);
  std::string text(buffer, written.ptr);
  if (text.find_first_of(".e") == std::string::npos) text.push_back('.');
  return text;
}

// FormatElement prints element `offset` of the contiguous `tensor`.
std::string FormatElement(const Tensor& tensor, int64_t offset) {
  return DispatchDataType(tensor.dtype(), [&]<typename T>(TypeTag<T>) -> std::string {
    const T value = tensor.data_as<T>()[offset];
    if constexpr (std::is_same_v<T, bool>) {
      return value ? "True" : "False";
    } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      return FormatFloat(static_cast<float>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      return FormatFloat(value);
    } else if constexpr (internal::IsComplexType<T>::value) {
      return absl::StrFormat("%s%s%sj", FormatFloat(value.real()), value.imag() < 0 ? "" : "+",
                             FormatFloat(value.imag()));
    } else {
      return absl::StrCat(static_cast<int64_t>(value));
    }
  });
}

// AppendLevel prints dimension `dim` of `tensor` starting at element `offset`, NumPy style.
void AppendLevel(const Tensor& tensor, const Shape& strides, int64_t dim, int64_t offset,
                 bool summarize, std::string* out) {
  const int64_t size = tensor.shape()[dim];
  const bool innermost = dim + 1 == tensor.rank();
  // Rows of a matrix end a line; blocks of higher dimensions are also separated by blank lines.
  const std::string separator = innermost
                                    ? ", "
                                    : absl::StrCat(",", std::string(tensor.rank() - dim - 1, '\n'),
                                                   std::string(dim + 1, ' '));
  out->push_back('[');
  for (int64_t i = 0; i < size; ++i) {
    if (i > 0) out->append(separator);
    if (summarize && size > 2 * kEdgeItems && i == kEdgeItems) {
      out->append("...");
      out->append(separator);
      i = size - kEdgeItems;
    }
    const int64_t element = offset + i * strides[dim];
    if (innermost) {
      out->append(FormatElement(tensor, element));
    } else {
      AppendLevel(tensor, strides, dim + 1, element, summarize, out);
    }
  }
  out->push_back(']');
}

// FormatShape is a shape as NumPy prints it: "(2, 3)", "(5,)", "()".
template <typename Sizes>
std::string FormatShape(const Sizes& shape) {
  return absl::StrFormat("(%s%s)", absl::StrJoin(shape, ", "), shape.size() == 1 ? "," : "");
}

// DescribeTensor is "shape=(2, 3) dtype=float32", NumPy's shape and dtype.
std::string DescribeTensor(DataType dtype, const Shape& shape) {
  return absl::StrFormat("shape=%s dtype=%s", FormatShape(shape), DataTypeName(dtype));
}

// FormatTensor prints the shape, dtype and (for big tensors, summarized) values of `tensor`.
std::string FormatTensor(const Tensor& tensor) {
  std::string text = absl::StrCat(DescribeTensor(tensor.dtype(), tensor.shape()), "\n");
  if (tensor.rank() == 0) {
    text.append(FormatElement(tensor, 0));
  } else {
    AppendLevel(tensor, ContiguousStrides(tensor.shape()), 0, 0, tensor.numel() > kPrintThreshold,
                &text);
  }
  text.push_back('\n');
  return text;
}

absl::StatusOr<v1::GatherRequest> BuildGather(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  GatherOptions options;
  options.broadcast = absl::GetFlag(FLAGS_broadcast);
  return MakeGatherRequest(args.input->view(), absl::GetFlag(FLAGS_axis), index.view(), options);
}

absl::StatusOr<v1::ScatterRequest> BuildScatter(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  ScatterOptions options;
  // ValidateCommandLine checked --reduce and --value before connecting.
  options.reduce = *ParseReduction(absl::GetFlag(FLAGS_reduce));
  options.include_self = absl::GetFlag(FLAGS_include_self);
  options.broadcast = absl::GetFlag(FLAGS_broadcast);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  const int64_t axis = absl::GetFlag(FLAGS_axis);
  if (args.Given("src")) {
    TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
    return MakeScatterRequest(args.input->view(), axis, index.view(), src.view(), options);
  }
  return MakeScatterRequest(args.input->view(), axis, index.view(),
                            *ParseValue(absl::GetFlag(FLAGS_value)), options);
}

absl::StatusOr<v1::IndexSelectRequest> BuildIndexSelect(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  return MakeIndexSelectRequest(args.input->view(), absl::GetFlag(FLAGS_axis), index.view());
}

absl::StatusOr<v1::IndexReduceRequest> BuildIndexReduce(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  IndexReduceOptions options;
  // index_add is the common case, so an absent --reduce means sum here.
  if (args.Given("reduce")) options.reduce = *ParseReduction(absl::GetFlag(FLAGS_reduce));
  options.include_self = absl::GetFlag(FLAGS_include_self);
  options.alpha = *ParseValue(absl::GetFlag(FLAGS_alpha), "--alpha");
  return MakeIndexReduceRequest(args.input->view(), absl::GetFlag(FLAGS_axis), index.view(),
                                src.view(), options);
}

absl::StatusOr<v1::SelectScatterRequest> BuildSelectScatter(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  return MakeSelectScatterRequest(args.input->view(), src.view(), absl::GetFlag(FLAGS_axis),
                                  absl::GetFlag(FLAGS_select_index));
}

absl::StatusOr<v1::SliceScatterRequest> BuildSliceScatter(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  SliceOptions options;
  if (args.Given("start")) options.start = absl::GetFlag(FLAGS_start);
  if (args.Given("end")) options.end = absl::GetFlag(FLAGS_end);
  options.step = absl::GetFlag(FLAGS_step);
  return MakeSliceScatterRequest(args.input->view(), src.view(), absl::GetFlag(FLAGS_axis),
                                 options);
}

absl::StatusOr<v1::DiagonalScatterRequest> BuildDiagonalScatter(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  DiagonalOptions options;
  options.offset = absl::GetFlag(FLAGS_offset);
  options.axis1 = absl::GetFlag(FLAGS_axis1);
  options.axis2 = absl::GetFlag(FLAGS_axis2);
  return MakeDiagonalScatterRequest(args.input->view(), src.view(), options);
}

absl::StatusOr<v1::GatherNdRequest> BuildGatherNd(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  GatherNdOptions options;
  // ValidateCommandLine checked --axes before connecting.
  options.axes = *ParseIntList("axes", absl::GetFlag(FLAGS_axes));
  options.batch_dims = absl::GetFlag(FLAGS_batch_dims);
  return MakeGatherNdRequest(args.input->view(), index.view(), options);
}

absl::StatusOr<v1::ScatterNdRequest> BuildScatterNd(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor index, args.Read(FLAGS_index));
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  ScatterNdOptions options;
  // ValidateCommandLine checked --axes, --shape and --reduce before connecting.
  options.axes = *ParseIntList("axes", absl::GetFlag(FLAGS_axes));
  options.batch_dims = absl::GetFlag(FLAGS_batch_dims);
  // Unset: the client's default, which sums duplicates without an input (--shape).
  if (args.Given("reduce")) options.reduce = *ParseReduction(absl::GetFlag(FLAGS_reduce));
  options.include_self = absl::GetFlag(FLAGS_include_self);
  options.shape = *ParseIntList("shape", absl::GetFlag(FLAGS_shape));
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  std::optional<TensorView> input_view;
  if (args.input.has_value()) input_view = args.input->view();
  return MakeScatterNdRequest(input_view, index.view(), src.view(), options);
}

absl::StatusOr<v1::MaskedScatterRequest> BuildMaskedScatter(const OpArgs& args) {
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor mask, args.Read(FLAGS_mask));
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor src, args.Read(FLAGS_src));
  return MakeMaskedScatterRequest(args.input->view(), mask.view(), src.view());
}

const std::vector<CommandSpec>& Commands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      OpCommand<ops::Gather, BuildGather>({
          .synopsis = "--input=X.npy --index=I.npy --axis=N [--broadcast]",
          .flags = {"index", "axis", "broadcast"},
          .required = {"index", "axis"},
      }),
      OpCommand<ops::Scatter, BuildScatter>({
          .synopsis = "--input=X.npy --index=I.npy (--src=S.npy | --value=V) --axis=N "
                      "[--reduce=R]\n"
                      "[--include_self=false] [--broadcast] [--deterministic]",
          .flags = {"index", "axis", "src", "value", "reduce", "include_self", "broadcast",
                    "deterministic"},
          .required = {"index", "axis"},
          .one_of = OneOf{.first = "src", .second = "value"},
      }),
      OpCommand<ops::IndexSelect, BuildIndexSelect>({
          .synopsis = "--input=X.npy --index=I.npy --axis=N",
          .flags = {"index", "axis"},
          .required = {"index", "axis"},
      }),
      OpCommand<ops::IndexReduce, BuildIndexReduce>({
          .synopsis = "--input=X.npy --index=I.npy --src=S.npy --axis=N [--reduce=R (default "
                      "sum)]\n"
                      "[--include_self=false] [--alpha=A]",
          .flags = {"index", "axis", "src", "reduce", "include_self", "alpha"},
          .required = {"index", "axis", "src"},
      }),
      OpCommand<ops::SelectScatter, BuildSelectScatter>({
          .synopsis = "--input=X.npy --src=S.npy --axis=N --select_index=I",
          .flags = {"src", "axis", "select_index"},
          .required = {"src", "axis", "select_index"},
      }),
      OpCommand<ops::SliceScatter, BuildSliceScatter>({
          .synopsis = "--input=X.npy --src=S.npy --axis=N [--start=A] [--end=B] [--step=C]",
          .flags = {"src", "axis", "start", "end", "step"},
          .required = {"src", "axis"},
      }),
      OpCommand<ops::DiagonalScatter, BuildDiagonalScatter>({
          .synopsis = "--input=X.npy --src=S.npy [--offset=K] [--axis1=A] [--axis2=B]",
          .flags = {"src", "offset", "axis1", "axis2"},
          .required = {"src"},
      }),
      OpCommand<ops::GatherNd, BuildGatherNd>({
          .synopsis = "--input=X.npy --index=I.npy [--axes=A,B,...] [--batch_dims=N]",
          .flags = {"index", "axes", "batch_dims"},
          .required = {"index"},
      }),
      OpCommand<ops::ScatterNd, BuildScatterNd>({
          .synopsis = "(--input=X.npy | --shape=D0,D1,...) --index=I.npy --src=S.npy\n"
                      "[--axes=A,B,...] [--batch_dims=N] [--reduce=R] [--include_self=false]\n"
                      "[--deterministic]",
          .flags = {"index", "src", "axes", "batch_dims", "reduce", "include_self", "shape",
                    "deterministic"},
          .required = {"index", "src"},
          // paddle.scatter_nd: --shape stands in for --input, as zeros of that shape.
          .one_of = OneOf{.first = "input", .second = "shape", .note = " (zeros of that shape)"},
      }),
      OpCommand<ops::MaskedScatter, BuildMaskedScatter>({
          .synopsis = "--input=X.npy --mask=M.npy --src=S.npy",
          .flags = {"mask", "src"},
          .required = {"mask", "src"},
      }),
  };
  return *kCommands;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& command : Commands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// ValidateTlsFlags checks that a client certificate comes with its key.
// CheckHostPort: `address` (HOST:PORT, [IPV6]:PORT) of --target `target` ends in a port of 1 to
// 65535. gRPC would dial a missing port as 0 (or 443 through dns:), and a port past 65535 modulo
// 65536: another server's, perhaps.
absl::Status CheckHostPort(absl::string_view target, absl::string_view address) {
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  const bool unbracketed_ipv6 =
      !absl::StartsWith(address, "[") && address.find(':') != address.rfind(':');
  if (unbracketed_ipv6) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--target = '%s': an IPv6 address takes brackets before its port (expected "
                        "[ADDRESS]:PORT, e.g. [::1]:50051)",
                        target));
  }
  if (colon == absl::string_view::npos || (bracket != absl::string_view::npos && bracket > colon)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--target = '%s' has no port (expected HOST:PORT, e.g. %s:50051, or a gRPC target such "
        "as dns:///HOST:PORT or unix:PATH)",
        target, address.empty() ? "127.0.0.1" : address));
  }
  const absl::string_view port = address.substr(colon + 1);
  int number = 0;
  if (!absl::SimpleAtoi(port, &number) || number < 1 || number > 65535 ||
      !absl::c_all_of(port, [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--target = '%s': port '%s' is not a number from 1 to 65535", target, port));
  }
  return absl::OkStatus();
}

// ValidateTarget refuses a --target whose address has no port or a port out of range
// ("127.0.0.1", "localhost:", "[::1]", "127.0.0.1:99999", "dns:///localhost", "ipv4:127.0.0.1"),
// which gRPC would dial at some other port, and a Unix socket target without its path or name
// ("unix:", "unix-abstract:"). Other schemes are gRPC's.
absl::Status ValidateTarget() {
  const std::string target = absl::GetFlag(FLAGS_target);
  for (absl::string_view scheme : {"unix:", "unix-abstract:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    if (target.size() == scheme.size() || target == "unix://" || target == "unix:///") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--target = '%s' names no socket (expected unix:PATH, e.g. unix:/run/tensorops.sock, "
          "or unix-abstract:NAME)",
          target));
    }
    return absl::OkStatus();
  }
  absl::string_view rest = target;
  if (absl::ConsumePrefix(&rest, "dns:")) {
    // dns:[//AUTHORITY/]HOST:PORT
    if (absl::ConsumePrefix(&rest, "//")) {
      const size_t slash = rest.find('/');
      rest = slash == absl::string_view::npos ? absl::string_view() : rest.substr(slash + 1);
    }
    return CheckHostPort(target, rest);
  }
  if (absl::ConsumePrefix(&rest, "ipv4:") || absl::ConsumePrefix(&rest, "ipv6:")) {
    for (absl::string_view address : absl::StrSplit(rest, ',')) {
      TENSOROPS_RETURN_IF_ERROR(CheckHostPort(target, address));
    }
    return absl::OkStatus();
  }
  // Another scheme (xds:, ...) is gRPC's to read; a bare HOST:PORT is ours to check.
  const size_t scheme_end = target.find("://");
  if (scheme_end != std::string::npos) return absl::OkStatus();
  return CheckHostPort(target, target);
}

// ValidateVersionFlags: --version and --expected_version, when given, are versions (>= 1).
absl::Status ValidateVersionFlags(const CommandLine& command_line) {
  for (const absl::Flag<int64_t>* flag : {&FLAGS_version, &FLAGS_expected_version}) {
    const std::string name(absl::GetFlagReflectionHandle(*flag).Name());
    if (command_line.given.contains(name) && absl::GetFlag(*flag) < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s = %d is not a version (versions start at 1)", name, absl::GetFlag(*flag)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTlsFlags() {
  if (absl::GetFlag(FLAGS_tls_cert).empty() != absl::GetFlag(FLAGS_tls_key).empty()) {
    return absl::InvalidArgumentError(absl::GetFlag(FLAGS_tls_key).empty()
                                          ? "--tls_cert needs --tls_key (the certificate's key)"
                                          : "--tls_key needs --tls_cert (the key's certificate)");
  }
  return absl::OkStatus();
}

// ValidateCommandLine checks what can be checked without files or a server: one known command,
// its required flags present, no flag it does not take, --reduce, --value, --alpha, --axes and
// --shape well-formed.
absl::Status ValidateCommandLine(const CommandLine& command_line) {
  if (command_line.positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("missing command (one of %s)", CommandNames()));
  }
  const std::string& name = command_line.positional[0];
  const size_t arg_count = command_line.positional.size() - 1;
  if (const ServiceCommand* service_command = FindServiceCommand(name)) {
    for (const std::string& flag : command_line.given) {
      if (!absl::c_linear_search(kConnectionFlags, flag) &&
          !absl::c_linear_search(service_command->flags, flag)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("flag --%s does not apply to %s", flag, name));
      }
    }
    if (arg_count < service_command->min_args || arg_count > service_command->max_args ||
        (!service_command->arg_counts.empty() &&
         !absl::c_linear_search(service_command->arg_counts, arg_count))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s takes %s, got %d argument%s%s", name,
          service_command->synopsis.empty() ? "no arguments" : service_command->synopsis, arg_count,
          arg_count == 1 ? "" : "s",
          arg_count == 0 ? ""
                         : absl::StrCat(": ", absl::StrJoin(command_line.positional.begin() + 1,
                                                            command_line.positional.end(), " "))));
    }
    for (size_t i = 1; i < command_line.positional.size(); ++i) {
      if (command_line.positional[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: argument %d is empty", name, static_cast<int>(i)));
      }
    }
    if (name == "store-file" && arg_count == 1 && command_line.given.contains("namespace")) {
      return absl::InvalidArgumentError(
          "--namespace applies to store-file FILE NAME OUT.npy: it says which NAME to write");
    }
    TENSOROPS_RETURN_IF_ERROR(ValidateVersionFlags(command_line));
    // A local command makes no connection: its connection flags are not looked at.
    if (service_command->local()) return absl::OkStatus();
    TENSOROPS_RETURN_IF_ERROR(ValidateTarget());
    return ValidateTlsFlags();
  }
  const CommandSpec* command = FindCommand(name);
  if (command == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown command '%s' (expected one of %s)", name, CommandNames()));
  }
  if (arg_count > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s takes flags only, got argument%s: %s (tensors are flags, e.g. --input=X.npy)", name,
        arg_count == 1 ? "" : "s",
        absl::StrJoin(command_line.positional.begin() + 1, command_line.positional.end(), " ")));
  }
  if (StoredName(absl::GetFlag(FLAGS_grad_output)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--grad_output = '%s': takes a .npy file, not a stored tensor",
                        absl::GetFlag(FLAGS_grad_output)));
  }
  const bool stores_output = StoredName(absl::GetFlag(FLAGS_output)).has_value();
  if (command_line.given.contains("grad_output") &&
      (stores_output || command_line.given.contains("in_place"))) {
    return absl::InvalidArgumentError(
        "--grad_output computes gradients, which are written to files: --in_place and "
        "--output=@NAME do not apply to it");
  }
  if (absl::GetFlag(FLAGS_in_place) && !StoredName(absl::GetFlag(FLAGS_input)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--in_place updates a stored tensor: --input = '%s' must be @NAME",
                        absl::GetFlag(FLAGS_input)));
  }
  if (absl::GetFlag(FLAGS_in_place) && command_line.given.contains("output")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--in_place writes the result into --input's stored tensor: --output = '%s' does not "
        "apply (read the new value with get)",
        absl::GetFlag(FLAGS_output)));
  }
  if (command_line.given.contains("overwrite") && !stores_output) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--overwrite applies to --output=@NAME (a stored result), not to %s", name));
  }
  for (const absl::Flag<std::string>* tensor_flag :
       {&FLAGS_input, &FLAGS_index, &FLAGS_src, &FLAGS_mask, &FLAGS_output}) {
    const absl::string_view name = absl::GetFlagReflectionHandle(*tensor_flag).Name();
    TENSOROPS_RETURN_IF_ERROR(
        ParseStored(std::string_view(name.data(), name.size()), absl::GetFlag(*tensor_flag))
            .status());
  }
  for (const std::string& flag : command_line.given) {
    if (!absl::c_linear_search(kCommonFlags, flag) &&
        !absl::c_linear_search(command->flags, flag)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("flag --%s does not apply to %s", flag, name));
    }
  }
  for (absl::string_view required : command->required) {
    if (!command_line.given.contains(required)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s needs --%s", name, required));
    }
  }
  const std::optional<OneOf>& one_of = command->one_of;
  const bool input_optional =
      one_of.has_value() && (one_of->first == "input" || one_of->second == "input");
  if (!input_optional && !command_line.given.contains("input")) {
    return absl::InvalidArgumentError(absl::StrFormat("%s needs --input", name));
  }
  if (one_of.has_value() &&
      command_line.given.contains(one_of->first) == command_line.given.contains(one_of->second)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s needs exactly one of --%s and --%s%s",
                                                      name, one_of->first, one_of->second,
                                                      one_of->note));
  }
  if (command_line.given.contains("reduce")) {
    const std::string reduce = absl::GetFlag(FLAGS_reduce);
    if (!ParseReduction(reduce).has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--reduce = '%s' is not one of assign, sum, prod, mean, amax, amin (or add, mul, "
          "multiply, update, max, min)",
          reduce));
    }
  }
  if (command_line.given.contains("value")) {
    TENSOROPS_RETURN_IF_ERROR(ParseValue(absl::GetFlag(FLAGS_value)).status());
  }
  if (command_line.given.contains("alpha")) {
    TENSOROPS_RETURN_IF_ERROR(ParseValue(absl::GetFlag(FLAGS_alpha), "--alpha").status());
  }
  TENSOROPS_RETURN_IF_ERROR(ParseIntList("axes", absl::GetFlag(FLAGS_axes)).status());
  TENSOROPS_ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                             ParseIntList("shape", absl::GetFlag(FLAGS_shape)));
  if (command_line.given.contains("shape") && shape.empty()) {
    return absl::InvalidArgumentError(
        "--shape is empty (expected the result's shape, rank >= 1, e.g. --shape=2,3)");
  }
  TENSOROPS_RETURN_IF_ERROR(ValidateTarget());
  return ValidateTlsFlags();
}

// CreateClient builds the client the connection flags ask for, reading --token_file and (through
// Client::Create) the TLS files; their errors name the file.
absl::StatusOr<std::unique_ptr<Client>> CreateClient(
    const absl::flat_hash_set<std::string>& given) {
  ClientOptions options;
  options.default_timeout = absl::GetFlag(FLAGS_timeout);
  if (absl::c_any_of(kTlsFlags,
                     [&](std::string_view flag) { return given.contains(std::string(flag)); })) {
    // Read here first, so that a file that cannot be read is the command line's problem (exit
    // 2) named by its flag, as a token file's is.
    for (const absl::Flag<std::string>* flag : {&FLAGS_tls_ca, &FLAGS_tls_cert, &FLAGS_tls_key}) {
      const std::string path = absl::GetFlag(*flag);
      if (path.empty()) continue;
      const std::string name = absl::StrCat("--", absl::GetFlagReflectionHandle(*flag).Name());
      if (absl::StatusOr<std::string> read = wire::ReadCredentialFile(name, path); !read.ok()) {
        return FileError(read.status());
      }
    }
    options.tls = ClientOptions::Tls{.root_ca_file = absl::GetFlag(FLAGS_tls_ca),
                                     .cert_file = absl::GetFlag(FLAGS_tls_cert),
                                     .key_file = absl::GetFlag(FLAGS_tls_key),
                                     .server_name_override = absl::GetFlag(FLAGS_tls_server_name)};
  }
  if (given.contains("token_file")) {
    absl::StatusOr<std::string> token = ReadAuthTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) return FileError(token.status());
    options.auth_token = *std::move(token);
  }
  return Client::Create(absl::GetFlag(FLAGS_target), std::move(options));
}

// ReportFailure prints a failed call's status as the CLI does for every command.
int ReportFailure(const absl::Status& status) {
  if (status.GetPayload(kFileErrorPayload).has_value()) {
    // A local file's problem is the command line's, not a server's: no status code.
    std::cerr << absl::StrFormat("error: %s\n", status.message());
    return kExitUsage;
  }
  std::cerr << absl::StrFormat("error: %s: %s\n", absl::StatusCodeToString(status.code()),
                               status.message());
  return kExitFailure;
}

// Deadline is when a call that starts now must end, after --timeout.
absl::Time Deadline() { return absl::Now() + absl::GetFlag(FLAGS_timeout); }

// DescribeStored describes a stored tensor's info like DescribeTensor.
std::string DescribeStored(const v1::TensorInfo& info) {
  const Shape shape(info.shape().begin(), info.shape().end());
  absl::StatusOr<DataType> dtype = wire::DataTypeFromProto(info.dtype(), "tensor_info", "dtype");
  return dtype.ok() ? DescribeTensor(*dtype, shape)
                    : absl::StrFormat("shape=(%s) dtype=%s", absl::StrJoin(shape, ", "),
                                      v1::DataType_Name(info.dtype()));
}

// WriteResult writes `tensor` to `path` and says so: "wrote PATH: shape=(...) dtype=...".
absl::Status WriteResult(const std::string& path, const Tensor& tensor) {
  TENSOROPS_RETURN_IF_ERROR(FileError(WriteNpy(path, tensor.view())));
  std::cout << absl::StrFormat("wrote %s: %s\n", path,
                               DescribeTensor(tensor.dtype(), tensor.shape()));
  return absl::OkStatus();
}

// ToJson prints a message as the JSON of protobuf's mapping, every field included.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  if (const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
      !status.ok()) {
    return absl::InternalError(std::string(status.message()));
  }
  return json;
}

// ProgressReporter returns a TransferProgress that prints "VERB NAME: N of M MiB (P%)" on stderr
// for transfers of kProgressMinBytes or more: redrawn in place on a terminal, else a line at each
// quarter.
TransferProgress ProgressReporter(std::string verb, std::string name) {
  const bool terminal = isatty(STDERR_FILENO) == 1;
  auto last_shown = std::make_shared<int>(-1);
  return [=](int64_t done_bytes, int64_t total_bytes) {
    if (total_bytes < kProgressMinBytes) return;
    const int percent = static_cast<int>(done_bytes * 100 / total_bytes);
    const int step = terminal ? percent : percent / 25 * 25;
    if (step == *last_shown) return;
    *last_shown = step;
    constexpr double kMiB = 1 << 20;
    std::cerr << absl::StrFormat("%s%s %s: %.1f of %.1f MiB (%d%%)%s", terminal ? "\r" : "", verb,
                                 name, done_bytes / kMiB, total_bytes / kMiB, percent,
                                 terminal && done_bytes < total_bytes ? "" : "\n");
  };
}

// info: the server's ServerInfo as JSON, with "rpcs": the service's RPCs other than the ops, as
// its reflection lists them (left out, with a note on stderr, when reflection fails).
int RunInfo(Client& client, const std::vector<std::string>& /*args*/) {
  absl::StatusOr<v1::ServerInfoResponse> info = client.ServerInfo();
  if (!info.ok()) return ReportFailure(info.status());
  absl::StatusOr<std::string> json = ToJson(*info);
  if (!json.ok()) return ReportFailure(json.status());
  google::protobuf::DescriptorPool pool;
  const std::string service_name(v1::TensorOps::service_full_name());
  absl::Status loaded = LoadSymbol(client.channel(), Deadline(), service_name, &pool);
  const google::protobuf::ServiceDescriptor* service =
      loaded.ok() ? pool.FindServiceByName(service_name) : nullptr;
  // "rpcs" goes in after the object's last field, before its closing brace.
  const size_t close = json->rfind('}');
  const size_t last_field_end =
      close == std::string::npos ? std::string::npos : json->find_last_not_of(" \n", close - 1);
  if (service != nullptr && last_field_end != std::string::npos) {
    std::vector<std::string> rpcs;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string& method = service->method(i)->name();
      if (!absl::c_linear_search(info->ops(), method)) {
        rpcs.push_back(absl::StrCat("\"", method, "\""));
      }
    }
    json->insert(last_field_end + 1,
                 absl::StrFormat(",\n \"rpcs\": [\n  %s\n ]", absl::StrJoin(rpcs, ",\n  ")));
  } else {
    std::cerr << absl::StrFormat(
        "note: the RPCs other than the ops are left out: %s\n",
        loaded.ok() ? "reflection does not describe the service" : std::string(loaded.message()));
  }
  std::cout << *json;
  if (!absl::EndsWith(*json, "\n")) std::cout << "\n";
  return 0;
}

// health [SERVICE]: the health service's status of SERVICE (default: the server as a whole);
// exit 0 only for SERVING.
int RunHealth(Client& client, const std::vector<std::string>& args) {
  const std::string service = args.empty() ? "" : args[0];
  absl::StatusOr<std::string> status = CheckHealth(client.channel(), Deadline(), service);
  if (!status.ok()) return ReportFailure(status.status());
  std::cout << *status << "\n";
  return *status == "SERVING" ? 0 : kExitFailure;
}

// list [SERVICE]: the services the server offers, or SERVICE's methods, one full name a line.
int RunList(Client& client, const std::vector<std::string>& args) {
  if (args.empty()) {
    absl::StatusOr<std::vector<std::string>> services = ListServices(client.channel(), Deadline());
    if (!services.ok()) return ReportFailure(services.status());
    for (const std::string& service : *services) std::cout << service << "\n";
    return 0;
  }
  google::protobuf::DescriptorPool pool;
  if (absl::Status loaded = LoadSymbol(client.channel(), Deadline(), args[0], &pool);
      !loaded.ok()) {
    return ReportFailure(loaded);
  }
  const google::protobuf::ServiceDescriptor* service = pool.FindServiceByName(args[0]);
  if (service == nullptr) {
    return ReportFailure(absl::InvalidArgumentError(
        absl::StrFormat("list: '%s' is not a service (describe shows what it is)", args[0])));
  }
  for (int i = 0; i < service->method_count(); ++i) {
    std::cout << service->method(i)->full_name() << "\n";
  }
  return 0;
}

// describe SYMBOL: the definition of a service, method, message, enum or field, as .proto text.
int RunDescribe(Client& client, const std::vector<std::string>& args) {
  const std::string symbol(absl::StripPrefix(args[0], "."));
  google::protobuf::DescriptorPool pool;
  if (absl::Status loaded = LoadSymbol(client.channel(), Deadline(), symbol, &pool); !loaded.ok()) {
    return ReportFailure(loaded);
  }
  std::string kind;
  std::string definition;
  if (const auto* service = pool.FindServiceByName(symbol)) {
    kind = "a service";
    definition = service->DebugString();
  } else if (const auto* method = pool.FindMethodByName(symbol)) {
    kind = "a method";
    definition = method->DebugString();
  } else if (const auto* message = pool.FindMessageTypeByName(symbol)) {
    kind = "a message";
    definition = message->DebugString();
  } else if (const auto* enum_type = pool.FindEnumTypeByName(symbol)) {
    kind = "an enum";
    definition = enum_type->DebugString();
  } else if (const auto* field = pool.FindFieldByName(symbol)) {
    kind = absl::StrCat("a field of ", field->containing_type()->full_name());
    definition = field->DebugString();
  } else {
    return ReportFailure(absl::NotFoundError(absl::StrFormat(
        "the server knows no service, method, message, enum or field named '%s'", symbol)));
  }
  std::cout << absl::StrFormat("%s is %s:\n%s", symbol, kind, definition);
  return 0;
}

// put NAME FILE.npy [--overwrite]: stores the file's tensor under NAME.
int RunPut(Client& client, const std::vector<std::string>& args) {
  const std::string& name = args[0];
  absl::StatusOr<Tensor> value =
      ReadNpy(args[1], NpyReadOptions{.uint16_as_bfloat16 = absl::GetFlag(FLAGS_bfloat16),
                                      .uint16_as_bfloat16_option = "--bfloat16"});
  if (!value.ok()) return ReportFailure(FileError(value.status()));
  PutTensorOptions options;
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  if (const int64_t version = absl::GetFlag(FLAGS_expected_version); version > 0) {
    options.expected_version = version;
  }
  options.progress = ProgressReporter("put", name);
  absl::StatusOr<v1::TensorInfo> info = client.PutTensor(name, value->view(), options);
  if (!info.ok()) return ReportFailure(info.status());
  std::cout << absl::StrFormat("stored %s: %s, version %d, %d bytes\n", info->name(),
                               DescribeStored(*info), info->version(), info->bytes());
  return 0;
}

// get NAME OUT.npy: writes the stored tensor NAME to a file.
int RunGet(Client& client, const std::vector<std::string>& args) {
  GetTensorOptions options;
  options.progress = ProgressReporter("get", args[0]);
  if (const int64_t version = absl::GetFlag(FLAGS_version); version > 0) options.version = version;
  absl::StatusOr<Tensor> value = client.GetTensor(args[0], options);
  if (!value.ok()) return ReportFailure(value.status());
  if (absl::Status written = WriteResult(args[1], *value); !written.ok()) {
    return ReportFailure(written);
  }
  return 0;
}

// ls: one line per stored tensor: name (padded to the longest), shape and dtype, bytes, version.
int RunLs(Client& client, const std::vector<std::string>& /*args*/) {
  absl::StatusOr<std::vector<v1::TensorInfo>> tensors = client.ListTensors();
  if (!tensors.ok()) return ReportFailure(tensors.status());
  size_t name_width = 0;
  for (const v1::TensorInfo& info : *tensors) name_width = std::max(name_width, info.name().size());
  for (const v1::TensorInfo& info : *tensors) {
    std::cout << absl::StrFormat("%-*s  %s  %d bytes  version %d\n", static_cast<int>(name_width),
                                 info.name(), DescribeStored(info), info.bytes(), info.version());
  }
  return 0;
}

// rm NAME: deletes the stored tensor NAME.
int RunRm(Client& client, const std::vector<std::string>& args) {
  std::optional<int64_t> expected_version;
  if (const int64_t version = absl::GetFlag(FLAGS_expected_version); version > 0) {
    expected_version = version;
  }
  if (absl::Status deleted = client.DeleteTensor(args[0], expected_version); !deleted.ok()) {
    return ReportFailure(deleted);
  }
  std::cout << absl::StrFormat("deleted %s\n", args[0]);
  return 0;
}

// stat NAME: the stored tensor's TensorInfo as JSON.
int RunStat(Client& client, const std::vector<std::string>& args) {
  absl::StatusOr<v1::TensorInfo> info = client.TensorInfo(args[0]);
  if (!info.ok()) return ReportFailure(info.status());
  absl::StatusOr<std::string> json = ToJson(*info);
  if (!json.ok()) return ReportFailure(json.status());
  std::cout << *json;
  if (!absl::EndsWith(*json, "\n")) std::cout << "\n";
  return 0;
}

// snapshot: has the server write a snapshot of its whole store to its --store_dir now.
int RunSnapshot(Client& client, const std::vector<std::string>& /*args*/) {
  absl::StatusOr<v1::SnapshotStoreResponse> snapshot = client.SnapshotStore();
  if (!snapshot.ok()) return ReportFailure(snapshot.status());
  std::cout << absl::StrFormat(
      "wrote snapshot %s: generation %d, %d tensor%s, %d bytes, in %s\n", snapshot->path(),
      snapshot->generation(), snapshot->tensors(), snapshot->tensors() == 1 ? "" : "s",
      snapshot->bytes(), absl::FormatDuration(absl::Microseconds(snapshot->duration_micros())));
  return 0;
}

// ParseByteArg reads the integer argument `what` of a shared-memory command (>= `minimum`).
absl::StatusOr<int64_t> ParseByteArg(std::string_view text, std::string_view what,
                                     int64_t minimum) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value) || value < minimum) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = \"%s\" is not an integer >= %d", what, std::string(text), minimum));
  }
  return value;
}

// shm-register NAME KEY BYTE_SIZE [OFFSET]: maps BYTE_SIZE bytes from OFFSET of the POSIX
// shared-memory object KEY into the server as region NAME.
int RunShmRegister(Client& client, const std::vector<std::string>& args) {
  absl::StatusOr<int64_t> byte_size = ParseByteArg(args[2], "BYTE_SIZE", 1);
  if (!byte_size.ok()) return UsageError(byte_size.status(), "shm-register");
  absl::StatusOr<int64_t> offset =
      args.size() > 3 ? ParseByteArg(args[3], "OFFSET", 0) : absl::StatusOr<int64_t>(0);
  if (!offset.ok()) return UsageError(offset.status(), "shm-register");
  const absl::Status status = client.RegisterSharedMemory(args[0], args[1], *byte_size, *offset);
  if (!status.ok()) return ReportFailure(status);
  std::cout << absl::StrFormat("registered region %s: %d bytes from offset %d of %s\n", args[0],
                               *byte_size, *offset, args[1]);
  return 0;
}

// shm-unregister [NAME]: forgets region NAME, or every region of the caller's.
int RunShmUnregister(Client& client, const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<std::string>> names =
      client.UnregisterSharedMemory(args.empty() ? "" : args[0]);
  if (!names.ok()) return ReportFailure(names.status());
  for (const std::string& name : *names) std::cout << "unregistered region " << name << "\n";
  return 0;
}

// shm-ls: the caller's regions, one line each.
int RunShmLs(Client& client, const std::vector<std::string>& /*args*/) {
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> regions = client.ListSharedMemory();
  if (!regions.ok()) return ReportFailure(regions.status());
  if (regions->empty()) std::cout << "(no regions)\n";
  for (const v1::SharedMemoryRegion& region : *regions) {
    if (region.has_system()) {
      std::cout << absl::StrFormat("%s  system  key %s  offset %d  %d bytes\n", region.name(),
                                   region.system().key(), region.system().offset(),
                                   region.system().byte_size());
    } else {
      std::cout << absl::StrFormat("%s  cuda  device %d  %d bytes\n", region.name(),
                                   region.cuda().device_id(), region.cuda().byte_size());
    }
  }
  return 0;
}

namespace files = ::tensorops::storefiles::v1;

// The bytes every store file begins with: the magic of its first record's head.
constexpr std::string_view kStoreFileMagic = "TOSR";

// RecordKindName is a record kind as store-file lists it.
std::string_view RecordKindName(RecordKind kind) {
  switch (kind) {
    case RecordKind::kFileHeader:
      return "header";
    case RecordKind::kStoredTensor:
      return "stored";
    case RecordKind::kDeletedTensor:
      return "deleted";
    case RecordKind::kUpdatedTensor:
      return "updated";
    case RecordKind::kCancelledUpdate:
      return "cancelled";
    case RecordKind::kRememberedChanges:
      return "remembered";
    case RecordKind::kSnapshotEnd:
      return "end";
  }
  return "unknown";
}

// ParseRecordMeta parses a record's metadata as its kind's message; DATA_LOSS naming the file and
// offset when it does not parse.
absl::Status ParseRecordMeta(const RecordReader& reader, const Record& record,
                             google::protobuf::MessageLite* meta) {
  if (!meta->ParseFromString(record.meta)) {
    return absl::DataLossError(
        absl::StrFormat("%s is damaged at offset %d: the %s record's metadata does not parse",
                        reader.path(), record.offset, RecordKindName(record.kind)));
  }
  return absl::OkStatus();
}

// NamespaceCell is how store-file shows a namespace: "-" for none (a server without tokens).
std::string NamespaceCell(const std::string& ns) { return ns.empty() ? "-" : ns; }

// WireDataTypeName is a store file's dtype as NumPy names it, or the wire's name.
std::string WireDataTypeName(int dtype) {
  absl::StatusOr<DataType> known = wire::DataTypeFromProto(dtype, "store-file", "dtype");
  if (known.ok()) return std::string(DataTypeName(*known));
  const std::string& name = v1::DataType_Name(static_cast<v1::DataType>(dtype));
  return name.empty() ? absl::StrCat("dtype ", dtype) : name;
}

// FormatUnixNanos is a time as "2026-11-27 10:00:52.270 UTC".
std::string FormatUnixNanos(int64_t nanos) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", absl::FromUnixNanos(nanos),
                          absl::UTCTimeZone());
}

// StoreFile is a store file opened for reading, its header record read.
struct StoreFile {
  RecordReader reader;
  files::FileHeader header;
  bool snapshot = false;
};

// OpenStoreFile opens the snapshot or log file at `path` and reads its header. A file that
// cannot be read, or that is no store file (it does not begin as one), is a local file's problem
// (FileError); a store file whose header is damaged or torn is DATA_LOSS.
absl::StatusOr<StoreFile> OpenStoreFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return FileError(absl::InvalidArgumentError(absl::StrFormat(
        "%s is a directory (expected one of its snapshot-*.tosnap or log-*.tolog files)", path)));
  }
  absl::StatusOr<RecordReader> reader = RecordReader::Open(path);
  if (!reader.ok()) return FileError(reader.status());
  std::string start(kStoreFileMagic.size(), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(start.data(), static_cast<std::streamsize>(start.size()));
  start.resize(static_cast<size_t>(in.gcount()));
  if (start != kStoreFileMagic) {
    return FileError(absl::InvalidArgumentError(absl::StrFormat(
        "%s is not a tensorops store file (a snapshot-*.tosnap or log-*.tolog of a server's "
        "--store_dir): %s",
        path,
        reader->file_size() == 0
            ? std::string("it is empty")
            : absl::StrFormat("it does not begin with \"%s\"", kStoreFileMagic))));
  }
  TENSOROPS_ASSIGN_OR_RETURN(std::optional<Record> first, reader->Next());
  if (!first.has_value()) {
    return absl::DataLossError(absl::StrFormat(
        "%s holds no whole record: its first, the file header, is torn (cut off while it was "
        "written)",
        path));
  }
  if (first->kind != RecordKind::kFileHeader) {
    return absl::DataLossError(
        absl::StrFormat("%s is damaged at offset 0: its first record is a %s record, not the "
                        "file header",
                        path, RecordKindName(first->kind)));
  }
  StoreFile file{.reader = *std::move(reader)};
  TENSOROPS_RETURN_IF_ERROR(ParseRecordMeta(file.reader, *first, &file.header));
  if (file.header.file_kind() != "snapshot" && file.header.file_kind() != "log") {
    return absl::DataLossError(
        absl::StrFormat("%s is damaged at offset 0: its header says it is a \"%s\" file "
                        "(expected \"snapshot\" or \"log\")",
                        path, absl::CHexEscape(file.header.file_kind())));
  }
  file.snapshot = file.header.file_kind() == "snapshot";
  return file;
}

// AppendTable appends `rows` under `header`, each column as wide as its widest cell, two spaces
// apart (the last column unpadded).
void AppendTable(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, std::string* text) {
  std::vector<size_t> widths;
  auto widen = [&](const std::vector<std::string>& row) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  };
  widen(header);
  for (const std::vector<std::string>& row : rows) widen(row);
  auto append_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 == row.size()) {
        line.append(row[i]);
      } else {
        absl::StrAppendFormat(&line, "%-*s  ", static_cast<int>(widths[i]), row[i]);
      }
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(text, line, "\n");
  };
  append_row(header);
  for (const std::vector<std::string>& row : rows) append_row(row);
}

// Plural is "1 tensor", "2 tensors".
std::string Plural(int64_t count, absl::string_view noun) {
  return absl::StrFormat("%d %s%s", count, noun, count == 1 ? "" : "s");
}

// ListStoreFile prints what the store file records: a snapshot's tensors (namespace, name, dtype,
// shape, version, bytes), or a log's records, each with its offset and kind. Whatever was read
// is printed before a damaged record's error.
int ListStoreFile(StoreFile& file) {
  const std::string& path = file.reader.path();
  std::string text =
      absl::StrFormat("%s %s: generation %d, format %d, created %s\n", file.header.file_kind(),
                      path, file.header.generation(), file.header.format_version(),
                      FormatUnixNanos(file.header.created_unix_nanos()));
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
  std::map<std::string_view, int64_t> counts;
  int64_t tensor_bytes = 0;
  std::optional<files::SnapshotEnd> end;
  // An update's payload: its op call, a tensorops.v1.OpRequest.
  std::string call;
  const SinkFor sink_for = [&](const Record& record) -> absl::StatusOr<PayloadSink> {
    if (record.kind != RecordKind::kUpdatedTensor) return PayloadSink();
    call.clear();
    return [&call](int64_t /*offset*/, std::string_view chunk) {
      call.append(chunk);
      return absl::OkStatus();
    };
  };
  absl::Status damage;
  while (true) {
    absl::StatusOr<std::optional<Record>> next = file.reader.Next(sink_for);
    if (!next.ok()) {
      damage = next.status();
      break;
    }
    if (!next->has_value()) break;
    const Record& record = **next;
    const std::string offset = absl::StrCat(record.offset);
    ++counts[RecordKindName(record.kind)];
    switch (record.kind) {
      case RecordKind::kStoredTensor: {
        files::StoredTensor tensor;
        damage = ParseRecordMeta(file.reader, record, &tensor);
        if (!damage.ok()) break;
        tensor_bytes += record.payload_bytes;
        std::vector<std::string> row = {
            NamespaceCell(tensor.namespace_()), tensor.name(),
            WireDataTypeName(tensor.dtype()),   FormatShape(tensor.shape()),
            absl::StrCat(tensor.version()),     absl::StrCat(record.payload_bytes)};
        if (!file.snapshot) {
          row.insert(row.begin(), {offset, "stored"});
          row.push_back("");
        }
        rows.push_back(std::move(row));
        break;
      }
      case RecordKind::kDeletedTensor: {
        files::DeletedTensor deleted;
        damage = ParseRecordMeta(file.reader, record, &deleted);
        if (!damage.ok()) break;
        rows.push_back({offset, "deleted", NamespaceCell(deleted.namespace_()), deleted.name(), "-",
                        "-", "-", "-", ""});
        break;
      }
      case RecordKind::kUpdatedTensor: {
        files::UpdatedTensor update;
        damage = ParseRecordMeta(file.reader, record, &update);
        if (!damage.ok()) break;
        v1::OpRequest op;
        const std::string_view op_name =
            op.ParseFromString(call) ? ops::NameOfCase(op.op_case()) : "";
        rows.push_back(
            {offset, "updated", NamespaceCell(update.namespace_()), update.name(), "-", "-",
             absl::StrCat(update.from_version() + 1), "-",
             absl::StrFormat("in place by %s, from version %d",
                             op_name.empty() ? "an op call that does not parse" : op_name,
                             update.from_version())});
        break;
      }
      case RecordKind::kCancelledUpdate: {
        files::CancelledUpdate cancel;
        damage = ParseRecordMeta(file.reader, record, &cancel);
        if (!damage.ok()) break;
        rows.push_back(
            {offset, "cancelled", "-", "-", "-", "-", "-", "-",
             absl::StrFormat("the update at offset %d of log %d did not complete: never applied",
                             cancel.offset(), cancel.generation())});
        break;
      }
      case RecordKind::kRememberedChanges: {
        files::RememberedChanges changes;
        damage = ParseRecordMeta(file.reader, record, &changes);
        if (!damage.ok()) break;
        notes.push_back(absl::StrFormat(
            "remembered: %s of namespace %s, so that retries are recognised after a restart",
            Plural(changes.changes_size(), "update id"), NamespaceCell(changes.namespace_())));
        break;
      }
      case RecordKind::kSnapshotEnd:
        damage = ParseRecordMeta(file.reader, record, &end.emplace());
        break;
      case RecordKind::kFileHeader:
        damage = absl::DataLossError(absl::StrFormat(
            "%s is damaged at offset %d: a second file header", path, record.offset));
        break;
    }
    if (!damage.ok()) break;
  }
  if (rows.empty()) {
    if (damage.ok())
      text.append(file.snapshot ? "(no tensors)\n" : "(no records after the header)\n");
  } else if (file.snapshot) {
    AppendTable({"NAMESPACE", "NAME", "DTYPE", "SHAPE", "VERSION", "BYTES"}, rows, &text);
  } else {
    AppendTable(
        {"OFFSET", "KIND", "NAMESPACE", "NAME", "DTYPE", "SHAPE", "VERSION", "BYTES", "NOTE"}, rows,
        &text);
  }
  for (const std::string& note : notes) absl::StrAppend(&text, note, "\n");
  if (damage.ok() && file.snapshot) {
    if (end.has_value()) {
      absl::StrAppendFormat(&text, "end: %s, %d bytes\n", Plural(end->tensors(), "tensor"),
                            end->tensor_bytes());
    } else {
      damage = absl::DataLossError(absl::StrFormat(
          "%s is damaged at offset %d: the snapshot ends without its last record (recovery "
          "refuses it)",
          path, file.reader.torn_at().value_or(file.reader.file_size())));
    }
  } else if (damage.ok()) {
    absl::StrAppendFormat(&text, "%s: %d stored, %d deleted, %d updated, %d cancelled\n",
                          Plural(static_cast<int64_t>(rows.size()), "record"), counts["stored"],
                          counts["deleted"], counts["updated"], counts["cancelled"]);
  }
  if (damage.ok() && file.reader.torn_at().has_value()) {
    absl::StrAppendFormat(&text,
                          "torn: the last record, at offset %d, was cut off while it was written "
                          "(never acknowledged; recovery drops it)\n",
                          *file.reader.torn_at());
  }
  std::cout << text;
  if (!damage.ok()) return ReportFailure(damage);
  return 0;
}

// ExtractStoredTensor writes the last value of `name` (in --namespace) that the store file records
// to `out`, and notes on stderr what a log records of it after that value.
int ExtractStoredTensor(StoreFile& file, const std::string& name, const std::string& out) {
  const std::string& path = file.reader.path();
  const std::string ns = absl::GetFlag(FLAGS_namespace);
  // The value being read, and the last one read whole.
  std::optional<Tensor> reading;
  files::StoredTensor reading_meta;
  std::optional<Tensor> last;
  files::StoredTensor last_meta;
  // What the log records of `name` after its last value.
  std::vector<std::string> later;
  // The namespaces where the file records `name`, for the error when `ns` has none.
  std::set<std::string> namespaces;
  bool ended = false;
  // What is wrong with the stored record being read: reported once the record has passed its
  // check, so that a record that fails it is reported as such.
  absl::Status reading_problem;
  const SinkFor sink_for = [&](const Record& record) -> absl::StatusOr<PayloadSink> {
    reading.reset();
    reading_problem = absl::OkStatus();
    if (record.kind != RecordKind::kStoredTensor) return PayloadSink();
    reading_problem = ParseRecordMeta(file.reader, record, &reading_meta);
    if (!reading_problem.ok() || reading_meta.name() != name) return PayloadSink();
    namespaces.insert(reading_meta.namespace_());
    if (reading_meta.namespace_() != ns) return PayloadSink();
    absl::StatusOr<DataType> dtype =
        wire::DataTypeFromProto(reading_meta.dtype(), "store-file", "dtype");
    const Shape shape(reading_meta.shape().begin(), reading_meta.shape().end());
    absl::Status valid = dtype.status();
    if (valid.ok()) {
      valid = wire::CheckShape(*dtype, shape, "store-file", "shape", wire::DecodeLimits()).status();
    }
    if (valid.ok() && record.payload_bytes != NumElements(shape) * ItemSize(*dtype)) {
      valid = absl::InvalidArgumentError(absl::StrFormat(
          "its %d bytes are not those of %s", record.payload_bytes, DescribeTensor(*dtype, shape)));
    }
    if (!valid.ok()) {
      reading_problem =
          absl::DataLossError(absl::StrFormat("%s is damaged at offset %d: tensor \"%s\": %s", path,
                                              record.offset, name, valid.message()));
      return PayloadSink();
    }
    reading.emplace(*dtype, shape);
    return [&reading](int64_t offset, std::string_view chunk) {
      std::memcpy(static_cast<char*>(reading->data()) + offset, chunk.data(), chunk.size());
      return absl::OkStatus();
    };
  };
  while (true) {
    absl::StatusOr<std::optional<Record>> next = file.reader.Next(sink_for);
    if (!next.ok()) return ReportFailure(next.status());
    if (!next->has_value()) break;
    if (!reading_problem.ok()) return ReportFailure(reading_problem);
    const Record& record = **next;
    if (record.kind == RecordKind::kStoredTensor && reading.has_value()) {
      last = *std::move(reading);
      reading.reset();
      last_meta = reading_meta;
      later.clear();
    } else if (record.kind == RecordKind::kDeletedTensor) {
      files::DeletedTensor deleted;
      if (absl::Status parsed = ParseRecordMeta(file.reader, record, &deleted); !parsed.ok()) {
        return ReportFailure(parsed);
      }
      if (deleted.name() == name && deleted.namespace_() == ns && last.has_value()) {
        later.push_back(absl::StrFormat("deleted at offset %d", record.offset));
      }
    } else if (record.kind == RecordKind::kUpdatedTensor) {
      files::UpdatedTensor update;
      if (absl::Status parsed = ParseRecordMeta(file.reader, record, &update); !parsed.ok()) {
        return ReportFailure(parsed);
      }
      if (update.name() == name && update.namespace_() == ns && last.has_value()) {
        later.push_back(absl::StrFormat("updated in place at offset %d (to version %d)",
                                        record.offset, update.from_version() + 1));
      }
    } else if (record.kind == RecordKind::kSnapshotEnd) {
      ended = true;
    }
  }
  const bool incomplete = file.snapshot && !ended;
  if (!last.has_value()) {
    std::vector<std::string> elsewhere;
    for (const std::string& other : namespaces) {
      elsewhere.push_back(
          other.empty() ? "without a namespace: leave out --namespace"
                        : absl::StrFormat("in namespace %s: pass --namespace=%s", other, other));
    }
    return ReportFailure(absl::NotFoundError(absl::StrFormat(
        "%s records no tensor \"%s\"%s%s%s", path, name,
        ns.empty() ? "" : absl::StrCat(" in namespace ", ns),
        elsewhere.empty() ? ""
                          : absl::StrCat(" (it has one ", absl::StrJoin(elsewhere, "; one "), ")"),
        incomplete ? "; the snapshot is incomplete (it ends without its last record)" : "")));
  }
  if (absl::Status written = FileError(WriteNpy(out, last->view())); !written.ok()) {
    return ReportFailure(written);
  }
  std::cout << absl::StrFormat("wrote %s: %s, %s at version %d\n", out,
                               DescribeTensor(last->dtype(), last->shape()), name,
                               last_meta.version());
  if (!later.empty()) {
    std::cerr << absl::StrFormat(
        "note: that is the last value the log records whole; after it, \"%s\" was %s\n", name,
        absl::StrJoin(later, ", then "));
  }
  if (incomplete) {
    std::cerr << absl::StrFormat(
        "note: %s is incomplete (it ends without its last record; recovery refuses it), but "
        "this value's record is whole\n",
        path);
  }
  return 0;
}

// store-file FILE [NAME OUT.npy]: lists what a store file records, or writes NAME's last value
// in it to OUT.npy. Needs no server.
int RunStoreFile(const std::vector<std::string>& args) {
  absl::StatusOr<StoreFile> file = OpenStoreFile(args[0]);
  if (!file.ok()) return ReportFailure(file.status());
  if (args.size() == 1) return ListStoreFile(*file);
  return ExtractStoredTensor(*file, args[1], args[2]);
}

const std::vector<ServiceCommand>& ServiceCommands() {
  static const auto* const kServiceCommands = new std::vector<ServiceCommand>{
      {.name = "info",
       .summary = "print the server's ServerInfo as JSON: version, build, devices,\n"
                  "limits, ops, dtypes, and the other RPCs",
       .run = RunInfo},
      {.name = "health",
       .synopsis = "[SERVICE]",
       .summary = "the gRPC health status of SERVICE (e.g. tensorops.v1.TensorOps;\n"
                  "default the whole server); exit 0 only for SERVING",
       .max_args = 1,
       .run = RunHealth},
      {.name = "list",
       .synopsis = "[SERVICE]",
       .summary = "the services the server offers, or SERVICE's methods (reflection)",
       .max_args = 1,
       .run = RunList},
      {.name = "describe",
       .synopsis = "SYMBOL",
       .summary = "the .proto definition of a service, method, message, enum or field,\n"
                  "e.g. tensorops.v1.TensorOps.Gather (reflection)",
       .min_args = 1,
       .max_args = 1,
       .run = RunDescribe},
      {.name = "put",
       .synopsis = "NAME FILE.npy [--overwrite | --expected_version=N] [--bfloat16]",
       .summary = "store the file's tensor under NAME, for ops to use as @NAME",
       .flags = {"overwrite", "expected_version", "bfloat16"},
       .min_args = 2,
       .max_args = 2,
       .run = RunPut},
      {.name = "get",
       .synopsis = "NAME OUT.npy [--version=N]",
       .summary = "write the stored tensor NAME to OUT.npy",
       .flags = {"version"},
       .min_args = 2,
       .max_args = 2,
       .run = RunGet},
      {.name = "ls",
       .summary = "list the stored tensors: name, shape, dtype, bytes, version",
       .run = RunLs},
      {.name = "rm",
       .synopsis = "NAME [--expected_version=N]",
       .summary = "delete the stored tensor NAME",
       .flags = {"expected_version"},
       .min_args = 1,
       .max_args = 1,
       .run = RunRm},
      {.name = "stat",
       .synopsis = "NAME",
       .summary = "the stored tensor's TensorInfo as JSON",
       .min_args = 1,
       .max_args = 1,
       .run = RunStat},
      {.name = "snapshot",
       .summary = "have the server write a snapshot of its whole store to its\n"
                  "--store_dir now; print the file, its tensors, bytes, time taken",
       .run = RunSnapshot},
      {.name = "shm-register",
       .synopsis = "NAME KEY BYTE_SIZE [OFFSET]",
       .summary = "register BYTE_SIZE bytes from OFFSET of the POSIX shared-memory\n"
                  "object KEY (\"/name\") as region NAME, for calls from this host",
       .min_args = 3,
       .max_args = 4,
       .run = RunShmRegister},
      {.name = "shm-unregister",
       .synopsis = "[NAME]",
       .summary = "unregister region NAME, or every region of the caller's",
       .max_args = 1,
       .run = RunShmUnregister},
      {.name = "shm-ls", .summary = "list the caller's shared-memory regions", .run = RunShmLs},
      {.name = "store-file",
       .synopsis = "FILE [NAME OUT.npy [--namespace=NS]]",
       .summary = "list what a store snapshot or log file records (namespace, name,\n"
                  "dtype, shape, version, bytes; a log's record kinds); with NAME, write\n"
                  "the last value of NAME the file records to OUT.npy",
       .flags = {"namespace"},
       .min_args = 1,
       .max_args = 3,
       .arg_counts = {1, 3},
       .run_local = RunStoreFile},
  };
  return *kServiceCommands;
}

// RunBackward asks for the gradients of `op` for --grad_output and prints them, or writes each to
// OUT.ARGUMENT.npy for --output=OUT.npy.
int RunBackward(Client& client, const v1::OpRequest& op, const NpyReadOptions& read_options) {
  absl::StatusOr<Tensor> grad_output = ReadFlagNpy(FLAGS_grad_output, read_options);
  if (!grad_output.ok()) return ReportFailure(grad_output.status());
  absl::StatusOr<std::map<std::string, Tensor>> gradients =
      client.Backward(op, grad_output->view());
  if (!gradients.ok()) return ReportFailure(gradients.status());
  const std::string output = absl::GetFlag(FLAGS_output);
  const absl::string_view stem = absl::StripSuffix(output, ".npy");
  for (const auto& [argument, gradient] : *gradients) {
    if (output.empty()) {
      std::cout << "gradient of " << argument << ":\n" << FormatTensor(gradient);
    } else if (absl::Status written =
                   WriteResult(absl::StrCat(stem, ".", argument, ".npy"), gradient);
               !written.ok()) {
      return ReportFailure(written);
    }
  }
  return 0;
}

// RunStored runs `op` with its result kept in the store, under `store_as` or (with --in_place)
// in --input's stored tensor, and says what was stored: "stored NAME: shape=(...) dtype=...,
// version N".
int RunStored(Client& client, const std::optional<StoredTensor>& store_as, v1::OpRequest* op) {
  ops::VisitOp(
      *op,
      [&]<typename Op>(Op, const typename Op::Request&) {
        v1::ResultOptions* options = ops::Mutable<Op>(op)->mutable_result_options();
        if (store_as.has_value()) {
          options->set_store_as(store_as->name);
          options->set_overwrite(absl::GetFlag(FLAGS_overwrite));
          // --output=@NAME@VERSION replaces NAME only at that version.
          if (store_as->version.has_value()) options->set_expected_version(*store_as->version);
        }
        options->set_in_place(absl::GetFlag(FLAGS_in_place));
      },
      [] {});
  absl::StatusOr<StoredResult> stored = client.RunStored(*op);
  if (!stored.ok()) return ReportFailure(stored.status());
  std::cout << absl::StrFormat("stored %s: %s, version %d\n", stored->name,
                               DescribeTensor(stored->dtype, stored->shape), stored->version);
  return 0;
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> command_line = ParseCommandLine(argc, argv);
  if (command_line.ok() && command_line->version) {
    std::cout << absl::StrFormat("tensorops-cli %s (revision %s)\n", TENSOROPS_VERSION,
                                 TENSOROPS_GIT_REVISION);
    return 0;
  }
  if (command_line.ok()) {
    // "--help", "help": everything; "COMMAND --help", "help COMMAND": that command's help.
    std::vector<std::string> words = command_line->positional;
    const bool help_word = !words.empty() && words[0] == "help";
    if (help_word) words.erase(words.begin());
    if (command_line->help || help_word) {
      if (words.empty()) {
        std::cout << UsageText();
        return 0;
      }
      if (FindCommand(words[0]) == nullptr && FindServiceCommand(words[0]) == nullptr) {
        return UsageError(
            absl::InvalidArgumentError(absl::StrFormat(
                "no help for '%s': not a command (one of %s)", words[0], CommandNames())),
            "");
      }
      std::cout << CommandHelp(words[0]);
      return 0;
    }
  }
  absl::Status usage_status =
      command_line.ok() ? ValidateCommandLine(*command_line) : command_line.status();
  if (!usage_status.ok()) {
    // The command, when one came before the error, picks the synopsis shown.
    std::string command_name;
    if (command_line.ok() && !command_line->positional.empty()) {
      command_name = command_line->positional[0];
    } else {
      for (int i = 1; i < argc && command_name.empty(); ++i) {
        if (argv[i][0] != '-') command_name = argv[i];
      }
    }
    return UsageError(usage_status, command_name);
  }

  const std::string& command_name = command_line->positional[0];
  const ServiceCommand* service_command = FindServiceCommand(command_name);
  const std::vector<std::string> args(command_line->positional.begin() + 1,
                                      command_line->positional.end());
  if (service_command != nullptr && service_command->local()) {
    return service_command->run_local(args);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = CreateClient(command_line->given);
  if (service_command != nullptr) {
    if (!client.ok()) return ReportFailure(client.status());
    return service_command->run(**client, args);
  }
  const NpyReadOptions read_options{.uint16_as_bfloat16 = absl::GetFlag(FLAGS_bfloat16),
                                    .uint16_as_bfloat16_option = "--bfloat16"};
  std::map<std::string, StoredTensor> stored;
  const OpArgs no_input{
      .given = &command_line->given, .read_options = read_options, .stored = &stored};
  absl::StatusOr<std::optional<Tensor>> input = std::optional<Tensor>();
  if (command_line->given.contains("input")) input = no_input.Read(FLAGS_input);
  absl::StatusOr<v1::OpRequest> op = !input.ok() ? input.status()
                                                 : FindCommand(command_name)
                                                       ->build(OpArgs{.input = *std::move(input),
                                                                      .given = &command_line->given,
                                                                      .read_options = read_options,
                                                                      .stored = &stored});
  if (!client.ok()) return ReportFailure(client.status());
  if (!op.ok()) return ReportFailure(op.status());
  ReferenceStored(stored, &*op);
  if (command_line->given.contains("grad_output")) return RunBackward(**client, *op, read_options);
  absl::StatusOr<std::optional<StoredTensor>> store_as =
      ParseStored("output", absl::GetFlag(FLAGS_output));
  if (!store_as.ok()) return ReportFailure(store_as.status());
  if (store_as->has_value() || absl::GetFlag(FLAGS_in_place)) {
    return RunStored(**client, *store_as, &*op);
  }
  absl::StatusOr<Tensor> result = (*client)->Run(*op);
  if (!result.ok()) return ReportFailure(result.status());
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output.empty()) {
    std::cout << FormatTensor(*result);
  } else if (absl::Status written = WriteResult(output, *result); !written.ok()) {
    return ReportFailure(written);
  }
  return 0;
}

}  // namespace
}  // namespace tensorops

int main(int argc, char** argv) {
  const int status = tensorops::Main(argc, argv);
  // What a command printed is its answer: one that could not be written (a full disk, a closed
  // pipe) is a failure, not exit 0.
  if (!std::cout.flush()) {
    std::cerr << "error: cannot write to standard output\n";
    return status == 0 ? tensorops::kExitUsage : status;
  }
  return status;
}
