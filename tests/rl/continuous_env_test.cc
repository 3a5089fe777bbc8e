// Continuous-control environments: the point mass's dynamics by hand, actions clipped to the
// bounds, the time limit and the next-step auto-reset, seeding, and the arguments refused.
#include "replicator/rl/continuous_env.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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
  EXPECT_THROW(make_continuous_env("half_cheetah", 1, 0), InvalidArgument);
  EXPECT_THROW(make_continuous_env("point_mass", 0, 0), InvalidArgument);
}

}  // namespace
}  // namespace replicator::rl
