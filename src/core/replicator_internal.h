// Internal access to a Replicator's engine, for the benchmarks that compare our
// collectives with the engine's own (MPI_Allreduce, gloo::allreduce) in the same run.
#pragma once

#include "replicator/replicator.h"
#include "src/engines/transport.h"

namespace replicator::detail {

struct ReplicatorInternals {
  // The transport between processes; null for the local engine or a one-process job.
  static Transport* transport(Replicator& repl) { return repl.transport_.get(); }
};

}  // namespace replicator::detail
