// Reading a checkpoint from its bytes in memory: what load_checkpoint does once it has read
// the file, and what the fuzzer (tests/fuzz) feeds.
//
// With its .cc, compiled on its own by the fuzz build (clang 14, tests/fuzz), which builds
// none of the LibTorch libraries.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <string_view>

#include "replicator/torch/checkpoint.h"

namespace replicator::torch::detail {

// The archive key of optimizer `i`: "optimizer", "optimizer1", "optimizer2", ...
std::string optimizer_key(std::size_t i);

// Restores the checkpoint `bytes` (as save_checkpoint writes them; `name` names them in
// errors) into `model`, `optimizers` and LibTorch's default CPU generator, and returns the
// position. Throws DataError, whose path() is `name`, when the bytes are not a whole zip
// archive, when LibTorch cannot read them, or when they do not fit the model (checked
// before the model changes) or hold another number of optimizers. Never blocks.
TrainingPosition load_checkpoint_bytes(std::string_view bytes, const std::string& name,
                                       ::torch::nn::Module& model, const Optimizers& optimizers);

}  // namespace replicator::torch::detail
