// The exploration actor: actions are the policy's plus Gaussian noise of the asked size,
// clipped to the bounds; a noiseless actor takes the policy's actions; the steps become
// n-step transitions that follow the environment (one per step of every episode, cut at the
// time limit, none across the reset step); the same seed gives the same actions.
#include "replicator/rl/exploration_actor.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/policy.h"

namespace replicator::rl {
namespace {

DeterministicPolicy point_mass_policy(std::uint64_t seed) {
  ::torch::manual_seed(seed);
  return DeterministicPolicy(2, ActionBounds{{-1.f}, {1.f}}, std::vector<int>{8});
}

// The policy's own actions at the env's current observations.
std::vector<float> greedy(DeterministicPolicy& policy, const ContinuousEnv& env) {
  const ::torch::NoGradGuard no_grad;
  const StepResult now = env.last();
  const ::torch::Tensor obs = ::torch::from_blob(const_cast<float*>(now.observations.data()),
                                                 {env.num_envs(), 2}, ::torch::kFloat32);
  const ::torch::Tensor a = policy->forward(obs).contiguous();
  return std::vector<float>(a.data_ptr<float>(), a.data_ptr<float>() + a.numel());
}

TEST(ExplorationActorTest, NoiseOfTheAskedSizeAroundThePolicy) {
  auto env = make_continuous_env("point_mass", 16, 3);
  DeterministicPolicy policy = point_mass_policy(1);
  // Zero the last layer: the policy says 0 everywhere, far from the bounds for σ = 0.1.
  {
    const ::torch::NoGradGuard no_grad;
    const auto params = policy->parameters();
    params[params.size() - 2].zero_();
    params[params.size() - 1].zero_();
  }
  ExplorationActor actor(*env, policy, {.noise_std = 0.1, .n_step = 3, .seed = 4});
  std::vector<Transition> out;
  double sum = 0;
  double squares = 0;
  int count = 0;
  for (int t = 0; t < 100; ++t) {
    actor.step(out);
    for (const float a : actor.last_actions()) {
      sum += a;
      squares += static_cast<double>(a) * a;
      ++count;
    }
  }
  const double mean = sum / count;
  const double std = std::sqrt(squares / count - mean * mean);
  EXPECT_NEAR(mean, 0, 0.01);    // 1600 draws: the standard error is 0.0025
  EXPECT_NEAR(std, 0.1, 0.006);  // and about 0.0018 for the deviation
}

TEST(ExplorationActorTest, NoiselessActsAsThePolicyAndSeedsRepeat) {
  auto env = make_continuous_env("point_mass", 4, 3);
  DeterministicPolicy policy = point_mass_policy(2);
  ExplorationActor actor(*env, point_mass_policy(2), {.noise_std = 0});
  std::vector<Transition> out;
  for (int t = 0; t < 5; ++t) {
    const std::vector<float> want = greedy(policy, *env);
    actor.step(out);
    EXPECT_EQ(actor.last_actions(), want) << "step " << t;
  }
  const auto actions = [](std::uint64_t seed) {
    auto e = make_continuous_env("point_mass", 4, 3);
    ExplorationActor a(*e, point_mass_policy(2), {.noise_std = 1.0, .seed = seed});
    std::vector<Transition> ignored;
    std::vector<float> all;
    for (int t = 0; t < 5; ++t) {
      a.step(ignored);
      all.insert(all.end(), a.last_actions().begin(), a.last_actions().end());
    }
    return all;
  };
  EXPECT_EQ(actions(7), actions(7));
  EXPECT_NE(actions(7), actions(8));
  for (const float a : actions(7)) {  // σ = 1: many would leave [−1, 1] unclipped
    EXPECT_GE(a, -1.f);
    EXPECT_LE(a, 1.f);
  }
}

// Two episodes of 50 steps and the reset step between them: 50 transitions per episode and
// env; with n = 3 the last two of each are cut at the time limit and keep γ^m.
TEST(ExplorationActorTest, TransitionsFollowTheEpisodes) {
  auto env = make_continuous_env("point_mass", 2, 3);
  ExplorationActor actor(*env, point_mass_policy(2),
                         {.noise_std = 0.3, .n_step = 3, .discount = 0.5, .seed = 1});
  std::vector<Transition> out;
  for (int t = 0; t < 50; ++t) actor.step(out);
  ASSERT_EQ(out.size(), 100u);
  EXPECT_EQ(actor.episode_returns().size(), 2u);
  int cut = 0;
  for (const Transition& tr : out) {
    if (tr.discount == 0.125f) continue;
    ++cut;
    EXPECT_TRUE(tr.discount == 0.25f || tr.discount == 0.5f) << tr.discount;
  }
  EXPECT_EQ(cut, 4);
  actor.step(out);  // the reset step: nothing completes
  EXPECT_EQ(out.size(), 100u);
  for (int t = 0; t < 3; ++t) actor.step(out);
  ASSERT_EQ(out.size(), 102u) << "the new episodes' first windows are full";
  // The first transition of env 0's new episode starts at rest, where the episode starts.
  EXPECT_EQ(out[100].observation[1], 0.f);
  EXPECT_LE(out[100].reward, 0.f);  // −x² rewards
}

TEST(ExplorationActorTest, RefusesAPolicyForAnotherEnvironment) {
  auto env = make_continuous_env("point_mass", 1, 0);
  ::torch::manual_seed(0);
  EXPECT_THROW(
      ExplorationActor(
          *env, DeterministicPolicy(3, ActionBounds{{-1.f}, {1.f}}, std::vector<int>{4}), {}),
      InvalidArgument);
  EXPECT_THROW(
      ExplorationActor(
          *env, DeterministicPolicy(2, ActionBounds{{-2.f}, {2.f}}, std::vector<int>{4}), {}),
      InvalidArgument);
  EXPECT_THROW(ExplorationActor(*env, point_mass_policy(0), {.noise_std = -1}), InvalidArgument);
}

}  // namespace
}  // namespace replicator::rl

namespace replicator::rl {
namespace {

// The pieces together on the point mass: an actor with noise fills a replay buffer, the
// learner samples it and the actor takes the learner's policy every 10 updates. The greedy
// policy then brings the mass to 0 and holds it there, far better than leaving it where it
// starts (u = 0: a return of −50 x0²).
TEST(ExplorationActorTest, ActorReplayAndLearnerHoldThePointMassAtZero) {
  ::torch::manual_seed(3);
  DeterministicPolicy policy(2, ActionBounds{{-1.f}, {1.f}}, std::vector<int>{32, 32});
  DistributionalCritic critic(2, 1, 51, std::vector<int>{64, 64});
  auto env = make_continuous_env("point_mass", 8, 1);
  ExplorationActor actor(
      *env, DeterministicPolicy(2, ActionBounds{{-1.f}, {1.f}}, std::vector<int>{32, 32}),
      {.noise_std = 0.3, .n_step = 3, .discount = 0.9, .seed = 2});
  actor.load_policy(flatten_parameters(*policy));
  ReplayBuffer replay({.capacity = 100000, .min_size = 256, .seed = 5});
  Replicator repl(Config{});
  std::vector<float> returns;
  repl.run([&](ReplicaContext& ctx) {
    D4pgLearner learner(ctx, policy, critic,
                        {.policy_learning_rate = 1e-3,
                         .critic_learning_rate = 1e-3,
                         .support = {.v_min = -30, .v_max = 0, .num_atoms = 51},
                         .target_update_period = 50});
    std::vector<Transition> out;
    for (int k = 0; k < 800; ++k) {
      out.clear();
      actor.step(out);
      for (Transition& t : out) replay.insert(std::move(t));
      if (replay.size() < 256) continue;
      learner.update(replay.sample(64));
      if (learner.updates() % 10 == 0) actor.load_policy(flatten_parameters(*learner.policy()));
    }
    auto test_env = make_continuous_env("point_mass", 16, 99);
    ExplorationActor greedy(*test_env, learner.policy(), {.noise_std = 0});
    std::vector<Transition> ignored;
    for (int t = 0; t < 50; ++t) greedy.step(ignored);
    returns = greedy.episode_returns();
  });
  ASSERT_EQ(returns.size(), 16u);
  double mean = 0;
  for (const float r : returns) mean += r / 16.0;
  // The same 16 starts left alone.
  auto still = make_continuous_env("point_mass", 16, 99);
  const std::vector<float> zeros(16, 0.f);
  StepResult r = still->last();
  for (int t = 0; t < 50; ++t) r = still->step(zeros);
  double resting = 0;
  for (const float e : r.episode_return) resting += e / 16.0;
  EXPECT_GT(mean, -5.0) << "left alone: " << resting;  // about −1.9 against −13.9
  EXPECT_GT(mean, resting / 4);
}

}  // namespace
}  // namespace replicator::rl
