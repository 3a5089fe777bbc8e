// ActorPool: the actors of one process, each on a thread of its own (IMPALA's actor threads).
//
// The pool makes `count` Actors (actor.h) with consecutive ids and starts them at once; each
// waits for the first parameters published in the store, then plays and inserts its unrolls
// into the queue until stop(). An actor that throws ends its thread: the pool keeps the
// first such error and closes the queue, so that a learner blocked in the queue's
// sample_batch() is released with Aborted instead of waiting for unrolls that will not come;
// error() then says why. The other actors see the closed queue and end normally.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "replicator/rl/actor.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/trajectory_queue.h"
#include "replicator/rl/unroll.h"

namespace replicator::rl {

class ActorPool {
 public:
  // Makes actors first_id .. first_id + count - 1 with `options` (Actor's seeding: from
  // (options.seed, id)) and starts each on a thread of its own. Does not block: the actors
  // wait for parameters on their threads. count 0 is valid: no actor, no thread. The store,
  // queue, log and counters must outlive the pool. Throws InvalidArgument for count < 0 and
  // what Actor's constructor throws (a bad environment name or sizes; no thread is started
  // then).
  ActorPool(int first_id, int count, const ActorOptions& options, const ParameterStore& store,
            TrajectoryQueue<Unroll>& queue, EpisodeLog& log, ActorCounters& counters);
  // stop().
  ~ActorPool();
  ActorPool(const ActorPool&) = delete;
  ActorPool& operator=(const ActorPool&) = delete;

  // Tells every actor to stop, closes the queue (the unrolls still in it are dropped; a
  // learner waiting in it gets Aborted) and joins the threads. BLOCKS until every actor has
  // ended: at once for one waiting for parameters or for room in the queue, else after the
  // batched step it is in (with environments in an env server, that step's calls).
  // Idempotent; thread-safe (a second caller waits for the first); not for an actor's own
  // thread. Never throws.
  void stop();

  // The first error an actor threw, or null. Set before that actor closes the queue, so a
  // learner released by the close finds it here. Thread-safe; never blocks for long.
  std::exception_ptr error() const;

  int size() const { return static_cast<int>(actors_.size()); }

 private:
  void play(Actor& actor);

  TrajectoryQueue<Unroll>& queue_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;  // serialises stop()'s joins
  mutable std::mutex error_mu_;
  std::exception_ptr error_;  // guarded by error_mu_
};

}  // namespace replicator::rl
