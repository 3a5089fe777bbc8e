#include "examples/models/resnet.h"

namespace replicator::examples {
namespace {

namespace nn = ::torch::nn;
using replicator::torch::CrossReplicaBatchNorm2d;

nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

ResidualBlockImpl::ResidualBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride) {
  conv1_ = register_module("conv1", conv(in, out, 3, stride));
  bn1_ = register_module("bn1", CrossReplicaBatchNorm2d(out));
  conv2_ = register_module("conv2", conv(out, out, 3, 1));
  bn2_ = register_module("bn2", CrossReplicaBatchNorm2d(out));
  if (stride != 1 || in != out) {
    project_ = register_module("project", conv(in, out, 1, stride));
    project_bn_ = register_module("project_bn", CrossReplicaBatchNorm2d(out));
  }
}

::torch::Tensor ResidualBlockImpl::forward(const ::torch::Tensor& x) {
  ::torch::Tensor y = ::torch::relu(bn1_(conv1_(x)));
  y = bn2_(conv2_(y));
  const ::torch::Tensor skip = project_ ? project_bn_(project_(x)) : x;
  return ::torch::relu(y + skip);
}

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  const std::int64_t first = options.widths.front();
  stem_ = register_module("stem", conv(1, first, 3, 1));
  stem_bn_ = register_module("stem_bn", CrossReplicaBatchNorm2d(first));
  std::int64_t in = first;
  for (std::size_t i = 0; i < options.widths.size(); ++i) {
    const std::int64_t out = options.widths[i];
    blocks_.push_back(
        register_module("block" + std::to_string(i), ResidualBlock(in, out, i == 0 ? 1 : 2)));
    in = out;
  }
  head_ = register_module("head", nn::Linear(in, options.classes));
}

::torch::Tensor ResNetImpl::forward(const ::torch::Tensor& images) {
  return logits(features(images));
}

::torch::Tensor ResNetImpl::features(const ::torch::Tensor& images) {
  ::torch::Tensor x = ::torch::relu(stem_bn_(stem_(images)));
  for (ResidualBlock& block : blocks_) x = block(x);
  return ::torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
}

::torch::Tensor ResNetImpl::logits(const ::torch::Tensor& features) { return head_(features); }

}  // namespace replicator::examples
