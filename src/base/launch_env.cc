#include "src/base/launch_env.h"

#include <cstdlib>
#include <string_view>

namespace replicator::detail {
namespace {

bool has_env(const char* name) {
  const char* value = env(name);
  return value != nullptr && *value != '\0';
}

}  // namespace

const char* env(const char* name) {
  // getenv races only with setenv, which the library never calls.
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
}

bool launched_by_mpi() {
  if (has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMI_SIZE") || has_env("PMIX_RANK")) return true;
  // srun starts MPI programs through the PMI plugin it names in SLURM_MPI_TYPE.
  const char* type = env("SLURM_MPI_TYPE");
  return has_env("SLURM_PROCID") && type != nullptr && *type != '\0' &&
         std::string_view(type) != "none";
}

}  // namespace replicator::detail
