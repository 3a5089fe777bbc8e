// CartPole-v1: dynamics, termination, and the 500-step truncation.
#include "src/rl/cartpole.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace replicator::rl {
namespace {

int balance(std::span<const float> obs) {
  return obs[2] * 10.0 + obs[3] * 2.0 + obs[0] * 0.1 + obs[1] * 0.5 > 0.0 ? 1 : 0;
}

TEST(CartPole, ResetStateInRange) {
  CartPole env(64, 1);
  for (float v : env.last().observations) {
    EXPECT_GE(v, -0.05f);
    EXPECT_LE(v, 0.05f);
  }
}

// One step from a known state, by hand (gymnasium's equations).
TEST(CartPole, OneStepMatchesEquations) {
  CartPole env(1, 0);
  env.set_state(0, {0.1, -0.2, 0.03, 0.4});
  const std::int32_t a = 1;
  const StepResult r = env.step(std::span(&a, 1));
  const double theta = 0.03, theta_dot = 0.4;
  const double temp = (10.0 + 0.05 * theta_dot * theta_dot * std::sin(theta)) / 1.1;
  const double thetaacc = (9.8 * std::sin(theta) - std::cos(theta) * temp) /
                          (0.5 * (4.0 / 3.0 - 0.1 * std::cos(theta) * std::cos(theta) / 1.1));
  const double xacc = temp - 0.05 * thetaacc * std::cos(theta) / 1.1;
  EXPECT_FLOAT_EQ(r.observations[0], static_cast<float>(0.1 + 0.02 * -0.2));
  EXPECT_FLOAT_EQ(r.observations[1], static_cast<float>(-0.2 + 0.02 * xacc));
  EXPECT_FLOAT_EQ(r.observations[2], static_cast<float>(0.03 + 0.02 * 0.4));
  EXPECT_FLOAT_EQ(r.observations[3], static_cast<float>(0.4 + 0.02 * thetaacc));
  EXPECT_EQ(r.rewards[0], 1.0f);
  EXPECT_FALSE(r.terminated[0] || r.truncated[0]);
}

// Pushing one way tips the pole the other way: terminated (not truncated) within a few dozen
// steps, reward 1 on every step, the ending one included.
TEST(CartPole, ConstantPushTerminates) {
  CartPole env(1, 4);
  const std::int32_t a = 1;
  int steps = 0;
  for (;;) {
    const StepResult r = env.step(std::span(&a, 1));
    ++steps;
    EXPECT_EQ(r.rewards[0], 1.0f);
    if (r.terminated[0]) {
      EXPECT_FALSE(r.truncated[0]);
      EXPECT_EQ(r.episode_length[0], steps);
      EXPECT_EQ(r.episode_return[0], static_cast<float>(steps));
      EXPECT_GT(std::abs(env.state(0)[2]), 12 * 2 * M_PI / 360);
      break;
    }
    ASSERT_LT(steps, 100);
  }
}

// A balancing controller keeps every env up: each episode is truncated at exactly 500.
TEST(CartPole, BalancedEpisodesAreTruncatedAt500) {
  CartPole env(16, 11);
  std::vector<std::int32_t> actions(16);
  for (int s = 1; s <= 500; ++s) {
    for (std::size_t i = 0; i < 16; ++i)
      actions[i] = balance(env.last().observations.subspan(4 * i, 4));
    const StepResult r = env.step(actions);
    for (std::size_t i = 0; i < 16; ++i) {
      ASSERT_FALSE(r.terminated[i]) << "env " << i << " step " << s;
      ASSERT_EQ(r.truncated[i] != 0, s == 500) << "env " << i << " step " << s;
    }
  }
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(env.last().episode_length[i], 500);
    EXPECT_EQ(env.last().episode_return[i], 500.0f);
  }
  // The next step starts new episodes from the reset range.
  const StepResult r = env.step(actions);
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.rewards[i], 0.0f);
    for (int k = 0; k < 4; ++k) EXPECT_LE(std::abs(r.observations[4 * i + k]), 0.05f);
  }
}

}  // namespace
}  // namespace replicator::rl
