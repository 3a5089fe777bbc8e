#include "src/engines/make_transport.h"

#include <string>

#include "replicator/errors.h"
#include "src/engines/local/local_transport.h"
#if defined(REPLICATOR_HAVE_MPI)
#include "src/engines/mpi/mpi_transport.h"
#endif
#if defined(REPLICATOR_HAVE_GLOO)
#include "src/engines/gloo/gloo_transport.h"
#endif

namespace replicator::detail {

std::unique_ptr<Transport> make_transport(const Config& config,
                                          std::shared_ptr<rendezvous::KeyValueStore> meeting) {
  if (meeting && config.engine != Engine::kGloo) {
    throw InvalidArgument(
        "a store of the caller's to meet in works with the gloo engine only, "
        "not " +
        std::string(to_string(config.engine)));
  }
  switch (config.engine) {
    case Engine::kLocal:
      return make_local_transport({.lanes = config.local_replicas});
    case Engine::kMpi:
#if defined(REPLICATOR_HAVE_MPI)
      return make_mpi_transport(
          {.lanes = config.local_replicas, .shared_memory = config.transport.shared_memory});
#else
      break;
#endif
    case Engine::kGloo:
#if defined(REPLICATOR_HAVE_GLOO)
      return make_gloo_transport({.rank = config.gloo.rank,
                                  .size = config.gloo.world_size,
                                  .store = config.gloo.store,
                                  .meeting = std::move(meeting),
                                  .host = config.gloo.host,
                                  .job = config.gloo.job,
                                  .lanes = config.local_replicas,
                                  .timeout = config.timeout,
                                  .heartbeat = config.elastic.heartbeat,
                                  .heartbeat_store = config.elastic.heartbeat_store,
                                  .shared_memory = config.transport.shared_memory,
                                  .spin = config.spin});
#else
      break;
#endif
  }
  throw ConfigError("engine " + std::string(to_string(config.engine)) +
                    " is not part of this build");
}

}  // namespace replicator::detail
