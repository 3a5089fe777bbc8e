// The batched environments' contract: shapes, errors, seeding, auto-reset.
#include "replicator/rl/env.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
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

// Env i's episodes last i + 1 steps and return i + 1, whatever the actions.
class CountingEnv final : public BatchedEnv {
 public:
  explicit CountingEnv(int num_envs)
      : BatchedEnv("counting", num_envs, 3, {2}), steps_(static_cast<std::size_t>(num_envs)) {}

 private:
  void do_reset() override {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      steps_[i] = 0;
      clear_step_fields(i);
    }
  }
  void do_step(std::span<const std::int32_t>) override {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto length = static_cast<int>(i) + 1;
      if (steps_[i] == length) {  // the reset step after an episode's end
        steps_[i] = 0;
        clear_step_fields(i);
        continue;
      }
      ++steps_[i];
      rewards_[i] = 1.0f;
      const bool ends = steps_[i] == length;
      terminated_[i] = ends ? 1 : 0;
      episode_return_[i] = ends ? static_cast<float>(length) : 0.0f;
      episode_length_[i] = ends ? length : 0;
    }
  }
  std::vector<int> steps_;
};

TEST(MakeActorEnv, AFactoryMakesTheEnvironmentsElseMakeEnvByName) {
  const auto made = make_actor_env({}, "cartpole", 3, 2, 5);
  EXPECT_EQ(made->name(), "cartpole");
  EXPECT_EQ(made->num_envs(), 2);
  const auto direct = make_env("cartpole", 2, 5);
  const std::span<const float> a = made->last().observations, b = direct->last().observations;
  EXPECT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));

  int calls = 0;
  const EnvFactory factory = [&](int actor, int num_envs, std::uint64_t seed) {
    ++calls;
    EXPECT_EQ(actor, 3);
    EXPECT_EQ(num_envs, 2);
    EXPECT_EQ(seed, 5u);
    return std::make_unique<CountingEnv>(num_envs);
  };
  EXPECT_EQ(make_actor_env(factory, "not a game", 3, 2, 5)->name(), "counting");
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(make_actor_env({}, "not a game", 3, 2, 5), InvalidArgument);
}

// The mean over every episode that ended, those of the step that reached the count included:
// with CountingEnv, env 0 ends on steps 1 and 3, env 1 on step 2, env 2 on step 3, so 3
// episodes take 3 steps and average (1 + 2 + 1 + 3) / 4.
TEST(RandomPolicyReturn, TheMeanOfTheEpisodesThatEndedInSixteenEnvironments) {
  const EnvFactory factory = [](int actor, int num_envs, std::uint64_t seed) {
    EXPECT_EQ(actor, 0);
    EXPECT_EQ(num_envs, 16);
    EXPECT_EQ(seed, 9u ^ 0x5eedu);
    return std::make_unique<CountingEnv>(num_envs);
  };
  EXPECT_EQ(random_policy_return(factory, "counting", 1, 9), 1.0);
  EXPECT_EQ(random_policy_return(factory, "counting", 2, 9), 1.5);
  EXPECT_EQ(random_policy_return(factory, "counting", 3, 9), 1.75);
}

// CartPole: every episode lasts at least a few steps and at most 500, each step returning 1;
// the same seed gives the same bits, another seed other episodes.
TEST(RandomPolicyReturn, OnCartPoleDeterministicForASeedAndWithinTheGamesBounds) {
  const double r = random_policy_return({}, "cartpole", 50, 7);
  EXPECT_EQ(r, random_policy_return({}, "cartpole", 50, 7));
  EXPECT_NE(r, random_policy_return({}, "cartpole", 50, 8));
  EXPECT_GE(r, 5.0);
  EXPECT_LE(r, 500.0);
}

TEST(RandomPolicyReturn, BadArgumentsAndFailingEnvironmentsThrow) {
  EXPECT_THROW(random_policy_return({}, "cartpole", 0, 1), InvalidArgument);
  EXPECT_THROW(random_policy_return({}, "pong", 10, 1), InvalidArgument);
  const EnvFactory broken = [](int, int, std::uint64_t) -> std::unique_ptr<BatchedEnv> {
    throw DataError("no environments today", "factory");
  };
  EXPECT_THROW(random_policy_return(broken, "cartpole", 10, 1), DataError);
}

}  // namespace
}  // namespace replicator::rl
