#include "server/observability/build_info.h"

#ifndef TENSOROPS_VERSION
#define TENSOROPS_VERSION "unknown"
#endif
#ifndef TENSOROPS_GIT_REVISION
#define TENSOROPS_GIT_REVISION "unknown"
#endif
#ifndef TENSOROPS_BUILD_TYPE
#define TENSOROPS_BUILD_TYPE "unknown"
#endif
#ifndef TENSOROPS_COMPILER
#define TENSOROPS_COMPILER "unknown"
#endif

namespace tensorops {

const BuildInfo& ThisBuild() {
  static const auto* const kBuild = new BuildInfo{.version = TENSOROPS_VERSION,
                                                  .revision = TENSOROPS_GIT_REVISION,
                                                  .build_type = TENSOROPS_BUILD_TYPE,
                                                  .compiler = TENSOROPS_COMPILER};
  return *kBuild;
}

}  // namespace tensorops
