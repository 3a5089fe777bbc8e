// NativeCollectives: an engine's own collectives (MPI_Allreduce, gloo::allreduce). The
// benchmarks run them beside ours in the same job; the all-reduce across processes uses the
// engine's own where it gives the same bits as ours and the chooser expects it to be faster
// (src/collectives/plan.h). The mpi and gloo transports implement it next to Transport; what
// it takes is data on their traits (TransportTraits::native_sum_dtypes).
#pragma once

#include <cstddef>

#include "replicator/dtype.h"
#include "replicator/errors.h"
#include "src/engines/transport.h"

namespace replicator::detail {

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // The engine's own all-reduce of f32 sums over every process, on lane 0. Blocks; throws
  // as Transport::exchange (Timeout, PeerLost, Aborted).
  virtual void native_all_reduce_f32(float* data, std::size_t count) = 0;

  // The engine's own all-reduce of `count` elements of `dtype` at `data`, in place, over
  // every process, on lane `lane` (one thread per lane at a time, as Transport). Every process
  // must call it with the same count, dtype and op: the caller checks that first (frames).
  // Blocks until every process has called it. The engine cannot cancel it: if it is still
  // running at `deadline`, the transport is poisoned and the whole job is ended (what was
  // awaited is said once on stderr), as a failure a peer may not survive ends it at exit.
  // Throws InvalidArgument unless `op` is kSum and traits().native_sums(dtype), Aborted if the
  // transport is poisoned, Error if the engine reports a failure.
  virtual void native_all_reduce(int lane, void* data, std::size_t count, DType dtype, ReduceOp op,
                                 Transport::Clock::time_point deadline) = 0;
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
