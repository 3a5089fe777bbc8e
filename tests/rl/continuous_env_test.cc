// Continuous-control environments: the point mass's dynamics by hand, actions clipped to the
// bounds, the time limit and the next-step auto-reset, seeding, and the arguments refused;
// MuJoCo's half_cheetah where the build has MuJoCo (its physics against gymnasium's:
// conformance_half_cheetah.py).
#include "replicator/rl/continuous_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

TEST(PointMassTest, DynamicsByHandAndClippedActions) {
  auto env = make_continuous_env("point_mass", 2, 5);
  EXPECT_EQ(env->observation_size(), 2);
  EXPECT_EQ(env->action_size(), 1);
  EXPECT_EQ(env->action_bounds().low, std::vector<float>{-1.f});
  const std::vector<float> first(env->last().observations.begin(), env->last().observations.end());
  for (int i = 0; i < 2; ++i) {
    EXPECT_GE(first[2 * i], -1.f);
    EXPECT_LE(first[2 * i], 1.f);
    EXPECT_EQ(first[2 * i + 1], 0.f);
  }
  // Env 0 pushed with u = 1, env 1 with 7 (clipped to 1): both v = 0.1, x = x0 + 0.01.
  StepResult r = env->step(std::vector<float>{1.f, 7.f});
  for (int i = 0; i < 2; ++i) {
    const double x = static_cast<double>(first[2 * i]) + 0.01;
    EXPECT_NEAR(r.observations[2 * i], x, 1e-6);
    EXPECT_NEAR(r.observations[2 * i + 1], 0.1, 1e-7);
    EXPECT_NEAR(r.rewards[i], -x * x, 1e-6);
    EXPECT_EQ(r.terminated[i], 0);
    EXPECT_EQ(r.truncated[i], 0);
  }
  // Then u = −1 on env 0: v = 0, x unchanged.
  const float x1 = r.observations[0];
  r = env->step(std::vector<float>{-1.f, 0.f});
  EXPECT_NEAR(r.observations[0], x1, 1e-6);
  EXPECT_NEAR(r.observations[1], 0, 1e-7);
}

TEST(PointMassTest, TruncatedAfterFiftyStepsThenResetOnTheNextStep) {
  auto env = make_continuous_env("point_mass", 1, 9);
  double total = 0;
  for (int t = 1; t <= 50; ++t) {
    const StepResult r = env->step(std::vector<float>{0.3f});
    total += r.rewards[0];
    EXPECT_EQ(r.truncated[0], t == 50 ? 1 : 0) << "step " << t;
    EXPECT_EQ(r.terminated[0], 0);
    if (t == 50) {
      EXPECT_EQ(r.episode_length[0], 50);
      EXPECT_NEAR(r.episode_return[0], total, 1e-4);
    } else {
      EXPECT_EQ(r.episode_length[0], 0);
    }
  }
  const StepResult r = env->step(std::vector<float>{1.f});  // the reset step
  EXPECT_EQ(r.rewards[0], 0.f);
  EXPECT_EQ(r.truncated[0], 0);
  EXPECT_EQ(r.observations[1], 0.f) << "a new episode starts at rest";
}

TEST(PointMassTest, SeededAndRefusals) {
  const auto first = [](std::uint64_t seed) {
    auto env = make_continuous_env("point_mass", 3, seed);
    return std::vector<float>(env->last().observations.begin(), env->last().observations.end());
  };
  EXPECT_EQ(first(1), first(1));
  EXPECT_NE(first(1), first(2));
  auto env = make_continuous_env("point_mass", 2, 0);
  EXPECT_THROW(env->step(std::vector<float>{0.f}), InvalidArgument);
  EXPECT_THROW(env->step(std::vector<float>{0.f, std::numeric_limits<float>::quiet_NaN()}),
               InvalidArgument);
  EXPECT_THROW(make_continuous_env("no_such_task", 1, 0), InvalidArgument);
  EXPECT_THROW(make_continuous_env("point_mass", 0, 0), InvalidArgument);
}

template <typename T>
std::vector<T> copy(std::span<const T> values) {
  return {values.begin(), values.end()};
}

// A half_cheetah batch, or a skip where this build has no MuJoCo or cannot find the model.
std::unique_ptr<ContinuousEnv> half_cheetah(int num_envs, std::uint64_t seed) {
  try {
    return make_continuous_env("half_cheetah", num_envs, seed);
  } catch (const ConfigError&) {
    return nullptr;
  }
}

#define HALF_CHEETAH_OR_SKIP(env, n, seed) \
  auto env = half_cheetah(n, seed);        \
  if (!env) GTEST_SKIP() << "no MuJoCo in this build, or no model (REPLICATOR_MUJOCO_ASSETS)"

TEST(HalfCheetahTest, ShapesBoundsAndResetNoise) {
  HALF_CHEETAH_OR_SKIP(env, 64, 3);
  EXPECT_EQ(env->name(), "half_cheetah");
  EXPECT_EQ(env->observation_size(), 17);
  ASSERT_EQ(env->action_size(), 6);
  EXPECT_EQ(env->action_bounds().low, std::vector<float>(6, -1.f));
  EXPECT_EQ(env->action_bounds().high, std::vector<float>(6, 1.f));
  const StepResult r = env->last();
  // qpos0 is 0: the positions start within the uniform noise, the velocities 0.1 N(0, 1).
  double velocity_square_sum = 0;
  for (int i = 0; i < 64; ++i) {
    for (int k = 0; k < 8; ++k) EXPECT_LE(std::abs(r.observations[i * 17 + k]), 0.1f);
    for (int k = 8; k < 17; ++k) velocity_square_sum += std::pow(r.observations[i * 17 + k], 2);
    EXPECT_EQ(r.rewards[i], 0.f);
  }
  EXPECT_NEAR(std::sqrt(velocity_square_sum / (64 * 9)), 0.1, 0.02);
}

TEST(HalfCheetahTest, SeededClippedAndTruncatedAfterAThousandSteps) {
  HALF_CHEETAH_OR_SKIP(a, 2, 11);
  auto b = half_cheetah(2, 11);
  auto other = half_cheetah(2, 12);
  EXPECT_EQ(copy(a->last().observations), copy(b->last().observations));
  EXPECT_NE(copy(a->last().observations), copy(other->last().observations));
  std::vector<float> actions(12), clipped(12);
  double sum = 0;
  for (int t = 1; t <= 1000; ++t) {
    for (std::size_t k = 0; k < actions.size(); ++k) {
      actions[k] = static_cast<float>(std::sin(0.1 * t + static_cast<double>(k))) * 3.f;
      clipped[k] = std::clamp(actions[k], -1.f, 1.f);
    }
    const StepResult ra = a->step(actions);
    const StepResult rb = b->step(clipped);  // clipping is the env's: the same steps
    ASSERT_EQ(copy(ra.observations), copy(rb.observations)) << "step " << t;
    ASSERT_EQ(copy(ra.rewards), copy(rb.rewards)) << "step " << t;
    sum += ra.rewards[0];
    ASSERT_EQ(ra.truncated[0] != 0, t == 1000) << "step " << t;
    ASSERT_EQ(ra.terminated[0], 0);
  }
  const StepResult end = a->last();
  EXPECT_EQ(end.episode_length[0], 1000);
  EXPECT_NEAR(end.episode_return[0], sum, 1e-3 * (1 + std::abs(sum)));
  // The next step starts a new episode, whatever the action.
  const StepResult next = a->step(actions);
  EXPECT_EQ(next.rewards[0], 0.f);
  EXPECT_EQ(next.truncated[0], 0);
  for (int k = 0; k < 8; ++k) EXPECT_LE(std::abs(next.observations[k]), 0.1f);
}

}  // namespace
}  // namespace replicator::rl
