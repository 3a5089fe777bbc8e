// Options of the collectives (ReplicaContext): plain structs with defaults, filled with
// designated initializers, e.g. `ctx.all_reduce(g, {.op = ReduceOp::kMean})`. Nothing here
// blocks or throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

#include "replicator/dtype.h"

namespace replicator {

using Deadline = std::optional<std::chrono::milliseconds>;  // empty: Config::timeout

struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Deadline timeout;
  // Optional tag every replica must pass equal, e.g. a hash of tensor shapes that the
  // element count alone does not pin down; replicas that differ get CollectiveMismatch.
  std::uint64_t signature = 0;
};

// Options of the collectives with a root replica (broadcast, gather).
struct RootOptions {
  int root = 0;  // global replica id that sends (broadcast) or receives (gather)
  Deadline timeout;
  std::uint64_t signature = 0;  // as ReduceOptions::signature
};
using BroadcastOptions = RootOptions;
using GatherOptions = RootOptions;

struct CollectiveOptions {
  Deadline timeout;
  std::uint64_t signature = 0;  // as ReduceOptions::signature
};

// A (source, destination) pair of global replica ids for permute.
using PermutePair = std::pair<int, int>;

}  // namespace replicator
