// GlooOptions: how make_gloo_transport (gloo_transport.h) makes the transport of a job whose
// processes meet through a store. A plain struct with defaults, for designated initializers.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "replicator/rendezvous/key_value.h"

namespace replicator::detail {

struct GlooOptions {
  int rank = 0;       // this process, 0..size-1
  int size = 1;       // processes
  std::string store;  // "file:///abs/dir" or "redis://host[:port]" (port 6379)
  // A store of the caller's instead of `store` (torch.distributed's, for one): used when set.
  std::shared_ptr<rendezvous::KeyValueStore> meeting;
  std::string host = "127.0.0.1";  // address the peers reach this process at
  std::string job = "replicator";  // key prefix in the store (several jobs may share one)
  int lanes = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // rendezvous/connect deadline
  // Elastic jobs: while the transport lives, a counter is written every `heartbeat` to key
  // "heartbeat/<rank>" of the rendezvous store `heartbeat_store` (src/rendezvous/heartbeat.h);
  // zero: no heartbeat.
  std::chrono::milliseconds heartbeat{0};
  std::string heartbeat_store;
  // Where every process of the job runs on this host (ShmMesh::host_identity), messages go
  // through shared memory (src/engines/shm/shm_mesh.h) instead of TCP. All processes agree
  // in the rendezvous; one that cannot use it (or has it off) makes all use TCP.
  bool shared_memory = true;
  // How long a wait on shared memory spins before it yields (for up to 50 ms) and then
  // parks; where the job has more threads on this host than cores (size x lanes), it only
  // yields a few times before it parks.
  std::chrono::microseconds spin{50};
};

}  // namespace replicator::detail
