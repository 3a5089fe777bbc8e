// The D4PG job (Barth-Maron et al. 2018), the TF-Replicator paper's reinforcement-learning
// benchmark: a learner replicated over every replica of the job (threads, or processes over
// mpi or gloo), each replica with its own actor and replay buffer, as the paper's learners
// on several devices each fed by their own replay. Every update, each replica's actor first
// steps its environments once with the current policy plus Gaussian noise, inserting the
// n-step transitions this completed into the replica's replay; then every replica samples
// its share of the batch from its replay and the learner (rl/d4pg.h) takes one step on the
// mean of the replicas' gradients. The actors play `env_steps_per_update` environment steps
// per update over the whole job whatever the replica count, so the ratio of samples to
// inserts is batch / env_steps_per_update on every layout.
//
// Nothing in a run depends on timing: the same options and replica count give the same
// parameters, bit for bit, on threads, mpi and gloo processes and on every rerun. A resumed
// run continues the networks, their Adam states and the target networks' phase from the
// checkpoint; its replay buffers and environments start afresh (the checkpoint holds no
// replay), so it does not give the bits of a run without the stop.
//
// Free of LibTorch types, so a command line can include it cheaply. Built with LibTorch.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "replicator/train/job_options.h"

namespace replicator::train {

// The options every job shares are JobOptions' (`out` holds metrics.jsonl, checkpoints and
// learning_curve.png; a checkpoint is always written at the end).
struct D4pgJobOptions : JobOptions {
  // A continuous-control task of rl::make_continuous_env: "half_cheetah" (MuJoCo's
  // HalfCheetah-v5, in builds with MuJoCo) or "point_mass" (a test task).
  std::string env = "half_cheetah";
  std::int64_t steps = 100'000;  // learner updates
  int batch = 256;               // transitions per update, over all replicas (R must divide it)
  // Environment steps the actors play per update, over all replicas: each replica steps
  // env_steps_per_update / R environments once per update (R must divide it). Samples per
  // insert: batch / env_steps_per_update (Acme's D4PG: 32).
  int env_steps_per_update = 8;
  int n_step = 5;
  double discount = 0.99;
  double noise_std = 0.3;  // σ of the exploration noise, a fraction of each action's half-range
  std::vector<int> policy_hidden = {256, 256};
  std::vector<int> critic_hidden = {256, 256};
  // The critic's categorical support: `atoms` atoms on [v_min, v_max]. NaN: the task's own
  // (d4pg_defaults).
  int atoms = 51;
  double v_min = std::numeric_limits<double>::quiet_NaN();
  double v_max = std::numeric_limits<double>::quiet_NaN();
  double policy_learning_rate = 1e-4;
  double critic_learning_rate = 1e-4;
  std::int64_t target_update_period = 100;  // updates between copies into the targets
  std::int64_t replay_size = 1'000'000;     // transitions each replica's replay keeps
  // Transitions each replica's replay holds before the first update (its actor plays until
  // then, with the initial policy and the noise); at least the replica's share of the batch.
  std::int64_t min_replay = 1000;
  // Updates between evaluations of the noiseless policy (0: only at the end), each over
  // `eval_episodes` episodes played together on replica 0.
  std::int64_t eval_every = 5000;
  int eval_episodes = 10;
  int random_episodes = 10;  // of a uniform random policy at the start (0: none)
  int report_every = 1000;   // updates between progress lines and metrics.jsonl records
};

// `options` with every NaN setting replaced by the task's default: the support [−250, 1250]
// on half_cheetah (its returns per step reach about 10; γ = 0.99 makes values of up to 100
// rewards), [−100, 10] on point_mass (rewards in [−1, 0]). Pure; throws nothing.
D4pgJobOptions d4pg_defaults(const D4pgJobOptions& options);

struct D4pgJobResult : JobResult {  // steps: learner updates
  std::int64_t env_steps = 0;       // environment steps played by all actors, over the run
  std::int64_t episodes = 0;        // actor episodes finished in this run (all replicas)
  double updates_per_s = 0;         // in this run, the actors' steps and evaluations included
  double samples_per_s = 0;         // transitions learned from per second: batch × updates/s
  double eval_return = 0;           // the noiseless policy's mean return at the end
  double actor_return = 0;          // the actors' newest 100 episodes (noisy; NaN: none)
  double random_return = 0;         // a uniform random policy's (NaN: none)
  double critic_loss = 0;           // over the last report window
  double policy_loss = 0;
};

// Runs the job. BLOCKS until done. Throws InvalidArgument (bad options, an unknown task, a
// batch or env_steps_per_update the replica count does not divide), ConfigError (a task
// this build lacks: half_cheetah without MuJoCo), DataError (checkpoint files) and what
// collectives throw.
D4pgJobResult train_d4pg(const D4pgJobOptions& options);

}  // namespace replicator::train
