// The model and optimizer whose checkpoints the checkpoint fuzz target loads, shared with the
// program that writes its seed (checkpoint_seed.cc): small, with a child module, a buffer and
// optimizer state, so a valid input reaches every part of the loader. Changing them makes
// the seed stale: write it again (tests/fuzz/README.md).
// C++17, like the loader: the fuzz build compiles LibTorch code as C++17.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace replicator::fuzz {

struct CheckpointNet : ::torch::nn::Module {
  CheckpointNet()
      : fc(register_module("fc", ::torch::nn::Linear(3, 2))),
        bn(register_module("bn", ::torch::nn::BatchNorm1d(2))) {}
  ::torch::Tensor forward(const ::torch::Tensor& x) { return bn(fc(x)); }

  ::torch::nn::Linear fc;
  ::torch::nn::BatchNorm1d bn;
};

// SGD with momentum: after a step it holds a momentum buffer per parameter.
inline std::unique_ptr<::torch::optim::SGD> make_checkpoint_optimizer(CheckpointNet& net) {
  return std::make_unique<::torch::optim::SGD>(net.parameters(),
                                               ::torch::optim::SGDOptions(0.1).momentum(0.9));
}

}  // namespace replicator::fuzz
