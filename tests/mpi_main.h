// tests/mpi_main.h — the main of a GoogleTest binary run under mpirun: MPI initialized once, timings printed
// by rank 0 only, and one exit status every rank agrees on (a failure on any rank fails them all).
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include "comms/process_group.h"

namespace titan::testing {
inline int run_mpi_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  comms::init(&argc, &argv);
  if (comms::world_rank() != 0) ::testing::GTEST_FLAG(print_time) = false;
  int rc = RUN_ALL_TESTS();
  int any = rc;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, comms::world_comm());
  comms::finalize();
  return any;
}
}  // namespace titan::testing
