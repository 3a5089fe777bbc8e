// Call: one collective call of one replica, type-erased (bytes + dtype), as the runtime
// hands it to the communicator. `kind` indexes the collectives' table
// (src/collectives/table.h); the communicator itself never interprets it.
#pragma once

#include <cstdint>
#include <span>

#include "replicator/call_site.h"
#include "replicator/dtype.h"
#include "replicator/options.h"

namespace replicator::detail {

struct Call {
  std::uint8_t kind = 0;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::span<const Buffer> buffers;  // in-place collectives (all_reduce, broadcast)
  Buffer input;                     // the others
  Buffer output;
  std::span<const PermutePair> pairs;
  Deadline timeout;
  std::uint64_t signature = 0;  // compared across replicas with the rest of the call
  CallSite where;               // the caller's line, for messages (never compared)
};

}  // namespace replicator::detail
