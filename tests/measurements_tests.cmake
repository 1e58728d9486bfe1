# The measurements file's writer (charm run --append-measurements) against its reader.
charm_add_test(measurements_test SOURCES measurements_test.cpp LIBS charm::measurements LABELS unit TIMEOUT 60)
