#include "replicator/rl/actor_pool.h"

#include <string>

#include "replicator/errors.h"

namespace replicator::rl {

ActorPool::ActorPool(int first_id, int count, const ActorOptions& options,
                     const ParameterStore& store, TrajectoryQueue<Unroll>& queue, EpisodeLog& log,
                     ActorCounters& counters)
    : queue_(queue) {
  if (count < 0) {
    throw InvalidArgument("ActorPool: count must be at least 0, got " + std::to_string(count));
  }
  // Every actor is made before any thread starts: a bad environment throws with nothing to
  // stop.
  actors_.reserve(static_cast<std::size_t>(count));
  for (int a = 0; a < count; ++a) {
    actors_.push_back(std::make_unique<Actor>(first_id + a, options, store, queue, log, counters));
  }
  threads_.reserve(actors_.size());
  try {
    for (const std::unique_ptr<Actor>& actor : actors_) {
      threads_.emplace_back([this, a = actor.get()] { play(*a); });
    }
  } catch (...) {
    stop();  // the threads that did start
    throw;
  }
}

ActorPool::~ActorPool() { stop(); }

void ActorPool::play(Actor& actor) {
  try {
    actor.run(stop_);
  } catch (...) {
    {
      std::lock_guard lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    // After the error is kept: whoever the close releases finds it in error().
    queue_.close();
  }
}

void ActorPool::stop() {
  std::lock_guard lock(stop_mu_);
  stop_ = true;
  queue_.close();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::exception_ptr ActorPool::error() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

}  // namespace replicator::rl
