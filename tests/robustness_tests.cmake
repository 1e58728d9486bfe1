# Robustness: every bad input of docs/errors.md through the CLI, determinism, atomic outputs.
charm_add_test(errors_table_test SOURCES errors_table_test.cpp LABELS integration TIMEOUT 900 SHARDS 2)
# The rows are discovered from docs/errors.md at build time: editing the table rebuilds the test.
set_property(SOURCE errors_table_test.cpp APPEND PROPERTY OBJECT_DEPENDS ${PROJECT_SOURCE_DIR}/docs/errors.md)
charm_add_test(determinism_test SOURCES determinism_test.cpp LABELS integration TIMEOUT 600)
charm_add_test(output_files_test SOURCES output_files_test.cpp LIBS charm_cli_common LABELS unit TIMEOUT 300)
