// Replay: n-step transitions against hand-computed returns and discounts (episodes that
// terminate, are truncated or end inside the window; environments kept apart), and the
// replay buffer's uniform sampling (a chi-square bound that a 5 % bias fails), FIFO
// eviction, seeding, the error on sampling too early, and inserts racing samples.
#include "replicator/rl/replay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

// Observation o_t = {t}, action a_t = {10 t}: a transition shows which steps it spans.
std::vector<float> obs(int t) { return {static_cast<float>(t)}; }
std::vector<float> act(int t) { return {10.f * static_cast<float>(t)}; }

void expect_transition(const Transition& got, int t, double reward, double discount, int next) {
  EXPECT_EQ(got.observation, obs(t));
  EXPECT_EQ(got.action, act(t));
  // Summed in double and rounded once to float.
  EXPECT_EQ(got.reward, static_cast<float>(reward)) << "transition of step " << t;
  EXPECT_EQ(got.discount, static_cast<float>(discount)) << "transition of step " << t;
  EXPECT_EQ(got.next_observation, obs(next)) << "transition of step " << t;
}

// Rewards r_t = t + 1, γ = 0.5, n = 3: an episode of 5 steps that terminates on its last.
TEST(NStepAccumulatorTest, ReturnsAndDiscountsOfATerminatedEpisode) {
  NStepAccumulator acc(1, 3, 0.5, 1, 1);
  std::vector<Transition> out;
  acc.start(0, obs(0));
  acc.add(0, act(0), 1, 1, obs(1), false, out);
  acc.add(0, act(1), 2, 1, obs(2), false, out);
  EXPECT_TRUE(out.empty()) << "no window is full before the third step";
  acc.add(0, act(2), 3, 1, obs(3), false, out);
  ASSERT_EQ(out.size(), 1u);
  // R_0 = 1 + 0.5·2 + 0.25·3 = 2.75, D = 0.5³ = 0.125, bootstrap from o_3.
  expect_transition(out[0], 0, 2.75, 0.125, 3);
  acc.add(0, act(3), 4, 1, obs(4), false, out);
  ASSERT_EQ(out.size(), 2u);
  expect_transition(out[1], 1, 2 + 0.5 * 3 + 0.25 * 4, 0.125, 4);  // 4.5
  // Step 4 terminates (d = 0): the windows of steps 2, 3 and 4 all end at o_5, discount 0.
  acc.add(0, act(4), 5, 0, obs(5), true, out);
  ASSERT_EQ(out.size(), 5u);
  expect_transition(out[2], 2, 3 + 0.5 * 4 + 0.25 * 5, 0, 5);  // 6.25
  expect_transition(out[3], 3, 4 + 0.5 * 5, 0, 5);             // 6.5
  expect_transition(out[4], 4, 5, 0, 5);
}

// A time limit cuts the episode after 4 steps (d = 1): the short windows keep γ^m, m < n.
TEST(NStepAccumulatorTest, ATruncatedEpisodeBootstrapsFromItsLastObservation) {
  NStepAccumulator acc(1, 3, 0.5, 1, 1);
  std::vector<Transition> out;
  acc.start(0, obs(0));
  for (int t = 0; t < 3; ++t)
    acc.add(0, act(t), static_cast<float>(t + 1), 1, obs(t + 1), false, out);
  acc.add(0, act(3), 4, 1, obs(4), true, out);
  ASSERT_EQ(out.size(), 4u);
  expect_transition(out[0], 0, 2.75, 0.125, 3);
  expect_transition(out[1], 1, 2 + 0.5 * 3 + 0.25 * 4, 0.125, 4);
  expect_transition(out[2], 2, 3 + 0.5 * 4, 0.25, 4);
  expect_transition(out[3], 3, 4, 0.5, 4);
}

// An episode shorter than n: every transition is completed at its end, none before.
TEST(NStepAccumulatorTest, AnEpisodeShorterThanTheWindow) {
  NStepAccumulator acc(1, 5, 0.9, 1, 1);
  std::vector<Transition> out;
  acc.start(0, obs(0));
  acc.add(0, act(0), 1, 1, obs(1), false, out);
  EXPECT_TRUE(out.empty());
  acc.add(0, act(1), -2, 0, obs(2), true, out);
  ASSERT_EQ(out.size(), 2u);
  expect_transition(out[0], 0, 1 + 0.9 * -2, 0, 2);
  expect_transition(out[1], 1, -2, 0, 2);
  // The next episode starts clean: its first transition knows nothing of the last one.
  acc.start(0, obs(7));
  acc.add(0, act(7), 3, 0, obs(8), true, out);
  ASSERT_EQ(out.size(), 3u);
  expect_transition(out[2], 7, 3, 0, 8);
}

// n = 1 is the one-step transition (o_t, a_t, r_t, γ d_t, o_{t+1}).
TEST(NStepAccumulatorTest, OneStepTransitions) {
  NStepAccumulator acc(1, 1, 0.99, 1, 1);
  std::vector<Transition> out;
  acc.start(0, obs(0));
  acc.add(0, act(0), 0.5f, 1, obs(1), false, out);
  acc.add(0, act(1), 2, 0, obs(2), true, out);
  ASSERT_EQ(out.size(), 2u);
  expect_transition(out[0], 0, 0.5, 0.99, 1);
  expect_transition(out[1], 1, 2, 0, 2);
}

// Two environments interleaved: each window holds its own env's steps only.
TEST(NStepAccumulatorTest, EnvironmentsAreKeptApart) {
  NStepAccumulator acc(2, 2, 0.5, 1, 1);
  std::vector<Transition> out;
  acc.start(0, obs(0));
  acc.start(1, obs(100));
  acc.add(0, act(0), 1, 1, obs(1), false, out);
  acc.add(1, act(100), 100, 1, obs(101), false, out);
  EXPECT_TRUE(out.empty());
  acc.add(1, act(101), 200, 1, obs(102), false, out);
  ASSERT_EQ(out.size(), 1u);
  expect_transition(out[0], 100, 100 + 0.5 * 200, 0.25, 102);
  acc.add(0, act(1), 2, 1, obs(2), false, out);
  ASSERT_EQ(out.size(), 2u);
  expect_transition(out[1], 0, 1 + 0.5 * 2, 0.25, 2);
}

TEST(NStepAccumulatorTest, RefusesBadArgumentsAndAddsNothing) {
  EXPECT_THROW(NStepAccumulator(0, 3, 0.9, 1, 1), InvalidArgument);
  EXPECT_THROW(NStepAccumulator(1, 0, 0.9, 1, 1), InvalidArgument);
  EXPECT_THROW(NStepAccumulator(1, 3, 1.5, 1, 1), InvalidArgument);
  NStepAccumulator acc(2, 2, 0.9, 1, 1);
  std::vector<Transition> out;
  EXPECT_THROW(acc.add(0, act(0), 1, 1, obs(1), false, out), InvalidArgument) << "no start()";
  EXPECT_THROW(acc.start(2, obs(0)), InvalidArgument);
  EXPECT_THROW(acc.start(0, std::vector<float>{1, 2}), InvalidArgument);
  acc.start(0, obs(0));
  EXPECT_THROW(acc.add(0, std::vector<float>{}, 1, 1, obs(1), false, out), InvalidArgument);
  EXPECT_THROW(acc.add(0, act(0), 1, 2, obs(1), false, out), InvalidArgument);
  EXPECT_THROW(acc.add(0, act(0), 1, 1, std::vector<float>{}, false, out), InvalidArgument);
  // None of the refused steps entered the window: the first good one completes nothing yet.
  acc.add(0, act(0), 1, 1, obs(1), false, out);
  EXPECT_TRUE(out.empty());
  acc.add(0, act(1), 1, 0, obs(2), true, out);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_THROW(acc.add(0, act(2), 1, 1, obs(3), false, out), InvalidArgument)
      << "the episode ended: the next needs start()";
}

// A transition that names its insertion index i in every field.
Transition numbered(int i) {
  const auto v = static_cast<float>(i);
  return Transition{.observation = {v},
                    .action = {v},
                    .reward = v,
                    .discount = 0.5f,
                    .next_observation = {v + 1}};
}

// Pearson's statistic of `counts` against a uniform expectation.
double chi_square(const std::vector<std::int64_t>& counts) {
  std::int64_t total = 0;
  for (const std::int64_t c : counts) total += c;
  const double expected = static_cast<double>(total) / static_cast<double>(counts.size());
  double chi = 0;
  for (const std::int64_t c : counts) {
    chi += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  }
  return chi;
}

// 10 cells, 9 degrees of freedom: P(χ² > 27.88) = 0.001 for a uniform sampler.
constexpr double kChiSquareBound = 27.88;

TEST(ReplayBufferTest, DrawsEveryItemAboutEquallyOften) {
  ReplayBuffer replay({.capacity = 10, .seed = 7});
  for (int i = 0; i < 10; ++i) replay.insert(numbered(i));
  std::vector<std::int64_t> counts(10, 0);
  for (int k = 0; k < 10000; ++k) {
    for (const Transition& t : replay.sample(100)) {
      ASSERT_EQ(t.observation[0], t.reward) << "a sample mixed two transitions";
      ++counts[static_cast<std::size_t>(t.reward)];
    }
  }
  EXPECT_LT(chi_square(counts), kChiSquareBound);
  // The bound has the power to see a sampler that favours one item by 5 %.
  std::mt19937_64 rng(7);
  std::vector<double> weights(10, 1.0);
  weights[0] = 1.05;
  std::discrete_distribution<int> biased(weights.begin(), weights.end());
  std::vector<std::int64_t> biased_counts(10, 0);
  for (int k = 0; k < 1000000; ++k) ++biased_counts[static_cast<std::size_t>(biased(rng))];
  EXPECT_GT(chi_square(biased_counts), kChiSquareBound);
}

TEST(ReplayBufferTest, EvictsTheOldestFirstAndSamplesOnlyWhatIsInside) {
  ReplayBuffer replay({.capacity = 10, .seed = 3});
  for (int i = 0; i < 27; ++i) replay.insert(numbered(i));
  EXPECT_EQ(replay.size(), 10u);
  EXPECT_EQ(replay.inserted(), 27);
  std::vector<std::int64_t> counts(10, 0);
  for (const Transition& t : replay.sample(100000)) {
    const int i = static_cast<int>(t.reward);
    ASSERT_GE(i, 17) << "transition " << i << " should have been evicted";
    ASSERT_LT(i, 27);
    ++counts[static_cast<std::size_t>(i - 17)];
  }
  // After a wrap of the ring the draws are still uniform over what is inside.
  EXPECT_LT(chi_square(counts), kChiSquareBound);
  for (const std::int64_t c : counts) EXPECT_GT(c, 0);
  // One more insert evicts exactly the oldest, 17.
  replay.insert(numbered(27));
  std::set<int> seen;
  for (const Transition& t : replay.sample(10000)) seen.insert(static_cast<int>(t.reward));
  EXPECT_EQ(seen, (std::set<int>{18, 19, 20, 21, 22, 23, 24, 25, 26, 27}));
}

TEST(ReplayBufferTest, TheSameSeedDrawsTheSameTransitions) {
  const auto draws = [](std::uint64_t seed) {
    ReplayBuffer replay({.capacity = 100, .seed = seed});
    for (int i = 0; i < 50; ++i) replay.insert(numbered(i));
    std::vector<float> out;
    for (const Transition& t : replay.sample(64)) out.push_back(t.reward);
    return out;
  };
  EXPECT_EQ(draws(1), draws(1));
  EXPECT_NE(draws(1), draws(2));
}

TEST(ReplayBufferTest, SamplingTooEarlyIsAClearError) {
  ReplayBuffer replay({.capacity = 10, .min_size = 5});
  EXPECT_THROW(replay.sample(1), InvalidArgument) << "empty";
  for (int i = 0; i < 4; ++i) replay.insert(numbered(i));
  try {
    replay.sample(8);
    FAIL() << "sampled from 4 transitions with min_size 5";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("holds 4 transitions"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("min_size = 5"), std::string::npos) << e.what();
  }
  replay.insert(numbered(4));
  EXPECT_EQ(replay.sample(8).size(), 8u);
  EXPECT_THROW(ReplayBuffer({.capacity = 0}), InvalidArgument);
  EXPECT_THROW(ReplayBuffer({.capacity = 4, .min_size = 0}), InvalidArgument);
  EXPECT_THROW(ReplayBuffer({.capacity = 4, .min_size = 5}), InvalidArgument);
}

// Actors insert while a learner samples: every draw is a whole transition that was
// inserted, and every insert is counted.
TEST(ReplayBufferTest, InsertsAndSamplesFromManyThreads) {
  constexpr int kActors = 4;
  constexpr int kEach = 2000;
  ReplayBuffer replay({.capacity = 1000, .min_size = 1, .seed = 9});
  replay.insert(numbered(0));
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> drawn{0};
  // Samples at least once, however the threads are scheduled (the buffer holds one already).
  std::thread learner([&] {
    do {
      for (const Transition& t : replay.sample(32)) {
        const int i = static_cast<int>(t.reward);
        ASSERT_TRUE(t.observation[0] == t.reward && t.next_observation[0] == t.reward + 1 &&
                    i >= 0 && i <= kActors * kEach);
        drawn.fetch_add(1);
      }
    } while (!stop.load());
  });
  std::vector<std::thread> actors;
  for (int a = 0; a < kActors; ++a) {
    actors.emplace_back([&, a] {
      for (int k = 0; k < kEach; ++k) replay.insert(numbered(1 + a * kEach + k));
    });
  }
  for (std::thread& t : actors) t.join();
  stop.store(true);
  learner.join();
  EXPECT_EQ(replay.inserted(), 1 + kActors * kEach);
  EXPECT_EQ(replay.size(), 1000u);
  EXPECT_GT(drawn.load(), 0);
}

}  // namespace
}  // namespace replicator::rl
