// The learner side of the IMPALA job (replicator/train/impala.h): what train_impala hands its
// learner replicas, and the pieces it calls; defined in impala.cc after train_impala.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "replicator/replica_context.h"
#include "replicator/rl/actor.h"
#include "replicator/rl/learner.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/trajectory_queue.h"
#include "replicator/train/impala.h"
#include "replicator/train/job.h"

namespace replicator::rl {
class LearnerServer;  // replicator/rl/remote.h (built with gRPC)
}

namespace replicator::train {

// What the learner replicas of one process share: the job's shape, and this process's
// parameter store, queue, episode log and counters (fed by its actors).
struct LearnerShared {
  const ImpalaOptions& options;
  std::vector<int> observation_shape;
  int num_actions = 0;
  int per_replica = 0;  // unrolls per learner step and replica (with shards, the most)
  std::int64_t total_steps = 0;
  std::int64_t frames_per_step = 0;
  int actors = 0;            // over all processes
  double target = 0;         // NaN: none
  double random_return = 0;  // NaN: none
  rl::LearnerOptions learner;
  rl::ParameterStore& store;
  rl::TrajectoryQueue<rl::Unroll>& queue;
  rl::EpisodeLog& log;
  rl::ActorCounters& counters;
  rl::Actor* inline_actor = nullptr;    // plays on the learner's thread (--actors 0); or none
  rl::LearnerServer* server = nullptr;  // this process's remote actors' server; or none
};

// One learner replica of the job, from its model to its digest. A collective: every replica
// runs it; BLOCKS for the whole run. Throws what train_impala documents.
ImpalaResult learn(Job& job, ReplicaContext& ctx, const LearnerShared& shared);

#ifdef REPLICATOR_HAVE_GRPC
// Learner process `rank`'s server for its remote actors, feeding `queue`, `log` and
// `counters`; BLOCKS until options.remote_actors have said hello. Throws Timeout when they
// do not come within the collective timeout, InvalidArgument for a bad --listen.
std::unique_ptr<rl::LearnerServer> serve_remote_actors(const ImpalaOptions& options, int rank,
                                                       int observation_size, int num_actions,
                                                       rl::ParameterStore& store,
                                                       rl::TrajectoryQueue<rl::Unroll>& queue,
                                                       rl::EpisodeLog& log,
                                                       rl::ActorCounters& counters);

// Ends `server` after the learners finished (its actors learn it from their next poll) and
// puts its counts into `result`, printing a line per actor on stderr.
void finish_remote_actors(rl::LearnerServer& server, int rank, ImpalaResult& result);
#endif

}  // namespace replicator::train
