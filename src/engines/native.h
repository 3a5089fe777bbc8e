// NativeCollectives: an engine's own collectives (MPI_Allreduce, gloo::allreduce), which the
// benchmarks run beside ours in the same job. The mpi and gloo transports implement it
// next to Transport; nothing in the library uses it.
#pragma once

#include <cstddef>

#include "replicator/errors.h"
#include "src/engines/transport.h"

namespace replicator::detail {

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // The engine's own all-reduce of f32 sums over every process, on lane 0. Blocks; throws
  // as Transport::exchange (Timeout, PeerLost, Aborted).
  virtual void native_all_reduce_f32(float* data, std::size_t count) = 0;
};

// The engine's own collectives of `transport`; throws InvalidArgument if it has none.
inline NativeCollectives& native_of(Transport& transport) {
  auto* native = dynamic_cast<NativeCollectives*>(&transport);
  if (native == nullptr) {
    throw InvalidArgument(std::string(transport.name()) + " has no collectives of its own");
  }
  return *native;
}

}  // namespace replicator::detail
