// Data-parallel training of the classifier's ResNet (examples/models/resnet.h) on local
// replicas: each replica takes its slice of every global batch, the network's cross-replica
// batch norms normalise with the statistics of the whole global batch, and
// ReplicatedOptimizer averages the gradients before each step, so every replica keeps the
// same weights and takes the step one replica would take on the whole batch. Synthetic
// images stand in for Fashion-MNIST (`replicator train classifier` trains this network on
// it). Prints the loss of each step; exits 1 unless it fell and the replicas agree.
//
//   ./data_parallel_resnet [replicas]      (2 by default; threads of this process)
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

#include "examples/models/resnet.h"
#include "replicator/replicator.h"
#include "replicator/torch.h"

namespace rt = replicator::torch;
using replicator::examples::ResNet;

constexpr std::int64_t kGlobalBatch = 32;
constexpr int kSteps = 12;

// Global batch `step`, the same on every replica: images of class c are noise with a
// bright row 2c + 4.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  at::Generator g = at::detail::createCPUGenerator(static_cast<std::uint64_t>(step));
  const torch::Tensor labels = at::randint(10, {kGlobalBatch}, g, torch::kLong);
  const torch::Tensor bar = torch::arange(28).view({1, 28}).eq((2 * labels + 4).view({-1, 1}));
  const torch::Tensor images = 0.5 * at::randn({kGlobalBatch, 1, 28, 28}, g, torch::kFloat) +
                               bar.to(torch::kFloat).view({kGlobalBatch, 1, 28, 1});
  return {images, labels};
}

struct Outcome {
  double first_loss = 0, last_loss = 0;
  double digest = 0;  // of the weights, to compare the replicas'
};

int main(int argc, char** argv) {
  const int replicas = argc > 1 ? std::atoi(argv[1]) : 2;
  if (replicas < 1 || kGlobalBatch % replicas != 0) {
    std::fprintf(stderr, "the replicas must divide the global batch of %lld\n",
                 static_cast<long long>(kGlobalBatch));
    return 2;
  }
  replicator::Replicator repl(replicator::Config{.local_replicas = replicas});
  at::set_num_threads(1);  // one core per replica thread
  std::mutex init;

  // One run() for the whole training: the optimizer holds the replica's context.
  const replicator::PerReplica<Outcome> outcomes = repl.run([&](replicator::ReplicaContext& ctx) {
    ResNet model{nullptr};
    {
      const std::lock_guard<std::mutex> lock(init);  // the default generator is shared
      torch::manual_seed(0);
      model = ResNet();
      rt::to_memory_format(*model, memory_format(model->options()));  // channels last
    }
    rt::broadcast_parameters(ctx, *model);  // start from replica 0's weights
    rt::ReplicatedOptimizer optimizer(
        ctx, std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1).momentum(0.9)));
    const std::int64_t per_replica = kGlobalBatch / replicas;
    Outcome outcome;
    for (int step = 0; step < kSteps; ++step) {
      auto [images, labels] = global_batch(step);
      const std::int64_t begin = ctx.replica_id() * per_replica;  // this replica's slice
      optimizer.zero_grad();
      const torch::Tensor loss =
          torch::cross_entropy_loss(model->forward(images.narrow(0, begin, per_replica)),
                                    labels.narrow(0, begin, per_replica));
      loss.backward();
      optimizer.step();  // gradients averaged over replicas, then SGD

      const torch::Tensor mean = loss.detach().clone();
      rt::all_reduce(ctx, mean, {.op = replicator::ReduceOp::kMean});
      outcome.last_loss = mean.item<double>();
      if (step == 0) outcome.first_loss = outcome.last_loss;
      if (ctx.replica_id() == 0) std::printf("step %2d  loss %.4f\n", step, outcome.last_loss);
    }
    for (const torch::Tensor& p : model->parameters()) outcome.digest += p.sum().item<double>();
    return outcome;
  });

  for (int r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r].last_loss >= outcomes[r].first_loss ||
        outcomes[r].digest != outcomes[0].digest) {
      std::fprintf(stderr, "the loss did not fall, or the replicas' weights differ\n");
      return 1;
    }
  }
  std::printf("%d replicas: the loss fell, and every replica has the same weights\n", replicas);
  return 0;
}
