// BuildInfo: what this binary is (version, git revision, build type, compiler), as CMake saw the
// tree at configure time. The server's --version and the tensorops_build_info metric read it from
// here.
//
//   const BuildInfo& build = ThisBuild();
//   std::printf("%s (rev %s)\n", build.version.c_str(), build.revision.c_str());
#ifndef TENSOROPS_SERVER_OBSERVABILITY_BUILD_INFO_H_
#define TENSOROPS_SERVER_OBSERVABILITY_BUILD_INFO_H_

#include <string>

namespace tensorops {

// BuildInfo describes the build; a field CMake did not pass is "unknown".
struct BuildInfo {
  // The project's version (CMake's PROJECT_VERSION), e.g. "0.1.0".
  std::string version;
  // `git rev-parse --short=12 HEAD` when CMake was last configured; "unknown" outside a checkout.
  // A commit made since without re-running CMake is not reflected.
  std::string revision;
  // CMAKE_BUILD_TYPE: "Release", "Debug", "RelWithDebInfo" (empty when none was set).
  std::string build_type;
  // Compiler id and version, e.g. "GNU 12.2.0".
  std::string compiler;
};

// ThisBuild returns the build this binary came from. Never fails.
const BuildInfo& ThisBuild();

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_OBSERVABILITY_BUILD_INFO_H_
