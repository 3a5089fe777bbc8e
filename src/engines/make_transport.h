// The transport of a Config's engine (local, mpi, gloo), made by the engine's own factory.
#pragma once

#include <memory>

#include "replicator/config.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Never null; the local engine's has one process (make_local_transport). Blocks while the
// processes meet (see make_mpi_transport, make_gloo_transport); throws ConfigError for an
// engine this build lacks, and the engine's errors.
std::unique_ptr<Transport> make_transport(const Config& config);

}  // namespace replicator::detail
