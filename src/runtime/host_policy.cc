#include "src/runtime/host_policy.h"

#include <algorithm>

namespace replicator::detail {

HostPolicy host_policy(int local_replicas, int host_processes, unsigned cores,
                       std::chrono::microseconds spin) {
  const unsigned usable = std::max(1u, cores);
  const auto threads =
      static_cast<unsigned>(local_replicas) * static_cast<unsigned>(std::max(1, host_processes));
  HostPolicy policy;
  policy.oversubscribed = threads > usable;
  policy.collective_spin = policy.oversubscribed ? std::chrono::microseconds(0) : spin;
  // Every process of the host has a driving thread besides its replicas.
  const auto drivers = static_cast<unsigned>(std::max(1, host_processes));
  policy.step_spin =
      threads + drivers <= usable ? policy.collective_spin : std::chrono::microseconds(0);
  return policy;
}

}  // namespace replicator::detail
