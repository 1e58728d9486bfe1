# Tests of the IR, GenerateCommList, the planners and the validator.
charm_add_test(ir_test SOURCES ir_test.cpp LIBS charm::scheduler)
charm_add_test(comm_list_test SOURCES comm_list_test.cpp LIBS charm::scheduler)
charm_add_test(parallel_for_test SOURCES parallel_for_test.cpp LIBS charm::support NO_CLI)
charm_add_test(planners_test SOURCES planners_test.cpp LIBS charm::scheduler TIMEOUT 600 SHARDS 2)
charm_add_test(validator_test SOURCES validator_test.cpp LIBS charm::scheduler nlohmann_json::nlohmann_json TIMEOUT 300)
charm_add_test(validator_region_test SOURCES validator_region_test.cpp validator_region_planners_test.cpp LIBS charm::scheduler TIMEOUT 300)
charm_add_test(cell_store_test SOURCES cell_store_test.cpp LIBS charm::scheduler)
charm_add_test(cli_plan_test SOURCES cli_plan_test.cpp LIBS charm::scheduler LABELS integration)
charm_add_test(symmetry_test SOURCES symmetry_test.cpp LIBS charm::scheduler TIMEOUT 300)
# Chakra execution traces, read back by the test's own wire decoder (where protobuf is found).
if(TARGET charm_chakra)
  charm_add_test(chakra_test SOURCES chakra_test.cpp LIBS charm::chakra charm::scheduler)
endif()
