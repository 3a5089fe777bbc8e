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

namespace replicator::detail {

class WorkerPool {
 public:
  // Starts `num_local` threads for replicas first_replica .. first_replica + num_local - 1
  // of `num_replicas`. `comm` and `recorders` (which get each replica's steps) must
  // outlive the pool. An idle thread busy-waits `spin` for the next step before it parks.
  // The threads block SIGUSR1 (the flight recorder's dump thread takes it).
  WorkerPool(Communicator& comm, FlightRecorders& recorders, int first_replica, int num_replicas,
             int num_local, std::chrono::microseconds spin);
  ~WorkerPool();  // stops and joins the threads
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `step` on every replica, then the end-of-step check; blocks until all finish.
  // Rethrows the first failure tagged with its replica id (see Replicator::run).
  void run(StepRef step);

 private:
  void loop(int local);
  void record_failure(int local, std::exception_ptr error);

  Communicator& comm_;
  FlightRecorders& recorders_;
  const int first_replica_;
  const int num_replicas_;
  const std::chrono::microseconds spin_;
  std::vector<std::thread> threads_;

  StepRef step_{};
  bool stop_ = false;
  alignas(64) std::atomic<std::uint32_t> generation_{0};  // bumped to start a step
  alignas(64) std::atomic<std::uint32_t> remaining_{0};   // replicas still in the step

  std::mutex error_mu_;
  std::exception_ptr first_error_;
};

}  // namespace replicator::detail
