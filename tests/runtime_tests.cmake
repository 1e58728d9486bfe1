# Runtime (CPU executor) tests: kernels against the fp64 reference, the
# acceptance grid of every planner through the threads backend, region buffers
# (the region copy, hand-built Ulysses/TASP-style plans, rule violations), and the CLI.
charm_add_test(runtime_kernels_test SOURCES runtime_kernels_test.cpp LIBS charm::runtime LABELS unit TIMEOUT 120 NO_CLI)
charm_add_test(runtime_grid_test SOURCES runtime_grid_test.cpp LIBS charm::runtime charm::scheduler LABELS unit TIMEOUT 1200 SHARDS 4 NO_CLI)
charm_add_test(runtime_cli_test SOURCES runtime_cli_test.cpp LIBS nlohmann_json::nlohmann_json LABELS integration TIMEOUT 600)
charm_add_test(runtime_region_test SOURCES runtime_region_test.cpp runtime_region_plans_test.cpp LIBS charm::runtime charm::scheduler LABELS unit TIMEOUT 600)
charm_compile_together(runtime_region_test runtime_region_test runtime_region_test.cpp runtime_region_plans_test.cpp)
# Packed documents and sliding windows: pair counts, and planners exact against the masked reference.
charm_add_test(runtime_mask_test SOURCES runtime_mask_test.cpp LIBS charm::runtime charm::scheduler LABELS unit TIMEOUT 300)
