// What the learners' layout programs (learner_digest, d4pg_digest) share: a digest of the
// parameters' bits, and the check and line that tests/rl/learner_layouts.sh compares.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "replicator/replicator.h"

namespace replicator::rl::testing {

// FNV-1a of the floats' bytes.
inline std::int64_t digest(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return static_cast<std::int64_t>(h);
}

// Checks that every replica of the job ended with the same digest and prints
// "digest R=<R> <hex>" from the process of replica 0; returns main's exit status (1 when
// the replicas differ).
inline int report(Replicator& repl, const PerReplica<std::int64_t>& digests) {
  const auto lo = repl.reduce(ReduceOp::kMin, digests);
  const auto hi = repl.reduce(ReduceOp::kMax, digests);
  if (lo != hi) {
    std::fprintf(stderr, "replicas ended with different parameters\n");
    return 1;
  }
  if (repl.run([](ReplicaContext& ctx) { return ctx.replica_id(); })[0] == 0) {
    std::printf("digest R=%d %016llx\n", repl.num_replicas(),
                static_cast<unsigned long long>(digests[0]));
  }
  return 0;
}

}  // namespace replicator::rl::testing
