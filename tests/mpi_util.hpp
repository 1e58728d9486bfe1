#pragma once
// Running charm under mpirun from a test: the launcher's environment for CI (root, 2 cores,
// a container), a session directory per test process, and the output and exit code.
// CI runs as root on 2 cores: run-as-root and oversubscription are enabled through OpenMPI's
// environment variables, and CMA single-copy is off (it needs ptrace rights that containers
// usually lack).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace charm_test_mpi {

struct Result {
  int code = -1;
  std::string out;
};

inline bool have_mpirun() { return std::string(CHARM_MPIRUN).size() > 0 && std::filesystem::exists(CHARM_MPIRUN); }

inline Result shell(const std::string& cmd);

inline Result mpirun(int np, const std::string& args) {
  return shell(std::string("timeout 240 ") + CHARM_MPIRUN + " --oversubscribe -np " + std::to_string(np) + " " +
               CHARM_BIN + " " + args);
}

inline Result shell(const std::string& command) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  // A session directory of this process's own: another test's mpirun finishing at the same moment
  // removes the shared one's top folder while this one creates its job's (ORTE_ERROR_LOG in session_dir.c).
  static const std::string session = [] {
    const std::string d = charm::test::temp_path("ompi");  // removed with the test's scratch directory
    std::filesystem::create_directories(d);
    return d;
  }();
  ::setenv("OMPI_MCA_orte_tmpdir_base", session.c_str(), 1);
  auto r = charm::test::run_cmd(command);
  return {r.code, std::move(r.out)};
}

}  // namespace charm_test_mpi
