// MpiOptions: how make_mpi_transport (mpi_transport.h) makes the transport of a job
// launched by mpirun or srun. A plain struct with defaults, for designated initializers:
//   make_mpi_transport({.lanes = 4, .shared_memory = false})
#pragma once

#include <cstddef>

namespace replicator::detail {

// The default `max_message_bytes`: 1 GiB.
inline constexpr std::size_t kMpiMaxMessage = std::size_t{1} << 30;

struct MpiOptions {
  // Lanes of the transport (one per local replica); every process must ask for the same.
  int lanes = 1;
  // Every message longer than this is carried as several MPI messages (MPI counts are ints;
  // clamped to 1 .. INT_MAX). Smaller values are for tests.
  std::size_t max_message_bytes = kMpiMaxMessage;
  // Where every process runs on one host (ShmMesh::host_identity), the messages that half a
  // ring holds go through shared memory instead of MPI (see mpi_transport.h).
  bool shared_memory = true;
};

}  // namespace replicator::detail
