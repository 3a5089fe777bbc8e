// Data-parallel SGD on a linear model, the shape of every replicator training loop:
// each replica computes the gradient on its own shard, all_reduce averages the
// gradients, every replica applies the same update and so keeps the same weights.
//
//   REPLICATOR_LOCAL_REPLICAS=4 ./linear_regression
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "replicator/replicator.h"

int main() {
  using replicator::ReduceOp;
  replicator::Replicator repl(replicator::Config::from_env());
  constexpr int kFeatures = 8;
  constexpr int kPerReplica = 256;
  const std::vector<float> truth = {1.5f, -2.f, 0.5f, 3.f, -1.f, 0.25f, 2.f, -0.75f};

  struct Replica {
    std::vector<float> x, y, w, grad;
  };
  // Each replica's shard is drawn from its own seed, on its own thread.
  auto replicas = repl.per_replica([&](replicator::ReplicaContext& ctx) {
    Replica r{std::vector<float>(kPerReplica * kFeatures), std::vector<float>(kPerReplica),
              std::vector<float>(kFeatures, 0.f), std::vector<float>(kFeatures)};
    std::mt19937 rng(1234 + static_cast<unsigned>(ctx.replica_id()));
    std::normal_distribution<float> normal;
    for (int i = 0; i < kPerReplica; ++i) {
      float dot = 0.f;
      for (int f = 0; f < kFeatures; ++f) {
        r.x[i * kFeatures + f] = normal(rng);
        dot += r.x[i * kFeatures + f] * truth[f];
      }
      r.y[i] = dot + 0.01f * normal(rng);
    }
    return r;
  });

  for (int step = 0; step < 200; ++step) {
    auto loss = repl.run([&](replicator::ReplicaContext& ctx) {
      Replica& r = replicas[ctx];
      std::fill(r.grad.begin(), r.grad.end(), 0.f);
      float sq = 0.f;
      for (int i = 0; i < kPerReplica; ++i) {
        float err = -r.y[i];
        for (int f = 0; f < kFeatures; ++f) err += r.x[i * kFeatures + f] * r.w[f];
        sq += err * err;
        for (int f = 0; f < kFeatures; ++f)
          r.grad[f] += 2.f * err * r.x[i * kFeatures + f] / kPerReplica;
      }
      ctx.all_reduce(r.grad, {.op = ReduceOp::kMean});
      for (int f = 0; f < kFeatures; ++f) r.w[f] -= 0.05f * r.grad[f];
      return sq / kPerReplica;
    });
    if (step % 50 == 0 || step == 199) {
      std::printf("step %3d  loss %.6f\n", step, repl.reduce(ReduceOp::kMean, loss));
    }
  }
  float err = 0.f;
  for (int f = 0; f < kFeatures; ++f) err = std::max(err, std::fabs(replicas[0].w[f] - truth[f]));
  std::printf("replicas %d, max |w - truth| = %.4f\n", repl.num_replicas(), err);
  return err < 0.05f ? 0 : 1;
}
