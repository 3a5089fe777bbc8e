// How the replica threads of this process wait, decided in one place from the shape of the
// host: spinning pays only while every replica thread on the host has a core of its own.
#pragma once

#include <chrono>

namespace replicator::detail {

struct HostPolicy {
  // More replica threads on this host (local replicas × processes of the job on the host)
  // than cores: every wait should give its core away.
  bool oversubscribed = false;
  // How long a replica waiting in a collective busy-waits before it parks.
  std::chrono::microseconds collective_spin{0};
  // How long an idle replica thread busy-waits for the next step: only if the driving
  // thread of every process of the host has a core too (else the spinning replica holds
  // the core its own driver needs to start that step).
  std::chrono::microseconds step_spin{0};
};

// `cores`: the host's hardware threads (0: unknown, taken as 1). Pure; never throws.
HostPolicy host_policy(int local_replicas, int host_processes, unsigned cores,
                       std::chrono::microseconds spin);

}  // namespace replicator::detail
