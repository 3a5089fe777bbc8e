// CartPole-v1 as gymnasium defines it (classic_control/cartpole.py with the TimeLimit of
// 500 steps), batched as struct-of-arrays so that a step is one tight loop over the envs.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "replicator/rl/env.h"
#include "src/rl/seeding.h"

namespace replicator::rl {

class CartPole final : public BatchedEnv {
 public:
  static constexpr int kMaxEpisodeSteps = 500;

  CartPole(int num_envs, std::uint64_t seed);

  // The float64 state (x, x_dot, theta, theta_dot) of env i; set_state replaces it, as
  // assigning gymnasium's `env.unwrapped.state` does (the episode's step count is kept), and
  // rewrites the env's observation. For tests and the conformance check.
  std::array<double, 4> state(int i) const;
  void set_state(int i, const std::array<double, 4>& state);

 private:
  void do_reset() override;
  void do_step(std::span<const std::int32_t> actions) override;
  void reset_env(std::size_t i);
  void write_observation(std::size_t i);

  std::vector<double> x_, x_dot_, theta_, theta_dot_;
  std::vector<std::int32_t> steps_;
  std::vector<std::uint8_t> needs_reset_;
  std::vector<SplitMix64> rng_;
};

}  // namespace replicator::rl
