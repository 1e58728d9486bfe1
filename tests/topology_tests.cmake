# Topology loader, generators, routes and error messages.
charm_add_test(topology_test SOURCES topology_test.cpp LIBS charm::topology LABELS unit TIMEOUT 60)
# Route selection (by link kind, never by the numbers), route overrides, `charm topo --routes/--route`.
charm_add_test(routes_test SOURCES routes_test.cpp LIBS charm::topology charm::studies charm::scheduler LABELS unit TIMEOUT 300)
