// The classifier of `replicator train classifier` (apps/train/classifier.h): a small ResNet
// for 28x28 grey images. A 3x3 stem, then one residual block per stage (two 3x3
// convolutions, each followed by cross-replica batch norm; a 1x1 projection when the shape
// changes), halving the resolution and doubling the width per stage (16, 32, 64 channels at
// 28, 14, 7 pixels), global average pooling and a linear layer. About 0.08 M parameters and
// 20 MFLOP per image forward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "replicator/torch/batch_norm.h"
#include "replicator/torch/memory_format.h"

namespace replicator::examples {

struct ResNetOptions {
  std::vector<std::int64_t> widths{16, 32, 64};
  std::int64_t classes = 10;
  // Activations (and, through to_memory_format, weights) laid out channels last: the same
  // network, faster convolutions on CPU (oneDNN runs them without reordering its input,
  // weights and output on every call).
  bool channels_last = true;
};

// The layout of the network's 4-dimensional weights and activations under `options`.
inline c10::MemoryFormat memory_format(const ResNetOptions& options) {
  return replicator::torch::memory_format_of(options.channels_last);
}

class ResidualBlockImpl : public ::torch::nn::Module {
 public:
  ResidualBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride);
  ::torch::Tensor forward(const ::torch::Tensor& x);

 private:
  ::torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, project_{nullptr};
  replicator::torch::CrossReplicaBatchNorm2d bn1_{nullptr}, bn2_{nullptr}, project_bn_{nullptr};
};
class ResidualBlock : public ::torch::nn::ModuleHolder<ResidualBlockImpl> {
 public:
  using ::torch::nn::ModuleHolder<ResidualBlockImpl>::ModuleHolder;
};

class ResNetImpl : public ::torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options = {});
  // [N, 1, 28, 28] float images → [N, classes] logits: logits(features(images)).
  ::torch::Tensor forward(const ::torch::Tensor& images);
  // [N, 1, 28, 28] float images → [N, widths.back()]: the penultimate layer, after global
  // average pooling, before the linear head (the features in which `replicator eval`
  // measures Fréchet distances).
  ::torch::Tensor features(const ::torch::Tensor& images);
  // [N, widths.back()] features → [N, classes] logits (the linear head).
  ::torch::Tensor logits(const ::torch::Tensor& features);
  const ResNetOptions& options() const { return options_; }

 private:
  ResNetOptions options_;
  ::torch::nn::Conv2d stem_{nullptr};
  replicator::torch::CrossReplicaBatchNorm2d stem_bn_{nullptr};
  std::vector<ResidualBlock> blocks_;
  ::torch::nn::Linear head_{nullptr};
};
class ResNet : public ::torch::nn::ModuleHolder<ResNetImpl> {
 public:
  using ::torch::nn::ModuleHolder<ResNetImpl>::ModuleHolder;
};

}  // namespace replicator::examples
