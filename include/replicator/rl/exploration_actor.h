// The D4PG actor: steps a batch of continuous-control environments (continuous_env.h) with
// its copy of the deterministic policy plus Gaussian exploration noise, and turns the steps
// into n-step transitions (replay.h) for the replay buffer.
//
// Each step: a = clip(π(o) + σ · (high − low) / 2 · ε, low, high), ε ~ N(0, 1) per action
// value from the actor's own stream (SplitMix64 and Box–Muller, a fixed function of the seed:
// the same seed, policy and environments give the same actions on every machine). Per-step
// discounts for the accumulator: 0 on a terminating step, 1 otherwise (a truncated episode
// bootstraps from its last observation); the reset step that follows an episode's end
// starts the env's next episode in the accumulator.
// Threads: one thread at a time (the actor's own); the policy is the actor's copy.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "replicator/rl/continuous_env.h"
#include "replicator/rl/d4pg.h"
#include "replicator/rl/replay.h"

namespace replicator::rl {

struct ExplorationOptions {
  double noise_std = 0.2;  // σ, as a fraction of each action's half-range; >= 0
  int n_step = 5;          // the transitions' n
  double discount = 0.99;  // γ of the n-step return
  std::uint64_t seed = 0;  // of the noise
};

class ExplorationActor {
 public:
  // `env` must outlive the actor; `policy` is the actor's own copy (load_policy replaces its
  // parameters). Throws InvalidArgument when the policy's sizes or bounds differ from the
  // environment's, or for a bad option (as NStepAccumulator).
  ExplorationActor(ContinuousEnv& env, DeterministicPolicy policy,
                   const ExplorationOptions& options);

  // Takes the learner's policy parameters (flatten_parameters order). Throws
  // InvalidArgument for a wrong size.
  void load_policy(std::span<const float> flat);

  // Steps every env once and appends the transitions this step completed to `out`. Never
  // blocks; throws what the environment throws.
  void step(std::vector<Transition>& out);

  // The actions of the latest step(), M × action_size, env-major (after noise and clipping).
  const std::vector<float>& last_actions() const { return actions_; }
  // Returns of the episodes that ended so far, in the order they ended.
  const std::vector<float>& episode_returns() const { return returns_; }

 private:
  double gaussian();

  ContinuousEnv& env_;
  DeterministicPolicy policy_;
  ExplorationOptions options_;
  NStepAccumulator accumulator_;
  std::vector<std::uint8_t> starting_;  // per env: 0, or where its next episode starts
  std::vector<float> actions_;
  std::vector<float> returns_;
  std::uint64_t noise_state_;  // of the SplitMix64 noise stream
};

}  // namespace replicator::rl
