// MinAtar games on scripted action sequences (sticky actions off): what each rule gives.
// The whole games are compared step for step with the minatar package by
// conformance_minatar.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "replicator/rl/env.h"
#include "src/rl/numpy_random.h"

namespace replicator::rl {
namespace {

constexpr EnvOptions kNoSticky{.sticky_action_prob = 0.0};

float cell(const StepResult& r, int channels, int row, int col, int c) {
  return r.observations[static_cast<std::size_t>((row * 10 + col) * channels + c)];
}

StepResult act(BatchedEnv& env, std::int32_t a) { return env.step(std::span(&a, 1)); }

// RandomState(0)'s first rand() and randint() values, as numpy gives them.
TEST(NumpyRandom, MatchesNumpyLegacyStream) {
  NumpyRandom rng(0);
  EXPECT_DOUBLE_EQ(rng.rand(), 0.5488135039273248);  // np.random.RandomState(0).rand()
  EXPECT_DOUBLE_EQ(rng.rand(), 0.7151893663724195);
  NumpyRandom ints(0);
  // np.random.RandomState(0).randint(0, 10, 5) == [5, 0, 3, 3, 7]
  const std::vector<int> expected = {5, 0, 3, 3, 7};
  for (int e : expected) EXPECT_EQ(ints.randint(0, 10), e);
}

TEST(Breakout, PaddleMovesAndStopsAtWalls) {
  auto env = make_env("breakout", 1, 0, kNoSticky);
  StepResult r = env->last();
  EXPECT_EQ(cell(r, 4, 9, 4, 0), 1.0f);  // paddle starts at column 4
  for (int i = 0; i < 3; ++i) r = act(*env, 1);
  EXPECT_EQ(cell(r, 4, 9, 1, 0), 1.0f);
  int bricks = 0;
  for (int row = 0; row < 10; ++row) {
    for (int col = 0; col < 10; ++col) bricks += cell(r, 4, row, col, 3) != 0.0f;
  }
  EXPECT_EQ(bricks, 30);
}

// Standing still, the ball comes down beside the paddle: game over, terminated.
TEST(Breakout, MissedBallEndsTheGame) {
  auto env = make_env("breakout", 1, 0, kNoSticky);
  StepResult r = env->last();
  int steps = 0;
  float total = 0;
  do {
    r = act(*env, 0);
    total += r.rewards[0];
    ++steps;
    ASSERT_LT(steps, 1000);
  } while (!r.terminated[0]);
  EXPECT_FALSE(r.truncated[0]);
  EXPECT_EQ(r.episode_return[0], total);
}

TEST(Freeway, ClockEndsTheEpisodeAsTruncationAfter2501Steps) {
  auto env = make_env("freeway", 1, 3, kNoSticky);
  StepResult r = env->last();
  float crossings = 0;
  for (int s = 1; s <= 2501; ++s) {
    r = act(*env, 2);  // always up
    crossings += r.rewards[0];
    ASSERT_FALSE(r.terminated[0]);
    ASSERT_EQ(r.truncated[0] != 0, s == 2501) << s;
  }
  EXPECT_EQ(r.episode_length[0], 2501);
  EXPECT_GE(crossings, 1.0f);  // always pressing up crosses the road now and then
  EXPECT_EQ(r.episode_return[0], crossings);
}

TEST(SpaceInvaders, FireHitsAnAlien) {
  auto env = make_env("space_invaders", 1, 0, kNoSticky);
  float total = 0;
  for (int s = 0; s < 40; ++s) total += act(*env, 5).rewards[0];
  EXPECT_GT(total, 0.0f);
  EXPECT_EQ(cell(env->last(), 6, 9, 5, 0), 1.0f);  // the cannon did not move
}

TEST(Asterix, PlayerMovesWithinRows1To8) {
  auto env = make_env("asterix", 1, 0, kNoSticky);
  StepResult r = env->last();
  EXPECT_EQ(cell(r, 4, 5, 5, 0), 1.0f);
  for (int s = 0; s < 6; ++s) r = act(*env, 2);  // up, stops at row 1
  if (!r.terminated[0]) {
    EXPECT_EQ(cell(r, 4, 1, 5, 0), 1.0f);
  }
}

// Staying at the surface without divers is safe; diving and coming back up empty-handed
// ends the game.
TEST(Seaquest, SurfacingWithoutDiversEndsTheGame) {
  auto env = make_env("seaquest", 1, 0, kNoSticky);
  StepResult r = act(*env, 4);  // down
  EXPECT_FALSE(r.terminated[0]);
  r = act(*env, 2);  // up again: no diver
  EXPECT_TRUE(r.terminated[0]);
  EXPECT_EQ(r.episode_length[0], 2);
}

TEST(Seaquest, OxygenRunsOut) {
  auto env = make_env("seaquest", 1, 1, kNoSticky);
  StepResult r = act(*env, 4);
  int steps = 1;
  while (!r.terminated[0] && steps < 400) {
    r = act(*env, steps % 2 ? 1 : 3);  // left, right at depth 1
    ++steps;
  }
  EXPECT_TRUE(r.terminated[0]);
  EXPECT_LE(steps, 202);  // 200 units of oxygen, one a step below the surface
}

}  // namespace
}  // namespace replicator::rl
