#include "replicator/torch/conditional_batch_norm.h"

#include <torch/torch.h>

#include <string>

#include "replicator/errors.h"

namespace replicator::torch {

ConditionalBatchNorm2dImpl::ConditionalBatchNorm2dImpl(const ConditionalBatchNormOptions& options_)
    : options(options_) {
  reset();
}

void ConditionalBatchNorm2dImpl::reset() {
  bn = register_module("bn",
                       CrossReplicaBatchNorm2d(CrossReplicaBatchNormOptions(options.num_features())
                                                   .eps(options.eps())
                                                   .momentum(options.momentum())
                                                   .affine(false)
                                                   .context(options.context())));
  const auto projection =
      ::torch::nn::LinearOptions(options.cond_features(), options.num_features()).bias(false);
  gain = register_module("gain", SNLinear(projection, options.spectral_norm()));
  bias = register_module("bias", SNLinear(projection, options.spectral_norm()));
}

::torch::Tensor ConditionalBatchNorm2dImpl::forward(const ::torch::Tensor& x,
                                                    const ::torch::Tensor& cond) {
  if (x.dim() != 4) {
    throw InvalidArgument("ConditionalBatchNorm2d expects [N, C, H, W], got " +
                          std::to_string(x.dim()) + " dimensions");
  }
  if (cond.dim() != 2 || cond.size(0) != x.size(0) || cond.size(1) != options.cond_features()) {
    throw InvalidArgument("ConditionalBatchNorm2d expects cond [" + std::to_string(x.size(0)) +
                          ", " + std::to_string(options.cond_features()) + "], got " +
                          std::to_string(cond.dim()) + " dimensions of sizes " +
                          c10::str(cond.sizes()));
  }
  const std::int64_t n = x.size(0);
  const std::int64_t c = options.num_features();
  const ::torch::Tensor g = (gain->forward(cond) + 1).view({n, c, 1, 1});
  const ::torch::Tensor b = bias->forward(cond).view({n, c, 1, 1});
  return ::torch::addcmul(b, bn->forward(x), g);
}

}  // namespace replicator::torch
