// The batched environments' contract: shapes, errors, seeding, auto-reset.
#include "replicator/rl/env.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

struct Trace {
  std::vector<float> obs, rewards;
  std::vector<std::uint8_t> ends;
};

// `steps` steps of a fixed action pattern, everything recorded.
Trace run(BatchedEnv& env, int steps) {
  Trace t;
  std::vector<std::int32_t> actions(static_cast<std::size_t>(env.num_envs()));
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      actions[i] = static_cast<std::int32_t>((s * 7 + i * 3 + s / 5) % env.num_actions());
    }
    const StepResult r = env.step(actions);
    t.obs.insert(t.obs.end(), r.observations.begin(), r.observations.end());
    t.rewards.insert(t.rewards.end(), r.rewards.begin(), r.rewards.end());
    for (std::size_t i = 0; i < actions.size(); ++i) {
      t.ends.push_back(static_cast<std::uint8_t>(r.terminated[i] | (r.truncated[i] << 1)));
    }
  }
  return t;
}

class EveryEnv : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryEnv, ShapesAndSpans) {
  auto env = make_env(GetParam(), 3, 1);
  EXPECT_EQ(env->name(), GetParam());
  EXPECT_EQ(env->num_envs(), 3);
  const bool cartpole = GetParam() == "cartpole";
  EXPECT_EQ(env->num_actions(), cartpole ? 2 : 6);
  if (cartpole) {
    EXPECT_EQ(env->observation_shape(), std::vector<int>({4}));
  } else {
    ASSERT_EQ(env->observation_shape().size(), 3u);
    EXPECT_EQ(env->observation_shape()[0], 10);
    EXPECT_EQ(env->observation_shape()[1], 10);
  }
  int size = 1;
  for (int d : env->observation_shape()) size *= d;
  EXPECT_EQ(env->observation_size(), size);
  const StepResult r = env->step(std::vector<std::int32_t>(3, 0));
  EXPECT_EQ(r.observations.size(), 3u * static_cast<std::size_t>(size));
  EXPECT_EQ(r.rewards.size(), 3u);
  EXPECT_EQ(r.terminated.size(), 3u);
  EXPECT_EQ(r.truncated.size(), 3u);
  EXPECT_EQ(r.episode_return.size(), 3u);
  EXPECT_EQ(r.episode_length.size(), 3u);
  if (!cartpole) {
    for (float v : r.observations) EXPECT_TRUE(v == 0.0f || v == 1.0f);
  }
}

TEST_P(EveryEnv, SameSeedSameTrajectoryDifferentSeedDifferent) {
  auto a = make_env(GetParam(), 4, 42);
  auto b = make_env(GetParam(), 4, 42);
  auto c = make_env(GetParam(), 4, 43);
  const Trace ta = run(*a, 300), tb = run(*b, 300), tc = run(*c, 300);
  EXPECT_EQ(ta.obs, tb.obs);
  EXPECT_EQ(ta.rewards, tb.rewards);
  EXPECT_EQ(ta.ends, tb.ends);
  EXPECT_NE(ta.obs, tc.obs);
}

// Env i's stream depends on (seed, i) only: env 0 of a batch of 1 and of a batch of 5 agree.
TEST_P(EveryEnv, EnvStreamIndependentOfBatchSize) {
  auto one = make_env(GetParam(), 1, 9);
  auto five = make_env(GetParam(), 5, 9);
  const int size = one->observation_size();
  for (int s = 0; s < 200; ++s) {
    const std::int32_t a = s % one->num_actions();
    const StepResult r1 = one->step(std::vector<std::int32_t>{a});
    const StepResult r5 = five->step(std::vector<std::int32_t>(5, a));
    ASSERT_TRUE(std::equal(r1.observations.begin(), r1.observations.end(), r5.observations.begin()))
        << "step " << s;
    ASSERT_EQ(r1.rewards[0], r5.rewards[0]);
    (void)size;
  }
}

// The step after an episode ends returns the new episode's first observation, reward 0, no
// flags; the ending step carries the episode's return and length.
TEST_P(EveryEnv, AutoResetNextStep) {
  auto env = make_env(GetParam(), 2, 5);
  std::vector<std::int32_t> actions(2, 0);
  double sum = 0;
  int length = 0, episodes = 0;
  bool after_end = false;
  for (int s = 0; s < 20000 && episodes < 3; ++s) {
    actions[0] = static_cast<std::int32_t>((s * 5 + s / 3) % env->num_actions());
    const StepResult r = env->step(actions);
    if (after_end) {
      EXPECT_EQ(r.rewards[0], 0.0f);
      EXPECT_FALSE(r.terminated[0] || r.truncated[0]);
      EXPECT_EQ(r.episode_length[0], 0);
      after_end = false;
      sum = 0;
      length = 0;
      continue;
    }
    sum += r.rewards[0];
    length += 1;
    if (r.terminated[0] || r.truncated[0]) {
      EXPECT_EQ(r.episode_length[0], length);
      EXPECT_FLOAT_EQ(r.episode_return[0], static_cast<float>(sum));
      after_end = true;
      ++episodes;
    } else {
      EXPECT_EQ(r.episode_length[0], 0);
      EXPECT_EQ(r.episode_return[0], 0.0f);
    }
  }
  EXPECT_EQ(episodes, 3);
}

TEST_P(EveryEnv, BadActionsThrowAndLeaveEnvUnchanged) {
  auto env = make_env(GetParam(), 2, 3);
  const std::vector<float> before(env->last().observations.begin(), env->last().observations.end());
  EXPECT_THROW(env->step(std::vector<std::int32_t>{0}), InvalidArgument);
  EXPECT_THROW(env->step(std::vector<std::int32_t>{0, 0, 0}), InvalidArgument);
  EXPECT_THROW(env->step(std::vector<std::int32_t>{0, env->num_actions()}), InvalidArgument);
  EXPECT_THROW(env->step(std::vector<std::int32_t>{-1, 0}), InvalidArgument);
  const std::vector<float> after(env->last().observations.begin(), env->last().observations.end());
  EXPECT_EQ(before, after);
}

TEST_P(EveryEnv, ResetRestartsEveryEnv) {
  auto env = make_env(GetParam(), 2, 8);
  run(*env, 50);
  const StepResult r = env->reset();
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.rewards[i], 0.0f);
    EXPECT_FALSE(r.terminated[i] || r.truncated[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Games, EveryEnv,
                         ::testing::Values("cartpole", "breakout", "space_invaders", "freeway",
                                           "asterix", "seaquest"));

TEST(MakeEnv, BadArgumentsThrowInvalidArgument) {
  EXPECT_THROW(make_env("pong", 1, 0), InvalidArgument);
  EXPECT_THROW(make_env("cartpole", 0, 0), InvalidArgument);
  EXPECT_THROW(make_env("breakout", -3, 0), InvalidArgument);
  EXPECT_THROW(make_env("breakout", 1, 0, {.sticky_action_prob = 1.5}), InvalidArgument);
  try {
    make_env("pong", 1, 0);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("space_invaders"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env_names().size(), 6u);
}

}  // namespace
}  // namespace replicator::rl
