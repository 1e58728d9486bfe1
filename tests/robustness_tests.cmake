# Robustness: every bad input of docs/errors.md through the CLI, determinism, atomic outputs.
charm_add_test(errors_table_test SOURCES errors_table_test.cpp LIBS charm_scheduler LABELS integration TIMEOUT 900 SHARDS 2)
# The rows run under mpirun (suite Mpi/) are one more entry, labelled mpi; the shards leave them out.
foreach(i 0 1)
  set_property(TEST errors_table_test/${i} APPEND PROPERTY ENVIRONMENT "GTEST_FILTER=-Mpi/*")
endforeach()
# Under LeakSanitizer every child process pays its leak scan at exit: 0.41 s an error case against 0.23 s
# without it (measured 2026-12-05), over 600 cases. An error case ends through exit(2) by design, so
# the scan has nothing of ours to find there; the table keeps ASan and UBSan, the other suites LSan too.
if(CHARM_SANITIZE MATCHES address)
  foreach(i 0 1)
    set_property(TEST errors_table_test/${i} APPEND PROPERTY ENVIRONMENT
                 "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0")
  endforeach()
endif()
set(_charm_errors_mpirun "")
if(CHARM_HAVE_MPI)
  set(_charm_errors_mpirun "${MPIEXEC_EXECUTABLE}")
  if(NOT _charm_errors_mpirun)
    find_program(_charm_errors_mpirun NAMES mpirun mpiexec)
  endif()
  add_test(NAME errors_table_test/mpi COMMAND errors_table_test --gtest_filter=Mpi/*)
  math(EXPR _charm_errors_mpi_timeout "300 * ${CHARM_TEST_TIMEOUT_SCALE}")
  set_tests_properties(errors_table_test/mpi PROPERTIES LABELS mpi TIMEOUT ${_charm_errors_mpi_timeout} COST 60)
endif()
target_compile_definitions(errors_table_test PRIVATE CHARM_MPIRUN="${_charm_errors_mpirun}")
# The rows are discovered from docs/errors.md at build time: editing the table rebuilds the test.
set_property(SOURCE errors_table_test.cpp APPEND PROPERTY OBJECT_DEPENDS ${PROJECT_SOURCE_DIR}/docs/errors.md)
charm_add_test(determinism_test SOURCES determinism_test.cpp LABELS integration TIMEOUT 600)
charm_add_test(output_files_test SOURCES output_files_test.cpp LIBS charm_cli_common LABELS unit TIMEOUT 300)
charm_add_test(reliability_test SOURCES reliability_test.cpp LIBS charm_cli_common LABELS integration TIMEOUT 600)
# A library charm's processes load first (LD_PRELOAD) that flushes stdout as the process exits.
add_library(stdout_probe SHARED stdout_probe.cpp)
target_link_libraries(stdout_probe PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(reliability_test stdout_probe)
target_compile_definitions(reliability_test PRIVATE CHARM_STDOUT_PROBE="$<TARGET_FILE:stdout_probe>")
