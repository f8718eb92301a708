// tensorops-cli: runs one Gather or Scatter call against a tensorops server, with tensors in NumPy
// `.npy` files.
//
//   tensorops-cli gather --input=x.npy --index=i.npy --axis=1 --output=out.npy
//   tensorops-cli scatter --input=x.npy --index=i.npy --value=2.5 --axis=0 --reduce=add
//
// Exit status: 0 on success, 1 when the call or a file fails ("error: CODE: message" on stderr),
// 2 for a bad command line (with the usage text on stderr).
#include <cstdint>
#include <iostream>
#include <iterator>
#include <optional>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/npy.h"
#include "kernels/dispatch.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/tensor.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address (host:port or a gRPC target).");
ABSL_FLAG(absl::Duration, timeout, absl::InfiniteDuration(),
          "Deadline of the call, e.g. 10s or 500ms; inf for none.");
ABSL_FLAG(std::string, input, "", "Input tensor, a .npy file (required).");
ABSL_FLAG(std::string, index, "", "Index tensor, a .npy file of int32 or int64 (required).");
ABSL_FLAG(int64_t, axis, 0, "Axis to gather or scatter along, -rank <= axis < rank (required).");
ABSL_FLAG(bool, broadcast, false,
          "Broadcast as Paddle's take_along_axis / put_along_axis do (SPEC, operations 1 and 2).");
ABSL_FLAG(std::string, src, "", "scatter: source tensor, a .npy file of input's dtype.");
ABSL_FLAG(std::string, value, "",
          "scatter: scalar source instead of --src: true/false, an integer, or a float.");
ABSL_FLAG(std::string, reduce, "assign",
          "scatter: assign|sum|prod|mean|amax|amin, or an alias add|mul|multiply|update|max|min.");
ABSL_FLAG(bool, include_self, true,
          "scatter: whether the destination's original value takes part in the reduction.");
ABSL_FLAG(bool, deterministic, false,
          "scatter: ask for bitwise reproducible floating sum/mean/prod results.");
ABSL_FLAG(std::string, output, "",
          "Write the result to this .npy file; without it, print the result to stdout.");
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

constexpr std::string_view kUsage =
    R"(usage: tensorops-cli [--target=HOST:PORT] [--timeout=DURATION] COMMAND FLAGS...

Commands:
  gather   --input=X.npy --index=I.npy --axis=N [--broadcast] [--output=OUT.npy]
  scatter  --input=X.npy --index=I.npy (--src=S.npy | --value=V) --axis=N [--reduce=R]
           [--include_self=false] [--broadcast] [--deterministic] [--output=OUT.npy]

Without --output the result's shape, dtype and values are printed. Exit status: 0 on success,
1 when the call fails, 2 for a bad command line.

Flags:
)";

// The flags both commands take, and those only scatter takes: every flag this CLI defines.
constexpr std::string_view kCommonFlags[] = {"target", "timeout",   "input",  "index",
                                             "axis",   "broadcast", "output", "bfloat16"};
constexpr std::string_view kScatterFlags[] = {"src", "value", "reduce", "include_self",
                                              "deterministic"};
// Flags every command needs; their defaults mean nothing, so the usage text leaves them out.
constexpr std::string_view kRequiredFlags[] = {"input", "index", "axis"};

// IsCliFlag tells this CLI's flags from the ones linked-in libraries may register.
bool IsCliFlag(std::string_view name) {
  return absl::c_linear_search(kCommonFlags, name) || absl::c_linear_search(kScatterFlags, name);
}

// UsageText lists the commands and the flags with their help and defaults.
std::string UsageText() {
  std::vector<std::string_view> names(std::begin(kCommonFlags), std::end(kCommonFlags));
  names.insert(names.end(), std::begin(kScatterFlags), std::end(kScatterFlags));
  absl::c_sort(names);
  std::string text(kUsage);
  for (std::string_view name : names) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
    absl::StrAppendFormat(&text, "  --%s\n      %s", name, flag->Help());
    const std::string default_value = flag->DefaultValue();
    if (!default_value.empty() && !absl::c_linear_search(kRequiredFlags, name)) {
      absl::StrAppendFormat(&text, " Default: %s.", default_value);
    }
    text.push_back('\n');
  }
  return text;
}

// CommandLine is argv after flag parsing.
struct CommandLine {
  std::vector<std::string> positional;
  // The names of the flags given explicitly.
  absl::flat_hash_set<std::string> given;
  bool help = false;
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
  return command_line;
}

// ParseValue reads --value: true/false as bool, an integer as int64, anything else as a double.
absl::StatusOr<Scalar> ParseValue(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true") return Scalar(true);
  if (lower == "false") return Scalar(false);
  int64_t integer = 0;
  if (absl::SimpleAtoi(text, &integer)) return Scalar(integer);
  double real = 0.0;
  if (absl::SimpleAtod(text, &real)) return Scalar(real);
  return absl::InvalidArgumentError(absl::StrFormat(
      "--value = '%s' is not true, false, an integer or a floating-point number", text));
}

// FormatFloat prints like NumPy: "1.", "2.5", "nan", "inf", "1e+30".
std::string FormatFloat(double value) {
  std::string text = absl::StrFormat("%g", value);
  if (text.find_first_of(".en") == std::string::npos) text.push_back('.');
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

// FormatTensor prints the shape, dtype and (for big tensors, summarized) values of `tensor`.
std::string FormatTensor(const Tensor& tensor) {
  std::string text = absl::StrFormat("shape=(%s%s) dtype=%s\n", absl::StrJoin(tensor.shape(), ", "),
                                     tensor.rank() == 1 ? "," : "", DataTypeName(tensor.dtype()));
  if (tensor.rank() == 0) {
    text.append(FormatElement(tensor, 0));
  } else {
    AppendLevel(tensor, ContiguousStrides(tensor.shape()), 0, 0, tensor.numel() > kPrintThreshold,
                &text);
  }
  text.push_back('\n');
  return text;
}

// Runs the command; returns the error to report, or the result tensor.
absl::StatusOr<Tensor> RunCommand(const std::string& command, Client& client,
                                  const NpyReadOptions& read_options) {
  absl::StatusOr<Tensor> input = ReadNpy(absl::GetFlag(FLAGS_input), read_options);
  if (!input.ok()) return input.status();
  absl::StatusOr<Tensor> index = ReadNpy(absl::GetFlag(FLAGS_index), read_options);
  if (!index.ok()) return index.status();
  const int64_t axis = absl::GetFlag(FLAGS_axis);

  if (command == "gather") {
    GatherOptions options;
    options.broadcast = absl::GetFlag(FLAGS_broadcast);
    return client.Gather(input->view(), axis, index->view(), options);
  }
  ScatterOptions options;
  // main() validated --reduce and --value before connecting.
  options.reduce = *ParseReduction(absl::GetFlag(FLAGS_reduce));
  options.include_self = absl::GetFlag(FLAGS_include_self);
  options.broadcast = absl::GetFlag(FLAGS_broadcast);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  if (!absl::GetFlag(FLAGS_src).empty()) {
    absl::StatusOr<Tensor> src = ReadNpy(absl::GetFlag(FLAGS_src), read_options);
    if (!src.ok()) return src.status();
    return client.Scatter(input->view(), axis, index->view(), src->view(), options);
  }
  return client.Scatter(input->view(), axis, index->view(), *ParseValue(absl::GetFlag(FLAGS_value)),
                        options);
}

// ValidateCommandLine checks what can be checked without files or a server: one known command,
// the required flags present, no flag of the other command, --reduce and --value well-formed.
absl::Status ValidateCommandLine(const CommandLine& command_line) {
  if (command_line.positional.size() != 1) {
    return absl::InvalidArgumentError(
        command_line.positional.empty()
            ? "missing command (gather or scatter)"
            : absl::StrFormat("expected one command, got: %s",
                              absl::StrJoin(command_line.positional, " ")));
  }
  const std::string& command = command_line.positional[0];
  if (command != "gather" && command != "scatter") {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown command '%s' (expected gather or scatter)", command));
  }
  for (const std::string& name : command_line.given) {
    if (!absl::c_linear_search(kCommonFlags, name) &&
        !(command == "scatter" && absl::c_linear_search(kScatterFlags, name))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("flag --%s does not apply to %s", name, command));
    }
  }
  for (absl::string_view required : {"input", "index", "axis"}) {
    if (!command_line.given.contains(required)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s needs --%s", command, required));
    }
  }
  if (command == "scatter") {
    if (command_line.given.contains("src") == command_line.given.contains("value")) {
      return absl::InvalidArgumentError("scatter needs exactly one of --src and --value");
    }
    const std::string reduce = absl::GetFlag(FLAGS_reduce);
    if (!ParseReduction(reduce).has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--reduce = '%s' is not one of assign, sum, prod, mean, amax, amin (or add, mul, "
          "multiply, update, max, min)",
          reduce));
    }
    if (command_line.given.contains("value")) {
      absl::Status value_status = ParseValue(absl::GetFlag(FLAGS_value)).status();
      if (!value_status.ok()) return value_status;
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> command_line = ParseCommandLine(argc, argv);
  if (command_line.ok() &&
      (command_line->help || command_line->positional == std::vector<std::string>{"help"})) {
    std::cout << UsageText();
    return 0;
  }
  absl::Status usage_status =
      command_line.ok() ? ValidateCommandLine(*command_line) : command_line.status();
  if (!usage_status.ok()) {
    std::cerr << "error: " << usage_status.message() << "\n\n" << UsageText();
    return kExitUsage;
  }

  ClientOptions client_options;
  client_options.default_timeout = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::GetFlag(FLAGS_target), client_options);
  absl::StatusOr<Tensor> result =
      client.ok() ? RunCommand(command_line->positional[0], **client,
                               NpyReadOptions{.uint16_as_bfloat16 = absl::GetFlag(FLAGS_bfloat16)})
                  : client.status();
  if (result.ok() && !absl::GetFlag(FLAGS_output).empty()) {
    if (absl::Status written = WriteNpy(absl::GetFlag(FLAGS_output), result->view());
        !written.ok()) {
      result = written;
    }
  }
  if (!result.ok()) {
    std::cerr << absl::StrFormat("error: %s: %s\n",
                                 absl::StatusCodeToString(result.status().code()),
                                 result.status().message());
    return kExitFailure;
  }
  if (absl::GetFlag(FLAGS_output).empty()) std::cout << FormatTensor(*result);
  return 0;
}

}  // namespace
}  // namespace tensorops

int main(int argc, char** argv) { return tensorops::Main(argc, argv); }
