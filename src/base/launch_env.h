// What the environment says about how this process was started.
#pragma once

namespace replicator::detail {

// Whether an MPI launcher started this process: mpirun sets OMPI_COMM_WORLD_SIZE, PMI/PMIx
// launchers PMI_SIZE or PMIX_RANK, and srun with an MPI plugin SLURM_PROCID and
// SLURM_MPI_TYPE (not "none"). Reads the environment only: makes no MPI call, never blocks
// or throws. The one place this is decided (Config::from_env, the mpi engine).
bool launched_by_mpi();

}  // namespace replicator::detail
