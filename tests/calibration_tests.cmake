# charm calibrate: the measurements and nccl-tests readers, the bounds registry, a fit that
# recovers parameters from the simulator's own times, and the command line.
charm_add_test(calibration_test SOURCES calibration_test.cpp calibration_inputs_test.cpp LIBS charm::calibrate charm::evaluate charm::scheduler LABELS unit TIMEOUT 300 NO_CLI)
charm_compile_together(calibration_test calibration_test calibration_test.cpp calibration_inputs_test.cpp)
charm_add_test(calibration_cli_test SOURCES calibration_cli_test.cpp LIBS nlohmann_json::nlohmann_json LABELS integration TIMEOUT 300)
