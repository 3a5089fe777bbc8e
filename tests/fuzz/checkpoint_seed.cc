// Writes the seed of the checkpoint fuzz target: a checkpoint of checkpoint_model.h's model
// after one training step (so the optimizer holds momentum), by save_checkpoint itself, and
// checks that it loads back.
// Usage: checkpoint_seed FILE
#include <cstdio>

#include "replicator/torch/checkpoint.h"
#include "tests/fuzz/checkpoint_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  ::torch::manual_seed(1);
  replicator::fuzz::CheckpointNet net;
  const auto optimizer = replicator::fuzz::make_checkpoint_optimizer(net);
  optimizer->zero_grad();
  net.forward(::torch::randn({4, 3})).square().sum().backward();
  optimizer->step();
  replicator::torch::save_checkpoint(argv[1], net, *optimizer, {.step = 1, .epoch = 0, .batch = 1});
  // A seed that does not load would leave the fuzzer outside the loader's later stages.
  replicator::fuzz::CheckpointNet loaded;
  const auto loaded_optimizer = replicator::fuzz::make_checkpoint_optimizer(loaded);
  if (replicator::torch::load_checkpoint(argv[1], loaded, *loaded_optimizer).step != 1) {
    std::fprintf(stderr, "%s: the checkpoint written does not load back\n", argv[0]);
    return 1;
  }
  return 0;
}
