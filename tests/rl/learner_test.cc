// The actor-learner pieces: the policy network and its flat parameters, the actor's unrolls
// (aligned with the environment and the policy that acted), and the replicated learner (R
// replicas on shares of a batch give R = 1's update on the whole batch).
#include "replicator/rl/learner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/actor.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/policy.h"

namespace replicator::rl {
namespace {

TEST(PolicyNetTest, ShapesOfBothTorsosAndFlatParametersRoundTrip) {
  ::torch::manual_seed(1);
  PolicyNet mlp(std::vector<int>{4}, 2, 32);
  const PolicyOutput a = mlp->forward(::torch::randn({5, 4}));
  EXPECT_EQ(a.logits.sizes(), (std::vector<std::int64_t>{5, 2}));
  EXPECT_EQ(a.value.sizes(), (std::vector<std::int64_t>{5}));
  PolicyNet conv(std::vector<int>{10, 10, 4}, 6, 64);
  const PolicyOutput b = conv->forward(::torch::rand({3, 400}));
  EXPECT_EQ(b.logits.sizes(), (std::vector<std::int64_t>{3, 6}));

  PolicyNet other(std::vector<int>{10, 10, 4}, 6, 64);
  const std::vector<float> flat = flatten_parameters(*conv);
  load_parameters(*other, flat);
  EXPECT_EQ(flatten_parameters(*other), flat);
  const ::torch::Tensor x = ::torch::rand({2, 400});
  EXPECT_TRUE(::torch::equal(other->forward(x).logits, conv->forward(x).logits));
  EXPECT_THROW(load_parameters(*mlp, flat), InvalidArgument);
  EXPECT_THROW(PolicyNet(std::vector<int>{4, 4}, 2, 8), InvalidArgument);
  EXPECT_THROW(PolicyNet(std::vector<int>{4}, 0, 8), InvalidArgument);
}

TEST(ParameterStoreTest, PublishedVersionsOnlyGoUpAndReplaceTakesAny) {
  ParameterStore store;
  EXPECT_EQ(store.version(), 0);
  EXPECT_EQ(store.latest(), nullptr);
  store.publish(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 1, .parameters = {1}}));
  EXPECT_EQ(store.version(), 1);
  EXPECT_THROW(store.publish(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 1})),
               InvalidArgument);
  EXPECT_THROW(store.publish(nullptr), InvalidArgument);
  EXPECT_EQ(store.latest()->parameters, std::vector<float>{1});
  // replace() takes any version of at least 1: a restarted learner's.
  store.publish(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 9, .parameters = {9}}));
  store.replace(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 2, .parameters = {2}}));
  EXPECT_EQ(store.version(), 2);
  EXPECT_EQ(store.latest()->parameters, std::vector<float>{2});
  EXPECT_THROW(store.replace(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 0})),
               InvalidArgument);
  EXPECT_THROW(store.replace(nullptr), InvalidArgument);
  EXPECT_EQ(store.version(), 2);
}

// A publish wakes the waiter: without it the wait would end at its deadline a minute on
// (and return true, the version being above by then), so it must end within 30 s.
TEST(ParameterStoreTest, AWaitForANewerVersionEndsWhenOneIsPublishedOrAtItsDeadline) {
  ParameterStore store;
  const auto now = std::chrono::steady_clock::now;
  EXPECT_FALSE(store.wait_for_version_above(0, now() + std::chrono::milliseconds(20)));
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.publish(std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 1}));
  });
  const auto start = now();
  EXPECT_TRUE(store.wait_for_version_above(0, start + std::chrono::seconds(60)));
  EXPECT_LT(now() - start, std::chrono::seconds(30));
  publisher.join();
  EXPECT_TRUE(store.wait_for_version_above(0, now()));  // already above: no wait
  EXPECT_FALSE(store.wait_for_version_above(1, now()));
}

// An actor's unrolls, checked against the environment and the policy: every behaviour logit
// is the published policy's at that observation (to rounding: the actor evaluates its 4
// environments together, the test an unroll's 11 observations, and a BLAS may round
// products of different row counts differently; a logit of another policy or observation
// is off by far more), every unroll carries T steps and its
// bootstrap observation, episodes restart from CartPole's initial states, nothing is
// duplicated, and the counters add up.
TEST(ActorTest, UnrollsFollowTheEnvironmentAndThePublishedPolicy) {
  ::torch::manual_seed(3);
  PolicyNet model(std::vector<int>{4}, 2, 16);
  ParameterStore store;
  store.publish(std::make_shared<PolicySnapshot>(
      PolicySnapshot{.version = 1, .parameters = flatten_parameters(*model)}));
  TrajectoryQueue<Unroll> queue({.max_size = 1000});
  EpisodeLog log;
  ActorCounters counters;
  const ActorOptions options{.env = "cartpole", .envs = 4, .unroll = 10, .hidden = 16, .seed = 5};
  Actor actor(0, options, store, queue, log, counters);
  std::atomic<bool> stop{false};
  std::thread thread([&] { actor.run(stop); });
  std::vector<Unroll> got;
  while (got.size() < 60) got.push_back(queue.sample(std::chrono::seconds(30)));
  stop = true;
  queue.close();
  thread.join();

  std::vector<std::int64_t> sequences;
  std::int64_t done_steps = 0;
  for (const Unroll& u : got) {
    ASSERT_TRUE(u.consistent());
    EXPECT_EQ(u.length, 10);
    EXPECT_EQ(u.policy_version, 1);
    sequences.push_back(u.sequence);
    ::torch::NoGradGuard no_grad;
    const ::torch::Tensor obs =
        ::torch::from_blob(const_cast<float*>(u.observations.data()), {11, 4}, ::torch::kFloat32);
    const ::torch::Tensor logits = model->forward(obs).logits.contiguous();
    for (int t = 0; t < 10; ++t) {
      for (int a = 0; a < 2; ++a) {
        const float want = logits[t][a].item<float>();
        EXPECT_NEAR(u.behaviour_logits[static_cast<std::size_t>(t * 2 + a)], want,
                    1e-6f + 1e-5f * std::abs(want));
      }
      EXPECT_EQ(u.rewards[static_cast<std::size_t>(t)], 1.f);
      if (u.done[static_cast<std::size_t>(t)] != 0) {
        ++done_steps;
        // The next observation starts a new episode: CartPole's initial state.
        for (int k = 0; k < 4; ++k) {
          if (t + 1 < 10) {
            EXPECT_LE(std::abs(u.observations[static_cast<std::size_t>((t + 1) * 4 + k)]), 0.05f);
          }
        }
      }
    }
  }
  std::sort(sequences.begin(), sequences.end());
  EXPECT_EQ(std::adjacent_find(sequences.begin(), sequences.end()), sequences.end());
  EXPECT_GE(counters.unrolls.load(), 60);
  EXPECT_GE(counters.frames.load(), 600);
  EXPECT_GT(done_steps, 0);
  EXPECT_GT(log.size(), 0u);
  EXPECT_LE(log.size(), static_cast<std::size_t>(counters.frames.load()));
}

std::vector<Unroll> synthetic_unrolls(int B, int T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> action(0, 1);
  std::vector<Unroll> out(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) {
    Unroll& u = out[static_cast<std::size_t>(b)];
    u.length = T;
    u.observation_size = 4;
    u.num_actions = 2;
    u.sequence = b;
    for (int i = 0; i < (T + 1) * 4; ++i) u.observations.push_back(normal(rng));
    for (int t = 0; t < T; ++t) {
      u.actions.push_back(action(rng));
      u.rewards.push_back(normal(rng));
      u.done.push_back(rng() % 7 == 0 ? 1 : 0);
      u.behaviour_logits.push_back(normal(rng));
      u.behaviour_logits.push_back(normal(rng));
    }
  }
  return out;
}

// Parameters after one learner update per batch with R local replicas: each on its share of
// the batch, or with `shards` logical shards on the unrolls of its shard range.
std::vector<float> learn(int R, const std::vector<std::vector<Unroll>>& batches, int shards = 0) {
  Config config;
  config.local_replicas = R;
  Replicator repl(config);
  std::mutex init;
  const auto params = repl.run([&](ReplicaContext& ctx) {
    PolicyNet model{nullptr};
    {
      std::lock_guard lock(init);
      ::torch::manual_seed(11);
      model = PolicyNet(std::vector<int>{4}, 2, 16);
    }
    Learner learner(ctx, model, {.learning_rate = 1e-3, .shards = shards});
    // Without shards every replica is one shard of R.
    const int parts = shards == 0 ? R : shards;
    const ShardRange range =
        shards == 0 ? ShardRange{ctx.replica_id(), ctx.replica_id() + 1} : learner.shard_range();
    for (const std::vector<Unroll>& batch : batches) {
      const std::size_t per_part = batch.size() / static_cast<std::size_t>(parts);
      learner.update(std::span(batch).subspan(static_cast<std::size_t>(range.first) * per_part,
                                              static_cast<std::size_t>(range.size()) * per_part));
    }
    return flatten_parameters(*learner.model());
  });
  for (const std::vector<float>& p : params) EXPECT_EQ(p, params[0]) << "replicas differ";
  return params[0];
}

// The largest difference between `a` and `b` relative to |a| (at least 1e-3).
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-3, static_cast<double>(std::abs(a[i])));
    worst = std::max(worst, std::abs(static_cast<double>(b[i]) - a[i]) / scale);
  }
  return worst;
}

TEST(LearnerTest, TwoReplicasOnSharesEqualOneOnTheWholeBatch) {
  std::vector<std::vector<Unroll>> batches;
  for (std::uint32_t k = 0; k < 3; ++k) batches.push_back(synthetic_unrolls(8, 5, 100 + k));
  const std::vector<float> one = learn(1, batches);
  const std::vector<float> two = learn(2, batches);
  const std::vector<float> four = learn(4, batches);
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), four.size());
  EXPECT_LT(worst_relative(one, two), 1e-5);
  EXPECT_LT(worst_relative(one, four), 1e-5);
  // The same replica count gives the same bits, run after run.
  EXPECT_EQ(learn(2, batches), two);
  // The parameters moved.
  ::torch::manual_seed(11);
  PolicyNet initial(std::vector<int>{4}, 2, 16);
  EXPECT_NE(flatten_parameters(*initial), one);
}

TEST(LearnerTest, OnShardsEveryReplicaCountGivesTheSameBits) {
  // 5 updates on fixed unrolls, 4 shards of 2 unrolls each.
  std::vector<std::vector<Unroll>> batches;
  for (std::uint32_t k = 0; k < 5; ++k) batches.push_back(synthetic_unrolls(8, 5, 300 + k));
  const std::vector<float> one = learn(1, batches, 4);
  for (int R : {2, 3, 4}) EXPECT_EQ(learn(R, batches, 4), one) << R << " replicas";
  // The sum over shards is the whole batch's gradient up to rounding.
  const std::vector<float> plain = learn(1, batches);
  ASSERT_EQ(plain.size(), one.size());
  EXPECT_LT(worst_relative(one, plain), 1e-4);
}

TEST(LearnerTest, OnShardsAShareThatDoesNotSplitIsRefused) {
  Config config;
  config.local_replicas = 1;
  Replicator repl(config);
  repl.run([&](ReplicaContext& ctx) {
    Learner learner(ctx, PolicyNet(std::vector<int>{4}, 2, 16), {.shards = 2});
    const std::vector<Unroll> three = synthetic_unrolls(3, 5, 7);
    EXPECT_THROW(learner.update(three), InvalidArgument);
  });
}

TEST(LearnerTest, StackUnrollsIsTimeMajorAndRefusesMismatches) {
  std::vector<Unroll> unrolls = synthetic_unrolls(3, 4, 7);
  const UnrollBatch batch = stack_unrolls(unrolls, {.discount = 0.9});
  EXPECT_EQ(batch.observations.sizes(), (std::vector<std::int64_t>{5, 3, 4}));
  EXPECT_EQ(batch.behaviour_logits.sizes(), (std::vector<std::int64_t>{4, 3, 2}));
  EXPECT_EQ(batch.actions[2][1].item<std::int64_t>(), unrolls[1].actions[2]);
  EXPECT_FLOAT_EQ(batch.observations[4][2][3].item<float>(), unrolls[2].observations[4 * 4 + 3]);
  EXPECT_FLOAT_EQ(batch.discounts[1][0].item<float>(), unrolls[0].done[1] ? 0.f : 0.9f);
  unrolls[1].length = 3;
  EXPECT_THROW(stack_unrolls(unrolls, {}), InvalidArgument);
  EXPECT_THROW(stack_unrolls({}, {}), InvalidArgument);
}

}  // namespace
}  // namespace replicator::rl
