// ShardGradients: a small model with batch norm trained for a few steps on 8 logical shards
// ends with the same parameter and running-statistics bits on every replica count R <= 8,
// because every shard's gradient is the same computation (batch norm over the shard) and
// the shards are combined in the canonical tree over shard ids.
#include "replicator/torch/shard_gradients.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/batch_norm.h"

namespace {

namespace rt = replicator::torch;
using replicator::Config;
using replicator::ReplicaContext;
using replicator::Replicator;

constexpr int kShards = 8;
constexpr int kShardExamples = 6;
constexpr int kSteps = 4;

// Shard s of step t: examples drawn from (t, s) only, never from the replica count.
std::pair<torch::Tensor, torch::Tensor> shard_batch(int step, int shard) {
  torch::Generator gen = at::detail::createCPUGenerator(1000 + 17 * step + shard);
  torch::Tensor x = torch::randn({kShardExamples, 10}, gen);
  torch::Tensor y = torch::randint(0, 4, {kShardExamples}, gen);
  return {x, y};
}

std::uint64_t digest(const std::vector<torch::Tensor>& tensors) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& t : tensors) {
    const auto c = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// Trains a 10-16-4 MLP with batch norm for kSteps steps over kShards shards on `replicas`
// threads; returns every replica's digest of parameters and buffers.
std::vector<std::uint64_t> train(int replicas) {
  Replicator repl(Config{.local_replicas = replicas});
  const auto digests = repl.run([&](ReplicaContext& ctx) {
    torch::nn::Sequential model;
    {
      static std::mutex seeding;  // the seed is process-wide: one replica draws at a time
      const std::lock_guard lock(seeding);
      torch::manual_seed(7);
      model = torch::nn::Sequential(torch::nn::Linear(10, 16), rt::CrossReplicaBatchNorm1d(16),
                                    torch::nn::Tanh(), torch::nn::Linear(16, 4));
    }
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    rt::ShardGradients grads(ctx, model->parameters(), kShards, {.buffers = model->buffers()});
    const rt::ShardLocalBatchNorm per_shard;
    for (int step = 0; step < kSteps; ++step) {
      sgd.zero_grad();
      for (int s = grads.range().first; s < grads.range().last; ++s) {
        grads.begin_shard(s);
        const auto [x, y] = shard_batch(step, s);
        torch::nn::functional::cross_entropy(model->forward(x), y).backward();
        grads.add_shard(s);
      }
      grads.synchronize();
      sgd.step();
    }
    std::vector<torch::Tensor> state = model->parameters();
    for (const auto& b : model->buffers()) state.push_back(b);
    return static_cast<std::int64_t>(digest(state));
  });
  std::vector<std::uint64_t> out;
  for (int r = 0; r < replicas; ++r) out.push_back(static_cast<std::uint64_t>(digests[r]));
  return out;
}

TEST(ShardGradientsTest, SameParametersForEveryReplicaCount) {
  const std::vector<std::uint64_t> one = train(1);
  for (int replicas : {2, 3, 4, 5, 8}) {
    const std::vector<std::uint64_t> got = train(replicas);
    for (int r = 0; r < replicas; ++r) {
      EXPECT_EQ(got[static_cast<std::size_t>(r)], one[0])
          << "replica " << r << " of " << replicas << " ended with other parameters than R = 1";
    }
  }
}

TEST(ShardGradientsTest, RunningStatisticsMoveToTheShardsMean) {
  // One step of 4 shards on 2 replicas: the running mean is what each shard's forward made
  // of the starting value, averaged over the shards.
  Replicator repl(Config{.local_replicas = 2});
  repl.run([&](ReplicaContext& ctx) {
    rt::CrossReplicaBatchNorm1d bn(rt::CrossReplicaBatchNormOptions(1).momentum(0.5));
    rt::ShardGradients grads(ctx, bn->parameters(), 4, {.buffers = bn->buffers()});
    const rt::ShardLocalBatchNorm per_shard;
    for (int s = grads.range().first; s < grads.range().last; ++s) {
      grads.begin_shard(s);
      bn->forward(torch::full({2, 1}, static_cast<float>(s)) + torch::tensor({{0.0f}, {1.0f}}))
          .sum()
          .backward();
      grads.add_shard(s);
    }
    grads.synchronize();
    // Shard s has values s and s + 1: mean s + 0.5, unbiased variance 0.5.
    EXPECT_FLOAT_EQ(bn->running_mean.item<float>(), 0.5f * 2.0f);  // 0.5 * mean(0.5..3.5)
    EXPECT_FLOAT_EQ(bn->running_var.item<float>(), 0.5f * 1.0f + 0.5f * 0.5f);
    EXPECT_EQ(bn->num_batches_tracked.item<std::int64_t>(), 1);
  });
}

TEST(ShardGradientsTest, WithBuffersEveryShardMustBeBegun) {
  Replicator repl(Config{.local_replicas = 1});
  repl.run([&](ReplicaContext& ctx) {
    rt::CrossReplicaBatchNorm1d bn(2);
    rt::ShardGradients grads(ctx, bn->parameters(), 2, {.buffers = bn->buffers()});
    EXPECT_THROW(grads.begin_shard(1), replicator::InvalidArgument);
    grads.begin_shard(0);
    grads.add_shard(0);
    EXPECT_THROW(grads.add_shard(1), replicator::InvalidArgument);  // not begun
  });
}

TEST(ShardGradientsTest, RefusesMixedDtypesAndShardsOutOfOrder) {
  Replicator repl(Config{.local_replicas = 2});
  repl.run([&](ReplicaContext& ctx) {
    auto a = torch::zeros({3}, torch::kFloat32).requires_grad_();
    auto b = torch::zeros({3}, torch::kFloat64).requires_grad_();
    EXPECT_THROW(rt::ShardGradients(ctx, {a, b}, 4), replicator::InvalidArgument);
    EXPECT_THROW(rt::ShardGradients(ctx, {a}, 1), replicator::InvalidArgument);  // 2 > 1 shard
    rt::ShardGradients grads(ctx, {a}, 4);
    (a * 2).sum().backward();
    // Out of order: refused, and the gradient is left as backward made it.
    EXPECT_THROW(grads.add_shard(grads.range().first + 1), replicator::InvalidArgument);
    EXPECT_TRUE(torch::equal(a.grad(), torch::full({3}, 2.0f)));
    grads.add_shard(grads.range().first);
    EXPECT_TRUE(torch::equal(a.grad(), torch::zeros({3})));          // taken, and zeroed
    EXPECT_THROW(grads.synchronize(), replicator::InvalidArgument);  // one shard missing
  });
}

}  // namespace
