# Topology loader, generators, routes and error messages.
charm_add_test(topology_test SOURCES topology_test.cpp LIBS charm::topology LABELS unit TIMEOUT 60)
