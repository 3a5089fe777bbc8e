// What the environment says: the one place the library reads it.
#pragma once

namespace replicator::detail {

// The value of environment variable `name`, or null when it is not set. Read while the
// configuration is made (Config::from_env), before any thread of the library runs; nothing
// in the library sets the environment. Never blocks or throws.
const char* env(const char* name);

// Whether an MPI launcher started this process: mpirun sets OMPI_COMM_WORLD_SIZE, PMI/PMIx
// launchers PMI_SIZE or PMIX_RANK, and srun with an MPI plugin SLURM_PROCID and
// SLURM_MPI_TYPE (not "none"). Reads the environment only: makes no MPI call, never blocks
// or throws. The one place this is decided (Config::from_env, the mpi engine).
bool launched_by_mpi();

}  // namespace replicator::detail
