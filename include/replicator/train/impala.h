// The IMPALA job: actors (threads) play batched environments with the newest published
// policy and feed a rate-limited trajectory queue; a learner replicated over every replica of
// the job (threads, or processes over mpi or gloo, each process with its own actors and
// queue, as the IMPALA paper's synchronous learners) learns from batches of unrolls with
// V-trace and publishes each new version; actors may also be processes of their own
// (run_remote_actor) that reach a learner process over gRPC. A program calls train_impala as
// `replicator train impala` does; the job is the train layer's skeleton (job.h) with the rl
// layer's actors, queue and learner. Free of LibTorch types, so a command line can include
// it cheaply. Built with LibTorch; remote actors and env servers need gRPC (without it,
// ConfigError).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "replicator/train/job_options.h"

namespace replicator::train {

// The options every job shares (engine and local learner replicas, seed, out, tensorboard,
// resume, checkpoints, threads, progress) are JobOptions'; `out` holds metrics.jsonl,
// checkpoints and learning_curve.png, and a checkpoint is always written at the end.
struct ImpalaOptions : JobOptions {
  // cartpole, a MinAtar game, or gym:<gymnasium id> stepped in env servers (below).
  std::string env = "cartpole";
  // host:port of the env servers (python/env_server.py) a "gym:" environment lives in; actor
  // a uses env_servers[a % n].
  std::vector<std::string> env_servers;
  // Actor threads per process; 0: play and learn on one thread; -1: one per core that this
  // process's learner replicas leave (hardware_concurrency − local replicas, at least 1), so
  // that actors and learners do not take turns on a core.
  int actors = -1;
  int envs_per_actor = 16;  // M, environments each actor steps together
  int unroll = 20;          // T
  int batch = 32;           // unrolls per learner step, over all replicas
  // Logical shards of each batch of unrolls (replicator/shards.h; 0: none): the learner's
  // loss and gradients per shard, summed in the tree over shard ids, so an update from the
  // same unrolls has the same bits for every learner replica count up to `shards`.
  int shards = 0;
  std::int64_t frames = 2'000'000;  // frames learned from (learner steps x batch x unroll)
  int hidden = 64;                  // the policy network's width
  // RMSProp's learning rate at the start and the entropy bonus's weight. NaN: the
  // environment's defaults (impala_defaults): on the MinAtar games 4e-3 and 0.05, chosen by
  // a sweep over seeds on Breakout (bench/results/2026-12-06-breakout-seeds), else 2e-3 and
  // 0.01.
  double learning_rate = std::numeric_limits<double>::quiet_NaN();
  bool anneal = true;  // the learning rate falls linearly to 0 over the run
  double entropy_cost = std::numeric_limits<double>::quiet_NaN();
  double baseline_cost = 0.25;
  double discount = 0.99;
  double max_grad_norm = 0;  // global gradient-norm clip; 0: none
  double reward_clip = 0;    // > 0: rewards clipped to [-clip, clip] in the loss
  // Stop early once the mean return of the newest 100 episodes reaches this (NaN: the
  // environment's own threshold where it has one, CartPole's 475, else never).
  double target_return = std::numeric_limits<double>::quiet_NaN();
  // Episodes of a uniform random policy played at the start for the return the curve is
  // drawn beside (-1: 100, or 16 in env servers, whose Atari episodes are long; 0: none, and
  // the random return is NaN).
  int random_episodes = -1;
  bool stop_at_target = false;
  std::int64_t queue_size = 0;  // unrolls per process's queue (0: one batch's worth)
  // Remote actors (`replicator rl actor`, include/replicator/rl/remote.h): each learner process
  // serves them on `listen` (host:port; with several processes, process r listens on port +
  // r; port 0: a free one, printed) and waits for this many to say hello before it learns.
  // With remote actors, `actors` -1 means no actor threads.
  int remote_actors = 0;
  std::string listen = "0.0.0.0:0";
  int report_every = 10;  // learner steps between progress lines / metrics
};

// `options` with every NaN setting that has an environment's default replaced by it (the
// learning rate and the entropy cost; see ImpalaOptions). Pure; throws nothing.
ImpalaOptions impala_defaults(const ImpalaOptions& options);

struct ImpalaResult : JobResult {  // steps: learner steps
  int actors = 0;                  // over all processes
  std::int64_t frames = 0;         // frames learned from in total
  std::int64_t played = 0;         // frames the actors of this run played (all processes)
  std::int64_t episodes = 0;       // episodes finished in this run (all processes)
  double frames_per_s = 0;         // frames learned from per second in this run
  double steps_per_s = 0;
  double mean_return = 0;           // of the newest 100 episodes (mean over processes)
  double random_return = 0;         // a uniform random policy's mean return at start (NaN: none)
  double target_return = 0;         // NaN when none
  std::int64_t solved_frames = -1;  // frames when the mean return first reached the target
  double solved_seconds = -1;
  // Remote actors, this process's server: unrolls taken into its queue, and received after
  // the end (counted, not learned from); one line per actor.
  std::int64_t remote_unrolls = 0;
  std::int64_t remote_after_finish = 0;
  std::vector<std::string> remote_actor_lines;
};

// Runs the job. BLOCKS until done. Throws InvalidArgument (bad options: an unknown
// environment, a batch not divisible by the replica count), DataError (checkpoint files),
// Timeout (no unroll came within the collective timeout) and what collectives throw.
ImpalaResult train_impala(const ImpalaOptions& options);

// `replicator rl actor`: one actor in a process of its own, fed by a learner of the IMPALA
// job over gRPC.
struct RemoteActorOptions {
  std::vector<std::string> learners;  // host:port of each learner process
  int id = -1;  // the actor's id (it seeds its environments, picks learners[id % n]); -1: given
  std::chrono::milliseconds timeout{30'000};  // how long the learner may stay unreachable
  bool progress = true;
};

struct RemoteActorResult {
  int actor = 0;
  std::string learner;
  std::string env;
  std::int64_t frames = 0;
  std::int64_t episodes = 0;
  double mean_return = 0;  // of its newest 100 episodes (NaN: none)
  double seconds = 0;
  std::int64_t sent = 0;
  std::int64_t acknowledged = 0;
  std::int64_t lost = 0;
  int reconnects = 0;
  std::int64_t versions = 0;
};

// Plays until the learner finishes. BLOCKS. Throws PeerLost when the learner stays
// unreachable past the timeout (naming it), InvalidArgument for a bad address or a learner
// that refuses, and what the actor throws. Throws ConfigError when built without gRPC.
RemoteActorResult run_remote_actor(const RemoteActorOptions& options);

}  // namespace replicator::train
