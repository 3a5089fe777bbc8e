// Actor: one thread's worth of experience generation. It steps a batch of M environments
// with the newest policy the learner published (one batched forward for all M), samples
// each action from the policy's logits, and cuts each environment's stream of steps into
// unrolls of T steps that it inserts into the trajectory queue. Finished episodes go to an
// EpisodeLog.
//
// Unrolls follow unroll.h's convention: the batched environment's reset steps (whose action
// is ignored) are dropped, so each environment's unroll fills at its own pace. Before each
// batched forward the actor takes the newest published parameters if their version
// changed, never waiting for the learner. An unroll's policy_version is the version that
// acted at its first step.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "replicator/options.h"
#include "replicator/rl/env.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/policy.h"
#include "replicator/rl/trajectory_queue.h"
#include "replicator/rl/unroll.h"

namespace replicator::rl {

// Episodes finished by any actor, for the progress line and the learning curve.
class EpisodeLog {
 public:
  struct Episode {
    double episode_return = 0;
    std::int32_t length = 0;
    std::int64_t frames = 0;  // environment frames of all actors when it ended
    double seconds = 0;       // since the log was made
  };

  EpisodeLog();
  // Records an episode that ended; `frames`: frames of all actors so far. Thread-safe.
  void add(double episode_return, std::int32_t length, std::int64_t frames);
  // Episodes recorded since `first` (an index from 0; pass the previous end to get only the
  // new ones), and the end index. Thread-safe; allocates.
  std::vector<Episode> since(std::size_t first, std::size_t* end) const;
  // The mean return of the newest `n` episodes (NaN when none) and how many there were.
  double mean_return(std::size_t n, std::size_t* count = nullptr) const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<Episode> episodes_;
  std::chrono::steady_clock::time_point start_;
};

struct ActorOptions {
  std::string env = "cartpole";
  int envs = 8;     // M, environments stepped together
  int unroll = 20;  // T, steps per unroll
  int hidden = 64;  // the policy network's width (policy.h)
  std::uint64_t seed = 0;
  EnvOptions env_options;
  Deadline insert_timeout;  // per insert; empty: the queue's own
  // Where the environments come from (for example remote.h's env_factory for environments in
  // an env server): called once in the constructor with the actor's id, M and the seed it
  // derives; empty: make_env(env, ...).
  EnvFactory make_env;
};

// What all actors have done, updated as they go (relaxed atomics, read by the reporter).
struct ActorCounters {
  std::atomic<std::int64_t> frames{0};   // environment steps taken (reset steps excluded)
  std::atomic<std::int64_t> unrolls{0};  // unrolls inserted
  std::atomic<std::int64_t> forwards{0};
};

class Actor {
 public:
  // Actor number `id` (its environments are seeded from (seed, id)). The store, queue, log
  // and counters must outlive it. Throws InvalidArgument for a bad environment name or
  // sizes (see make_env, PolicyNet).
  Actor(int id, const ActorOptions& options, const ParameterStore& store,
        TrajectoryQueue<Unroll>& queue, EpisodeLog& log, ActorCounters& counters);

  // Plays until `stop` is set or the queue is closed (then returns normally). BLOCKS: meant
  // for a thread of its own. Waits for the first published parameters (until `stop`).
  // Throws Timeout if an insert waits past its deadline, and what LibTorch throws.
  void run(const std::atomic<bool>& stop);

  // One batched step of every environment with the newest published parameters (there must
  // be some), inserting the unrolls it completes (up to M): what run() repeats, for a
  // caller that plays and learns on one thread (a synchronous loop). Blocks only in an
  // insert into a full queue. Throws as run(), and Aborted if the queue is closed.
  void step();

  int id() const { return id_; }

 private:
  // Takes the newest parameters if their version is not the one in use.
  void refresh();
  // Env i's unroll under construction.
  struct Pending {
    Unroll unroll;
    int steps = 0;
  };
  void start_unroll(int i, const float* observation);
  // The first step's setup: unrolls started from the environments' first observations.
  void begin();

  int id_;
  ActorOptions options_;
  const ParameterStore& store_;
  TrajectoryQueue<Unroll>& queue_;
  EpisodeLog& log_;
  ActorCounters& counters_;
  std::unique_ptr<BatchedEnv> env_;
  PolicyNet model_{nullptr};
  std::int64_t version_ = 0;
  ::torch::Generator generator_;
  std::vector<Pending> pending_;
  std::vector<std::uint8_t> resetting_;  // env i's next step is its reset step
  std::vector<std::int32_t> actions_;
  StepResult last_;
  bool begun_ = false;
  std::int64_t sequence_ = 0;
};

}  // namespace replicator::rl
