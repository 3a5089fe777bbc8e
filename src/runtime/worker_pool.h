// WorkerPool: the persistent replica threads of a Replicator. run() hands every thread
// the same step and blocks until all have finished it; no thread is created per step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "replicator/replicator.h"
#include "src/collectives/communicator.h"
#include "src/comm/flight_recorder.h"
#include "src/engines/host_cores.h"

namespace replicator::detail {

class WorkerPool {
 public:
  // Starts `num_local` threads for replicas first_replica .. first_replica + num_local - 1
  // of `num_replicas`. `comm` and `recorders` (which get each replica's steps) must
  // outlive the pool. An idle thread busy-waits `spin` for the next step before it parks.
  // With `spread` (every replica thread of the host has a core of its own), a thread that
  // starts a step on the core of a lower-numbered replica of the host moves off it (see
  // spread_off_shared_core); `host_cores` (the transport's traits; may be null; must outlive
  // the pool), where the processes of the job share this host's memory, carries the cores of
  // the other processes. The threads block SIGUSR1 (the flight recorder's dump thread takes it).
  // Replica r is bound to device r mod devices.count of devices.kind.
  WorkerPool(Communicator& comm, FlightRecorders& recorders, int first_replica, int num_replicas,
             int num_local, std::chrono::microseconds spin, bool spread, HostCores* host_cores,
             DeviceSet devices = {});
  ~WorkerPool();  // stops and joins the threads
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `step` on every replica, then the end-of-step check; blocks until all finish.
  // Rethrows the first failure tagged with its replica id (see Replicator::run).
  void run(StepRef step);

 private:
  void loop(int local);
  // Woken together by run(), the replica threads may all be put on the waking thread's
  // core, and the kernel spreads them only after some milliseconds: two replicas that
  // wait on each other then share one core and each collective costs a spin budget (10 µs
  // a 4 B all_reduce instead of 0.4, for the first 10-40 ms). So each thread publishes the
  // core it starts the step on (to the other processes of the host too, through the
  // transport's HostCores); one that finds a lower-numbered replica there (of this process,
  // or of a process of lower rank) asks the kernel to move it to a core none of them holds (its
  // allowed cores minus those), then gives back its full affinity, so the kernel stays free
  // to place it later. Two sched_setaffinity calls when shared, one getcpu and a read per
  // lower replica otherwise; best effort: a core read just before its owner moved is stale
  // until the next step. Only the first kMaxSpread lower replicas are looked at (a stack
  // array).
  void spread_off_shared_core(int local);
  static constexpr int kMaxSpread = 256;
  void record_failure(int local, std::exception_ptr error);

  Communicator& comm_;
  FlightRecorders& recorders_;
  const int first_replica_;
  const int num_replicas_;
  const std::chrono::microseconds spin_;
  const bool spread_;
  HostCores* const host_cores_;  // null where the processes do not share this host's memory
  const DeviceSet devices_;
  std::vector<std::thread> threads_;
  // The core each thread started its last step on (-1: none yet), by local replica.
  struct alignas(64) Core {
    std::atomic<int> cpu{-1};
  };
  std::vector<Core> cores_;

  StepRef step_{};
  bool stop_ = false;
  alignas(64) std::atomic<std::uint32_t> generation_{0};  // bumped to start a step
  alignas(64) std::atomic<std::uint32_t> remaining_{0};   // replicas still in the step

  std::mutex error_mu_;
  std::exception_ptr first_error_;
};

}  // namespace replicator::detail
