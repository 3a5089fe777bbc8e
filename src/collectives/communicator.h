// Communicator: runs the collectives of one process's replicas. Every collective goes the
// same way, driven by its table entry (table.h): check the call locally, take the one-replica
// shortcut, choose the path (plan.h), stage, meet at the local engine's barrier, check that
// every replica called the same (comm), run the algorithm in the process and, across
// processes, on this replica's lane (across/), and leave only when no peer still touches
// this replica's buffers. Every collective is written to its replica's flight recorder
// (issued, in progress, done or failed; comm/flight_recorder.h), barrier and the end of a
// step included.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "src/collectives/across/across.h"
#include "src/collectives/device_path.h"
#include "src/collectives/plan.h"
#include "src/comm/call.h"
#include "src/comm/flight_recorder.h"
#include "src/engines/local/local_engine.h"

namespace replicator::detail {

struct CollectiveDef;

class Communicator {
 public:
  // `num_replicas` local replicas; with `layout` (not owned, may be null for a one-process
  // job) they are replicas layout->rank * num_replicas + 0..num_replicas-1 of a job that
  // spans layout->processes processes. `recorders` (not owned, one per local replica) get
  // every collective.
  Communicator(int num_replicas, std::chrono::milliseconds timeout, std::chrono::microseconds spin,
               const MachineFacts& facts, FlightRecorders& recorders,
               const ProcessLayout* layout = nullptr);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int size() const { return engine_.size(); }

  // Runs one collective for local replica `me` as its collective number `sequence`, which
  // it increments once the call is valid (a call refused by local checks takes no number,
  // so every replica's count stays in step with the barrier). Blocks until it completes;
  // throws as ReplicaContext documents.
  void collective(int me, std::uint64_t& sequence, const Call& call);

  // Releases every replica waiting now or later (until reset) with Aborted, naming
  // `replica` (global id) and its error. Called when a step throws. Thread-safe.
  void fail(int replica, const std::string& what) { engine_.fail(replica, what); }

  // Makes the communicator fresh for the next run. Only while no replica is inside it.
  void reset() { engine_.reset(); }

 private:
  // A failure on local replica `me`'s lane (a transport error, or another process's abort):
  // releases this process's other replicas and the other processes, naming the replica
  // whose failure it was (the transport's Aborted knows it; else `me`), and departs.
  void fail_across(int me, const Error& e);
  // The collective after its descriptor `d` is made: everything but the recording.
  // `device`: a collective that runs in the device (device_path.h; across processes,
  // in_device_across), on this replica's DeviceLane.
  void run(int me, const CollectiveDef& def, Descriptor& d, std::chrono::milliseconds timeout,
           LocalEngine::Clock::time_point start, DeviceLane* device = nullptr);
  // A collective on device memory: in the device, or through the host (device_path.h).
  void run_device(int me, const CollectiveDef& def, Descriptor& d,
                  std::chrono::milliseconds timeout, LocalEngine::Clock::time_point start);

  // Memory of one replica's thread, reused by every collective.
  struct Lane {
    explicit Lane(int n)
        : scratch(n), in_ptrs(static_cast<std::size_t>(n)), out_ptrs(static_cast<std::size_t>(n)) {}
    ReduceScratch scratch;
    LaneScratch across;
    DeviceLane device;
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
  };

  LocalEngine engine_;
  const ProcessLayout* layout_;
  const MachineFacts facts_;
  FlightRecorders& recorders_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace replicator::detail
