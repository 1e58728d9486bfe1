// `charm --version`. The only source that sees the build's version, commit and type, so that a
// new commit recompiles this file alone.
#include <fmt/format.h>

#include <string>

namespace charm::cli {

std::string version_text() {
  return fmt::format("charm {} (commit {}, {} build, CUDA backend {})", CHARM_VERSION, CHARM_GIT_COMMIT,
                     CHARM_BUILD_TYPE,
#ifdef CHARM_CLI_HAVE_CUDA
                     "built"
#else
                     "not built"
#endif
  );
}

}  // namespace charm::cli
