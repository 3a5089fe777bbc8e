// The D4PG learner's bits across layouts: R replicas (threads of one process, or processes
// under mpirun / `replicator launch`) update the same networks from the same synthetic
// batches of transitions, each replica on its share; prints "digest R=<R> <hex>" of the
// final parameters (policy, then critic) from replica 0 (tests/rl/learner_layouts.sh
// compares the layouts). Every replica must end with the same bits.
#include <torch/torch.h>

#include <cstdio>
#include <mutex>
#include <random>
#include <vector>

#include "replicator/replicator.h"
#include "replicator/rl/d4pg.h"
#include "replicator/rl/policy.h"
#include "tests/rl/digest.h"

namespace rl = replicator::rl;

namespace {

std::vector<rl::Transition> batch_of(int B, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<rl::Transition> out(static_cast<std::size_t>(B));
  for (rl::Transition& t : out) {
    t.observation = {normal(rng), normal(rng), normal(rng), normal(rng)};
    t.next_observation = {normal(rng), normal(rng), normal(rng), normal(rng)};
    t.action = {std::tanh(normal(rng))};
    t.reward = normal(rng);
    t.discount = rng() % 7 == 0 ? 0.f : 0.97f;
  }
  return out;
}

// This replica's learner, from the same networks as every other replica's: LibTorch's
// default generator is shared by the replica threads, so they draw one at a time.
rl::D4pgLearner make_learner(replicator::ReplicaContext& ctx) {
  static std::mutex init;
  std::unique_lock lock(init);
  torch::manual_seed(5);
  rl::DeterministicPolicy policy(4, rl::ActionBounds{{-1.f}, {1.f}}, std::vector<int>{32, 32});
  rl::DistributionalCritic critic(4, 1, 21, std::vector<int>{32, 32});
  lock.unlock();
  return rl::D4pgLearner(ctx, policy, critic,
                         {.policy_learning_rate = 1e-3,
                          .critic_learning_rate = 1e-3,
                          .support = {.v_min = -10, .v_max = 10, .num_atoms = 21},
                          .target_update_period = 2});
}

}  // namespace

int main() {
  at::set_num_threads(1);
  replicator::Replicator repl(replicator::Config::from_env());
  const auto digests = repl.run([&](replicator::ReplicaContext& ctx) {
    rl::D4pgLearner learner = make_learner(ctx);
    const auto share = static_cast<std::size_t>(16 / repl.num_replicas());
    for (std::uint32_t k = 0; k < 4; ++k) {
      const std::vector<rl::Transition> batch = batch_of(16, 40 + k);
      learner.update(
          std::span(batch).subspan(static_cast<std::size_t>(ctx.replica_id()) * share, share));
    }
    std::vector<float> all = rl::flatten_parameters(*learner.policy());
    const std::vector<float> c = rl::flatten_parameters(*learner.critic());
    all.insert(all.end(), c.begin(), c.end());
    return replicator::rl::testing::digest(all);
  });
  return replicator::rl::testing::report(repl, digests);
}
