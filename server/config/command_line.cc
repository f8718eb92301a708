#include "server/config/command_line.h"

#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tensorops {
namespace {

// Width the help text is wrapped to, and the indent of a flag's description.
constexpr size_t kHelpWidth = 100;
constexpr size_t kHelpIndent = 6;

// Parser walks the arguments of the command line and of the flagfiles it names.
class Parser {
 public:
  explicit Parser(const std::vector<FlagGroup>& groups) : groups_(groups) {}

  // Parse handles `args`, read from `source` ("" for the command line, else a flagfile's path).
  absl::Status Parse(const std::vector<std::string>& args, const std::string& source) {
    for (size_t i = 0; i < args.size() && !done(); ++i) {
      absl::string_view arg = args[i];
      absl::string_view body = arg;
      if (arg == "--" || !(absl::ConsumePrefix(&body, "--") || absl::ConsumePrefix(&body, "-")) ||
          body.empty()) {
        return Error(source, absl::StrFormat("unexpected argument '%s': tensorops-server takes "
                                             "flags only (--name=value)",
                                             arg));
      }
      absl::string_view name = body;
      std::optional<std::string> value;
      if (const size_t equals = body.find('='); equals != absl::string_view::npos) {
        name = body.substr(0, equals);
        value = std::string(body.substr(equals + 1));
      }
      if (name == "help" || name == "h" || name == "helpfull") {
        result_.help = true;
        return absl::OkStatus();
      }
      if (name == "version") {
        result_.version = true;
        return absl::OkStatus();
      }
      const bool flagfile = name == "flagfile";
      absl::CommandLineFlag* flag = flagfile ? nullptr : Find(name);
      if (!flagfile && flag == nullptr && !value.has_value()) {
        // --noNAME turns a boolean flag off.
        absl::string_view negated = name;
        if (absl::ConsumePrefix(&negated, "no")) {
          flag = Find(negated);
          if (flag != nullptr && flag->IsOfType<bool>()) {
            name = negated;
            value = "false";
          } else {
            flag = nullptr;
          }
        }
      }
      if (!flagfile && flag == nullptr) {
        return Error(source, absl::StrFormat("unknown flag '%s' (see --help)", arg));
      }
      if (!value.has_value()) {
        if (flag != nullptr && flag->IsOfType<bool>()) {
          value = "true";
        } else if (i + 1 < args.size()) {
          value = args[++i];
        } else {
          return Error(source, absl::StrFormat("flag --%s needs a value", name));
        }
      }
      if (flagfile) {
        for (absl::string_view path : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
          if (absl::Status read = ParseFlagfile(std::string(path)); !read.ok()) return read;
        }
        continue;
      }
      std::string error;
      if (!flag->ParseFrom(*value, &error)) {
        return Error(source, absl::StrFormat("--%s=%s does not parse: %s", name, *value, error));
      }
    }
    return absl::OkStatus();
  }

  const ParsedCommandLine& result() const { return result_; }

 private:
  bool done() const { return result_.help || result_.version; }

  // Find returns the registered flag `name` when a group lists it, else null.
  absl::CommandLineFlag* Find(absl::string_view name) const {
    const bool listed = absl::c_any_of(groups_, [&](const FlagGroup& group) {
      return absl::c_any_of(group.flags, [&](std::string_view flag) {
        return absl::string_view(flag.data(), flag.size()) == name;
      });
    });
    return listed ? absl::FindCommandLineFlag(name) : nullptr;
  }

  // ParseFlagfile parses the arguments of the flagfile at `path`, one per line.
  absl::Status ParseFlagfile(const std::string& path) {
    if (absl::c_linear_search(open_flagfiles_, path)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--flagfile=%s includes itself (through %s)", path,
                          absl::StrJoin(open_flagfiles_, ", ")));
    }
    std::ifstream file(path);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--flagfile=%s cannot be read: no such file, or no permission", path));
    }
    std::vector<std::string> args;
    for (std::string line; std::getline(file, line);) {
      absl::string_view arg = absl::StripAsciiWhitespace(line);
      if (!arg.empty() && arg.front() != '#') args.emplace_back(arg);
    }
    if (file.bad()) {
      return absl::InvalidArgumentError(absl::StrFormat("--flagfile=%s cannot be read", path));
    }
    open_flagfiles_.push_back(path);
    absl::Status parsed = Parse(args, path);
    open_flagfiles_.pop_back();
    return parsed;
  }

  // Error is INVALID_ARGUMENT with `message`, naming the flagfile it came from.
  static absl::Status Error(const std::string& source, const std::string& message) {
    return absl::InvalidArgumentError(
        source.empty() ? message : absl::StrFormat("%s (in --flagfile=%s)", message, source));
  }

  const std::vector<FlagGroup>& groups_;
  ParsedCommandLine result_;
  // The flagfiles being read, outermost first.
  std::vector<std::string> open_flagfiles_;
};

// AppendWrapped appends `text` to `out`, wrapped at kHelpWidth and indented by kHelpIndent.
void AppendWrapped(absl::string_view text, std::string* out) {
  const std::string indent(kHelpIndent, ' ');
  size_t column = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > 0 && column + 1 + word.size() > kHelpWidth) {
      out->push_back('\n');
      column = 0;
    }
    if (column == 0) {
      out->append(indent);
      column = indent.size();
    } else {
      out->push_back(' ');
      ++column;
    }
    absl::StrAppendFormat(out, "%s", word);
    column += word.size();
  }
  out->push_back('\n');
}

}  // namespace

absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                                   const std::vector<FlagGroup>& groups) {
  Parser parser(groups);
  if (absl::Status parsed = parser.Parse(args, ""); !parsed.ok()) return parsed;
  return parser.result();
}

std::string FlagsHelp(const std::vector<FlagGroup>& groups) {
  std::string text;
  for (const FlagGroup& group : groups) {
    absl::StrAppendFormat(&text, "\n%s:\n", group.title);
    for (std::string_view name : group.flags) {
      const absl::CommandLineFlag* flag =
          absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
      if (flag == nullptr) continue;
      const std::string default_value = flag->DefaultValue();
      absl::StrAppendFormat(&text, "  --%s%s\n", absl::string_view(name.data(), name.size()),
                            default_value.empty() ? "" : absl::StrCat("=", default_value));
      AppendWrapped(flag->Help(), &text);
    }
  }
  return text;
}

}  // namespace tensorops
