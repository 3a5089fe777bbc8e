// The transport of a Config's engine (local, mpi, gloo), made by the engine's own factory.
#pragma once

#include <memory>

#include "replicator/config.h"
#include "replicator/rendezvous/key_value.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Never null; the local engine's has one process (make_local_transport). Blocks while the
// processes meet (see make_mpi_transport, make_gloo_transport); throws ConfigError for an
// engine this build lacks, and the engine's errors.
// With `meeting`, the gloo engine's processes meet in it instead of config.gloo.store (any other
// engine is an InvalidArgument).
std::unique_ptr<Transport> make_transport(
    const Config& config, std::shared_ptr<rendezvous::KeyValueStore> meeting = nullptr);

}  // namespace replicator::detail
