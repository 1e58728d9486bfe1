#pragma once
// The communicators of an MpiContext (internal to runtime/mpi_*.cpp: it includes mpi.h).
// MPI_Comm handles are pointers in Open MPI and integers in MPICH, so they stay out of the
// public header.

#include <mpi.h>

#include "runtime/mpi_context.hpp"

namespace charm::rt {

struct MpiContext::Comms {
  MPI_Comm comm = MPI_COMM_NULL;  // the plan's messages, the collectives, a sweep's task queue
  MPI_Comm hb = MPI_COMM_NULL;    // the heartbeat
};

}  // namespace charm::rt
