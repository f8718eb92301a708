// The server's command line: Abseil's flag registry parsed without absl::ParseCommandLine, which
// exits with status 1 for every problem (an unknown flag, a value that does not parse, --help) and
// ignores positional arguments. Here each problem is a status for `main` to report as a usage
// error (exit 2), --help and --version are facts for `main` to act on, and the help lists the
// flags in groups instead of by source file.
//
//   const std::vector<FlagGroup> groups = {{"Network", {"host", "port"}}, ...};
//   absl::StatusOr<ParsedCommandLine> parsed = ParseCommandLine(args, groups);
//   if (!parsed.ok()) return UsageError(parsed.status());
//   if (parsed->help) std::cout << FlagsHelp(groups);
#ifndef TENSOROPS_SERVER_CONFIG_COMMAND_LINE_H_
#define TENSOROPS_SERVER_CONFIG_COMMAND_LINE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorops {

// FlagGroup is one heading of the help and the flags (registered with ABSL_FLAG, named without
// dashes) listed under it.
struct FlagGroup {
  std::string_view title;
  std::vector<std::string_view> flags;
};

// ParsedCommandLine is what ParseCommandLine found besides the flags' values.
struct ParsedCommandLine {
  // --help, -h or --helpfull was given: print FlagsHelp and exit 0.
  bool help = false;
  // --version was given: print the version and exit 0.
  bool version = false;
};

// ParseCommandLine sets the flags `args` (argv without the program name) name: "--name=value",
// "--name value", "--name" and "--noname" for booleans, with one or two dashes. "--flagfile=FILE"
// (several FILEs separated by commas) reads more arguments from each FILE, one per line with the
// whitespace around it stripped, skipping empty lines and lines that start with '#', as Abseil's
// --flagfile does; a flagfile may name further flagfiles. Only the flags of `groups` are known.
// Once --help or --version is seen the rest is not looked at.
//
// Returns INVALID_ARGUMENT, naming the argument, for an unknown flag, a flag without its value, a
// value the flag's type does not parse (with the type's own reason, e.g. the choices of an enum),
// a positional argument (this server takes none) and a flagfile that cannot be read (naming its
// path), or one that includes itself. Flags set before the error keep their new values.
absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                                   const std::vector<FlagGroup>& groups);

// FlagsHelp lists the flags of `groups`, group by group: each flag's name, default and help text,
// wrapped to 100 columns. A name that is not a registered flag is left out.
std::string FlagsHelp(const std::vector<FlagGroup>& groups);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CONFIG_COMMAND_LINE_H_
