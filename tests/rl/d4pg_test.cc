// D4PG: the networks (actions inside their bounds, the critic's logits), the batch of
// transitions, one learner update against the same update written out here with plain
// Adam, the target networks' periodic copy, the replicated learner (R = 2 and 4 replicas
// on shares give R = 1's parameters on the whole batch), and learning a one-step task.
#include "replicator/rl/d4pg.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/policy.h"

namespace replicator::rl {
namespace {

const ActionBounds kBounds{.low = {-1.f, 0.f}, .high = {1.f, 2.f}};
const CategoricalSupport kSupport{.v_min = -5, .v_max = 5, .num_atoms = 11};

// B transitions with 3 observation values and 2 actions inside kBounds.
std::vector<Transition> synthetic_transitions(int B, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0, 1);
  std::vector<Transition> out(static_cast<std::size_t>(B));
  for (Transition& t : out) {
    for (int i = 0; i < 3; ++i) t.observation.push_back(normal(rng));
    for (int i = 0; i < 3; ++i) t.next_observation.push_back(normal(rng));
    t.action = {2 * unit(rng) - 1, 2 * unit(rng)};
    t.reward = 2 * normal(rng);
    t.discount = rng() % 5 == 0 ? 0.f : 0.99f * 0.99f;
  }
  return out;
}

struct Networks {
  DeterministicPolicy policy{nullptr};
  DistributionalCritic critic{nullptr};
};

// The same networks for every caller with the same seed (LibTorch's default generator is
// shared by the replica threads: draw under a lock).
Networks networks(std::uint64_t seed) {
  static std::mutex init;
  std::lock_guard lock(init);
  ::torch::manual_seed(seed);
  return {DeterministicPolicy(3, kBounds, std::vector<int>{16, 16}),
          DistributionalCritic(3, 2, kSupport.num_atoms, std::vector<int>{16, 16})};
}

const D4pgOptions kOptions{.policy_learning_rate = 1e-3,
                           .critic_learning_rate = 1e-3,
                           .support = kSupport,
                           .target_update_period = 2};

TEST(D4pgNetworksTest, ActionsStayInsideTheirBoundsAndTheCriticGivesLogits) {
  Networks n = networks(1);
  const ::torch::Tensor obs = ::torch::randn({64, 3}) * 100;
  const ::torch::Tensor a = n.policy->forward(obs);
  ASSERT_EQ(a.sizes(), (std::vector<std::int64_t>{64, 2}));
  EXPECT_GE(a.select(1, 0).min().item<float>(), -1.f);
  EXPECT_LE(a.select(1, 0).max().item<float>(), 1.f);
  EXPECT_GE(a.select(1, 1).min().item<float>(), 0.f);
  EXPECT_LE(a.select(1, 1).max().item<float>(), 2.f);
  EXPECT_EQ(n.critic->forward(obs, a).sizes(), (std::vector<std::int64_t>{64, 11}));
  EXPECT_THROW(
      DeterministicPolicy(3, ActionBounds{.low = {1.f}, .high = {1.f}}, std::vector<int>{4}),
      InvalidArgument);
  EXPECT_THROW(DeterministicPolicy(3, ActionBounds{.low = {0.f}, .high = {}}, std::vector<int>{4}),
               InvalidArgument);
  EXPECT_THROW(DistributionalCritic(3, 2, 1, std::vector<int>{4}), InvalidArgument);
}

TEST(D4pgLearnerTest, StackTransitionsAndRefusals) {
  const std::vector<Transition> ts = synthetic_transitions(4, 2);
  const TransitionBatch batch = stack_transitions(ts);
  EXPECT_EQ(batch.observations.sizes(), (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(batch.actions.sizes(), (std::vector<std::int64_t>{4, 2}));
  EXPECT_FLOAT_EQ(batch.next_observations[2][1].item<float>(), ts[2].next_observation[1]);
  EXPECT_FLOAT_EQ(batch.rewards[3].item<float>(), ts[3].reward);
  EXPECT_FLOAT_EQ(batch.discounts[1].item<float>(), ts[1].discount);
  std::vector<Transition> bad = ts;
  bad[1].action.pop_back();
  EXPECT_THROW(stack_transitions(bad), InvalidArgument);
  EXPECT_THROW(stack_transitions({}), InvalidArgument);

  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(1);
    D4pgOptions other = kOptions;
    other.support.num_atoms = 7;
    EXPECT_THROW(D4pgLearner(ctx, n.policy, n.critic, other), InvalidArgument);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    TransitionBatch wrong = stack_transitions(ts);
    wrong.actions = wrong.actions.slice(1, 0, 1);
    EXPECT_THROW(learner.update(wrong), InvalidArgument);
  });
}

// One update, written out with plain Adam on copies of the same networks: the critic's
// cross-entropy with the projected target, the policy's −mean Q through the critic, both
// from the networks before the update, and neither gradient leaking into the other network.
TEST(D4pgLearnerTest, OneUpdateIsTheTwoLossesStepByAdam) {
  const std::vector<Transition> ts = synthetic_transitions(16, 5);
  const TransitionBatch b = stack_transitions(ts);
  Networks ref = networks(4);
  ::torch::optim::Adam critic_adam(ref.critic->parameters(), ::torch::optim::AdamOptions(1e-3));
  ::torch::optim::Adam policy_adam(ref.policy->parameters(), ::torch::optim::AdamOptions(1e-3));
  {
    ::torch::Tensor target;
    {
      const ::torch::NoGradGuard no_grad;
      const ::torch::Tensor next =
          ref.critic->forward(b.next_observations, ref.policy->forward(b.next_observations));
      target = categorical_projection(::torch::softmax(next, 1), b.rewards, b.discounts, kSupport);
    }
    const ::torch::Tensor critic_loss =
        -(target * ::torch::log_softmax(ref.critic->forward(b.observations, b.actions), 1))
             .sum(1)
             .mean();
    // The policy's loss through a frozen copy of the critic.
    Networks frozen = networks(4);
    for (::torch::Tensor& p : frozen.critic->parameters()) p.set_requires_grad(false);
    const ::torch::Tensor policy_loss =
        -categorical_mean(
             frozen.critic->forward(b.observations, ref.policy->forward(b.observations)), kSupport)
             .mean();
    critic_adam.zero_grad();
    policy_adam.zero_grad();
    critic_loss.backward();
    policy_loss.backward();
    critic_adam.step();
    policy_adam.step();
  }

  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(4);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    const D4pgStats stats = learner.update(b);
    EXPECT_TRUE(std::isfinite(stats.critic_loss) && stats.critic_loss > 0);
    const std::vector<float> critic = flatten_parameters(*learner.critic());
    const std::vector<float> want_critic = flatten_parameters(*ref.critic);
    const std::vector<float> policy = flatten_parameters(*learner.policy());
    const std::vector<float> want_policy = flatten_parameters(*ref.policy);
    ASSERT_EQ(critic.size(), want_critic.size());
    ASSERT_EQ(policy.size(), want_policy.size());
    for (std::size_t i = 0; i < critic.size(); ++i) {
      ASSERT_NEAR(critic[i], want_critic[i], 1e-6) << "critic parameter " << i;
    }
    for (std::size_t i = 0; i < policy.size(); ++i) {
      ASSERT_NEAR(policy[i], want_policy[i], 1e-6) << "policy parameter " << i;
    }
  });
}

// The targets are the networks as they were at the last copy: the initial ones until
// target_update_period (2) updates, then the online ones of that moment.
TEST(D4pgLearnerTest, TargetsAreCopiedEveryPeriod) {
  const std::vector<Transition> ts = synthetic_transitions(8, 9);
  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(6);
    const std::vector<float> initial = flatten_parameters(*n.critic);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    EXPECT_EQ(flatten_parameters(*learner.target_critic()), initial);
    learner.update(ts);
    EXPECT_EQ(flatten_parameters(*learner.target_critic()), initial);
    EXPECT_NE(flatten_parameters(*learner.critic()), initial);
    learner.update(ts);
    EXPECT_EQ(learner.updates(), 2);
    EXPECT_EQ(flatten_parameters(*learner.target_critic()), flatten_parameters(*learner.critic()));
    EXPECT_EQ(flatten_parameters(*learner.target_policy()), flatten_parameters(*learner.policy()));
    learner.update(ts);
    EXPECT_NE(flatten_parameters(*learner.target_critic()), flatten_parameters(*learner.critic()));
  });
}

// A learner resumed at update 3 of a period of 2 copies into its targets after its next
// update (the 4th), as the learner without the stop would; a negative count is refused.
TEST(D4pgLearnerTest, ResumedLearnerKeepsThePeriodsPhase) {
  const std::vector<Transition> ts = synthetic_transitions(8, 9);
  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(6);
    const std::vector<float> initial = flatten_parameters(*n.critic);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    EXPECT_THROW(learner.resume_at(-1), InvalidArgument);
    learner.resume_at(3);
    learner.update(ts);
    EXPECT_EQ(learner.updates(), 4);
    EXPECT_EQ(flatten_parameters(*learner.target_critic()), flatten_parameters(*learner.critic()));
    EXPECT_NE(flatten_parameters(*learner.critic()), initial);
  });
}

// Making a learner (its target networks) draws nothing from LibTorch's default generator,
// which the other replica threads may be drawing their networks from.
TEST(D4pgLearnerTest, MakingALearnerDrawsNothingFromTheGenerator) {
  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(6);
    ::torch::manual_seed(8);
    const ::torch::Tensor want = ::torch::rand({4});
    ::torch::manual_seed(8);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    EXPECT_TRUE(::torch::equal(::torch::rand({4}), want));
  });
}

// Parameters (policy then critic) after the updates with R local replicas, each on its share.
std::vector<float> learn(int R, const std::vector<std::vector<Transition>>& batches) {
  Config config;
  config.local_replicas = R;
  Replicator repl(config);
  const auto params = repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(11);
    D4pgLearner learner(ctx, n.policy, n.critic, kOptions);
    for (const std::vector<Transition>& batch : batches) {
      const std::size_t share = batch.size() / static_cast<std::size_t>(R);
      learner.update(
          std::span(batch).subspan(static_cast<std::size_t>(ctx.replica_id()) * share, share));
    }
    std::vector<float> all = flatten_parameters(*learner.policy());
    const std::vector<float> critic = flatten_parameters(*learner.critic());
    all.insert(all.end(), critic.begin(), critic.end());
    return all;
  });
  for (const std::vector<float>& p : params) EXPECT_EQ(p, params[0]) << "replicas differ";
  return params[0];
}

TEST(D4pgLearnerTest, TwoReplicasOnSharesEqualOneOnTheWholeBatch) {
  std::vector<std::vector<Transition>> batches;
  for (std::uint32_t k = 0; k < 5; ++k) batches.push_back(synthetic_transitions(16, 100 + k));
  const std::vector<float> one = learn(1, batches);
  const std::vector<float> two = learn(2, batches);
  const std::vector<float> four = learn(4, batches);
  ASSERT_EQ(one.size(), two.size());
  ASSERT_EQ(one.size(), four.size());
  // Relative to each parameter's size, 1e-3 at least.
  const ::torch::Tensor reference = ::torch::tensor(one, ::torch::kFloat64);
  const ::torch::Tensor scale = reference.abs().clamp_min(1e-3);
  for (const std::vector<float>* other : {&two, &four}) {
    const ::torch::Tensor error = (::torch::tensor(*other, ::torch::kFloat64) - reference).abs();
    EXPECT_LT((error / scale).max().item<double>(), 1e-5);
  }
  EXPECT_EQ(learn(2, batches), two) << "the same replica count gives the same bits";
  Networks initial = networks(11);
  std::vector<float> start = flatten_parameters(*initial.policy);
  const std::size_t policy_size = start.size();
  EXPECT_FALSE(std::equal(start.begin(), start.end(), one.begin())) << "the policy moved";
  start = flatten_parameters(*initial.critic);
  EXPECT_FALSE(std::equal(start.begin(), start.end(), one.begin() + policy_size))
      << "the critic moved";
}

// A one-step task (discount 0): reward −4 (a − 0.5)² for the first action, whatever the
// observation; actions drawn uniformly from the bounds. The critic learns the reward's
// distribution and the policy moves from a ≈ 0 (its initial tanh) to the best action, 0.5.
TEST(D4pgLearnerTest, LearnsTheBestActionOfAOneStepTask) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0, 1);
  Replicator repl(Config{});
  repl.run([&](ReplicaContext& ctx) {
    Networks n = networks(21);
    D4pgOptions options = kOptions;
    options.target_update_period = 10;
    // The critic learns faster than the policy moves: a policy that runs ahead of its critic
    // saturates tanh at a bound and stays there long after the critic is right.
    options.policy_learning_rate = 1e-4;
    options.critic_learning_rate = 3e-3;
    D4pgLearner learner(ctx, n.policy, n.critic, options);
    D4pgStats first{};
    D4pgStats last{};
    for (int k = 0; k < 800; ++k) {
      std::vector<Transition> batch(32);
      for (Transition& t : batch) {
        t.observation = {normal(rng), normal(rng), normal(rng)};
        t.next_observation = t.observation;
        t.action = {2 * unit(rng) - 1, 2 * unit(rng)};
        t.reward = -4 * (t.action[0] - 0.5f) * (t.action[0] - 0.5f);
        t.discount = 0;
      }
      last = learner.update(batch);
      if (k == 0) first = last;
    }
    EXPECT_LT(last.critic_loss, first.critic_loss);
    const ::torch::Tensor a = learner.policy()->forward(::torch::randn({64, 3}));
    EXPECT_LT((a.select(1, 0) - 0.5).abs().mean().item<float>(), 0.2f);
  });
}

}  // namespace
}  // namespace replicator::rl
