# Backend mpi end to end under mpirun (label mpi). Skips when mpirun is absent.
if(CHARM_HAVE_MPI)
  charm_add_test(mpi_run_test SOURCES mpi_run_test.cpp LIBS nlohmann_json::nlohmann_json LABELS mpi TIMEOUT 600)
  set(_charm_mpirun "${MPIEXEC_EXECUTABLE}")
  if(NOT _charm_mpirun)
    find_program(_charm_mpirun NAMES mpirun mpiexec)
  endif()
  target_compile_definitions(mpi_run_test PRIVATE CHARM_MPIRUN="${_charm_mpirun}")
endif()
# Sweeps spread over mpirun processes (label mpi).
if(CHARM_HAVE_MPI)
  charm_add_test(mpi_sweep_test SOURCES mpi_sweep_test.cpp LABELS mpi TIMEOUT 600)
  target_compile_definitions(mpi_sweep_test PRIVATE CHARM_MPIRUN="${_charm_mpirun}")
endif()
