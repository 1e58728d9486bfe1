# GPU executor tests (runtime/cuda). Host-only pieces (layout,
# timeline) are `unit` and run everywhere; kernel and executor tests are `gpu`
# and GTEST_SKIP() when cudaGetDeviceCount finds no device; the CLI test is
# `integration`: without a device it checks the one-line exit 2.
if(TARGET charm_runtime_cuda)
  charm_add_test(cuda_host_test SOURCES cuda_host_test.cpp LIBS charm::runtime_cuda charm::scheduler LABELS unit TIMEOUT 60)
  charm_add_test(cuda_kernels_test SOURCES cuda_kernels_test.cpp LIBS charm::runtime_cuda LABELS gpu TIMEOUT 300)
  charm_add_test(cuda_local_test SOURCES cuda_local_test.cpp LIBS charm::runtime_cuda charm::scheduler LABELS gpu TIMEOUT 600)
  charm_add_test(cuda_cli_test SOURCES cuda_cli_test.cpp LIBS charm::runtime_cuda nlohmann_json::nlohmann_json
                 LABELS integration TIMEOUT 300)
endif()
