// The learner's bits across layouts: R replicas (threads of one process, or processes under
// mpirun / `replicator launch`) update the same PolicyNet from the same synthetic batches of
// unrolls, each replica on its share; prints "digest R=<R> <hex>" of the final parameters
// from replica 0 (tests/rl/learner_layouts.sh compares the layouts). Every replica must end
// with the same bits. With LEARNER_SHARDS=S (tests/rl/learner_shards.sh) the learner runs 5
// updates on S logical shards, each replica on the unrolls of its shards: the same bits for
// every R up to S.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <vector>

#include "replicator/replicator.h"
#include "replicator/rl/learner.h"
#include "replicator/rl/policy.h"
#include "tests/rl/digest.h"

namespace rl = replicator::rl;

namespace {

std::vector<rl::Unroll> batch_of(int B, int T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<rl::Unroll> out(static_cast<std::size_t>(B));
  for (rl::Unroll& u : out) {
    u.length = T;
    u.observation_size = 4;
    u.num_actions = 2;
    for (int i = 0; i < (T + 1) * 4; ++i) u.observations.push_back(normal(rng));
    for (int t = 0; t < T; ++t) {
      u.actions.push_back(static_cast<std::int32_t>(rng() % 2));
      u.rewards.push_back(1.f);
      u.done.push_back(rng() % 9 == 0 ? 1 : 0);
      u.behaviour_logits.push_back(normal(rng));
      u.behaviour_logits.push_back(normal(rng));
    }
  }
  return out;
}

}  // namespace

int main() {
  at::set_num_threads(1);
  replicator::Replicator repl(replicator::Config::from_env());
  const int R = repl.num_replicas();
  const char* shards_env = std::getenv("LEARNER_SHARDS");
  const int shards = shards_env ? std::atoi(shards_env) : 0;
  std::mutex init;
  const auto digests = repl.run([&](replicator::ReplicaContext& ctx) {
    rl::PolicyNet model{nullptr};
    {
      std::lock_guard lock(init);
      torch::manual_seed(5);
      model = rl::PolicyNet(std::vector<int>{4}, 2, 32);
    }
    rl::Learner learner(ctx, model, {.learning_rate = 1e-3, .shards = shards});
    for (std::uint32_t k = 0; k < (shards > 0 ? 5u : 4u); ++k) {
      const std::vector<rl::Unroll> batch = batch_of(8, 10, 40 + k);
      std::size_t first = 0, share = 0;
      if (shards > 0) {  // the unrolls of this replica's shards
        const std::size_t per_shard = batch.size() / static_cast<std::size_t>(shards);
        first = static_cast<std::size_t>(learner.shard_range().first) * per_shard;
        share = static_cast<std::size_t>(learner.shard_range().size()) * per_shard;
      } else {
        share = batch.size() / static_cast<std::size_t>(R);
        first = static_cast<std::size_t>(ctx.replica_id()) * share;
      }
      learner.update(std::span(batch).subspan(first, share));
    }
    return replicator::rl::testing::digest(rl::flatten_parameters(*learner.model()));
  });
  return replicator::rl::testing::report(repl, digests);
}
